"""Record the ATen operators a program runs into a ``torch.fx`` graph.

The program runs as ordinary Python on fake tensors. Recording happens at
torch's pre-dispatch level, above autograd, so composite operators such as
``aten.linear`` and ``aten.conv2d`` stay whole: that is the training IR.
torch admits only its own proxy mode at that level, so the engine driven here
is ``make_fx(..., pre_dispatch=True)``. Everything around it — which inputs
exist, what they are called, what is lifted, what is mutated — belongs to the
other modules of ``graphcap.trace``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils.stateless import _reparametrize_module

from ..errors import GraphcapError, TraceError, UnsupportedError, describe_frame, user_frame
from ..pytree import auto_register, holds_tensor


@dataclass
class Recording:
    """What one trace produced: the raw graph and the output structure."""

    graph_module: torch.fx.GraphModule
    out_spec: pytree.TreeSpec
    out_paths: list  # key path of each flat output, for messages


@contextlib.contextmanager
def preserved_module_attributes(root: Optional[torch.nn.Module]):
    """Undo attribute writes the traced forward makes on the user's modules.

    Some models cache tensors on themselves during forward (timm's
    EfficientFormer keeps an ``attention_bias_cache`` dict). During export
    those would be fake tensors left behind in the user's model, breaking its
    next eager call, so plain attributes and the contents of dict/list
    attributes are put back as they were.
    """
    if root is None:
        yield
        return
    saved = []
    for mod in root.modules():
        state = {}
        for k, v in mod.__dict__.items():
            if k in ("_parameters", "_buffers", "_modules") or k.startswith(("_forward", "_backward")):
                state[k] = None  # nn.Module's own registries: restored by reparametrization
                continue
            copy = dict(v) if type(v) is dict else list(v) if type(v) is list else None
            state[k] = (v, copy)
        saved.append((mod, state))
    try:
        yield
    finally:
        for mod, state in saved:
            for k in [k for k in mod.__dict__ if k not in state]:
                if holds_tensor(mod.__dict__[k]):
                    del mod.__dict__[k]
            for k, entry in state.items():
                if entry is None:
                    continue
                v, copy = entry
                mod.__dict__[k] = v
                if copy is not None:
                    v.clear()
                    if isinstance(v, dict):
                        v.update(copy)
                    else:
                        v.extend(copy)


@contextlib.contextmanager
def _exporting_flags():
    """Make ``torch.compiler.is_compiling()`` / ``is_exporting()`` answer True.

    Libraries (transformers above all) pick export-friendly code paths — no
    data-dependent checks, no Python-side caches — when these say so.
    """
    saved = torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = saved


@contextlib.contextmanager
def _restore_grad_mode():
    enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch._C._set_grad_enabled(enabled)


def record(
    call: Callable[..., Any],
    root: Optional[torch.nn.Module],
    state_names: list[str],
    flat_inputs: list[Any],
    in_spec: pytree.TreeSpec,
    fake_mode: FakeTensorMode,
    program_name: str,
) -> Recording:
    """Trace ``call(*args, **kwargs)`` once on fake inputs.

    ``flat_inputs`` holds the fake parameters and buffers (named by
    ``state_names``, in that order) followed by the flat user inputs, whose
    structure is ``in_spec`` over ``(args, kwargs)``. The graph gets one
    placeholder per flat input, in the same order.
    """
    n_state = len(state_names)
    box: dict[str, Any] = {}

    def traced(*flat):
        state = dict(zip(state_names, flat[:n_state]))
        args, kwargs = pytree.tree_unflatten(list(flat[n_state:]), in_spec)
        ctx = (_reparametrize_module(root, state, tie_weights=True, strict=False, stack_weights=True)
               if root is not None else contextlib.nullcontext())
        with ctx:
            out = call(*args, **kwargs)
        auto_register(out, "outputs")
        flat_out, spec = pytree.tree_flatten_with_path(out)
        box["spec"] = spec
        box["paths"] = [p for p, _ in flat_out]
        return tuple(v for _, v in flat_out)

    if root is not None:
        traced._orig_mod = root  # lets make_fx record nn_module_stack against the user's module tree
    target = getattr(call, "__func__", call)
    if hasattr(target, "__code__"):
        torch.fx.proxy._register_stack_trace_anchor(target)

    try:
        with fake_mode, _exporting_flags(), _restore_grad_mode(), preserved_module_attributes(root):
            gm = make_fx(traced, pre_dispatch=True, record_module_stack=root is not None,
                         record_stack_traces=True)(*flat_inputs)
    except GraphcapError:
        raise
    except Exception as e:  # the user's program (or an operator) failed while tracing
        raise _explain_trace_failure(e, program_name) from e
    return Recording(gm, box["spec"], box["paths"])


def _explain_trace_failure(e: Exception, program_name: str) -> GraphcapError:
    frame = user_frame(e.__traceback__)
    where = describe_frame(frame)
    name = type(e).__name__
    text = str(e).strip().splitlines()[0] if str(e).strip() else name
    if "DataDependent" in name or "data-dependent" in str(e).lower():
        return UnsupportedError(
            f"While tracing {program_name}, the program branched on or read a value that depends on "
            f"tensor data ({name}: {text}).",
            where=where,
            fix="Export records shapes, not data. Avoid Python control flow on tensor values at this "
                "line: use torch.where / torch.cond, or bound the value with torch._check(...) so "
                "the branch can be decided for every input.")
    if "Please convert all Tensors to FakeTensors" in str(e) or "non-Fake Tensor" in str(e):
        return UnsupportedError(
            f"While tracing {program_name}, a real tensor reached an operator in a way graphcap cannot "
            f"lift ({text}).",
            where=where,
            fix="Register the tensor as a buffer (module.register_buffer) or pass it as an input.")
    return TraceError(
        f"{program_name} raised {name} while graphcap ran it on fake tensors: {text}",
        where=where,
        fix="Check that the example inputs are valid for the model (calling it eagerly with them "
            "should work). If it does run eagerly, the line above does something that needs real "
            "data — reading values with .item()/.tolist(), numpy, or printing tensors — move that "
            "out of forward or guard it with `if not torch.compiler.is_compiling():`.")
