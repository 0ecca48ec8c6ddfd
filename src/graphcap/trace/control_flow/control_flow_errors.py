"""Explain why a ``torch.cond`` or ``while_loop`` could not be captured.

When a branch pair cannot be captured, the error says which output differs
and how, or what the branch did that a subgraph cannot hold
(:func:`explain_failure`).
"""
from __future__ import annotations

import logging
import traceback
import types
from typing import Any, Optional

import torch

from ...errors import GraphcapError, UnsupportedError
from ...torch_private import pytree
from ...torch_private.fake import same_storage
from ...torch_private.messages import (
    blames_control_flow_capture,
    cond_call_locals,
    is_cond_container_operands_refusal,
    is_cond_dense_stride_refusal,
    uncapturable_branch_reason,
    while_loop_call_locals,
)
from ...user_frames import describe_frame, is_user_file, user_frame
from .branch_checks import BranchRefused


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{'an' if dtype[0] in 'aeiou' else 'a'} {dtype} tensor of shape {list(value.shape)}"
    return f"{type(value).__name__} {value!r}"


def _structure(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a single tensor"
    if isinstance(value, (tuple, list, dict)):
        return f"a {type(value).__name__} of {len(value)} ({len(pytree.tree_leaves(value))} leaves)"
    return _describe(value)


def _output_name(path) -> str:
    return f"output{pytree.keystr(path)}" if path else "the output"


def _difference(a: Any, b: Any) -> Optional[str]:
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return "one is a tensor and the other is not"
    if not isinstance(a, torch.Tensor):
        return None
    diffs = []
    if a.dtype != b.dtype:
        diffs.append(f"dtype {a.dtype} vs {b.dtype}")
    if a.dim() != b.dim():
        diffs.append(f"rank {a.dim()} vs {b.dim()}")
    elif list(a.shape) != list(b.shape):
        diffs.append(f"shape {list(a.shape)} vs {list(b.shape)}")
    if a.device != b.device:
        diffs.append(f"device {a.device} vs {b.device}")
    return ", ".join(diffs) or None


def _run_fake(fn, operands) -> Any:
    """Run a branch again on its fake operands, outside any recording, quietly."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    fake_mode = next((t.fake_mode for t in pytree.tree_leaves(operands) if hasattr(t, "fake_mode")), None)
    if fake_mode is None:
        raise ValueError("no fake operands")
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level, fake_log.disabled = fake_log.disabled, True
    try:
        with disable_proxy_modes_tracing(), fake_mode:
            return fn(*operands)
    finally:
        fake_log.disabled = level


def _same_storage(a: Any, b: Any) -> bool:
    return same_storage(a, b)


def _compare_branches(locals_: dict) -> Optional[tuple[str, str]]:
    """(what differs, how to fix) for a cond whose branches disagree, or None."""
    operands = locals_.get("operands", ())
    outs = []
    for side in ("true", "false"):
        try:
            outs.append(_run_fake(locals_[f"{side}_fn"], operands))
        except Exception as err:  # the branch itself fails on these operands
            text = str(err).strip().splitlines()[0] if str(err).strip() else ""
            return (f"the {side} branch raised {type(err).__name__}: {text}",
                    "Both branches are traced, whichever the example takes: each must run on the "
                    "operands given to torch.cond (same shapes and dtypes).")
    flat_in = pytree.tree_leaves(operands)
    for side, out in zip(("true", "false"), outs):
        for path, leaf in pytree.tree_flatten_with_path(out)[0]:
            if isinstance(leaf, torch.Tensor) and any(_same_storage(leaf, t) for t in flat_in):
                return (f"{_output_name(path)} of the {side} branch is one of its operands "
                        "(or a view of one); branches must return new tensors.",
                        "Return a copy, e.g. `return x.clone()` instead of `return x`.")
    (lt, st), (lf, sf) = (pytree.tree_flatten_with_path(o) for o in outs)
    if st != sf:
        return (f"the branches return different structures: the true branch returns "
                f"{_structure(outs[0])}, the false branch {_structure(outs[1])}.",
                "Return the same structure (same number of tensors, same containers) from both branches.")
    for (path, a), (_, b) in zip(lt, lf):
        diff = _difference(a, b)
        if diff:
            return (f"{_output_name(path)} differs between the branches ({diff}): the true branch "
                    f"returns {_describe(a)}, the false branch {_describe(b)}.",
                    "Make both branches return tensors of the same dtype and shape at every output "
                    "(cast with .to(dtype), reshape or expand), or compute the differing value outside "
                    "torch.cond.")
    return None


def _compare_loop_body(locals_: dict) -> Optional[tuple[str, str]]:
    """(what differs, how to fix) for a while_loop whose body changes what it carries, or None."""
    carried = locals_.get("carried_inputs", ())
    try:
        out = _run_fake(locals_["body_fn"], carried)
    except Exception:
        return None
    out = out if isinstance(out, (tuple, list)) else (out,)
    if len(out) != len(carried):
        return (f"the body returns {len(out)} value(s) for {len(carried)} carried input(s).",
                "Return one new value per carried input, in the same order.")
    for i, (before, after) in enumerate(zip(carried, out)):
        diff = _difference(before, after)
        if diff:
            return (f"carried value [{i}] changes from one iteration to the next ({diff}): it enters as "
                    f"{_describe(before)} and the body returns {_describe(after)}.",
                    "A loop carries values of fixed dtype and shape: make the body return each carried "
                    "value with the dtype and shape it came in with.")
    return None


def _operator_call_site(tb: Optional[types.TracebackType]):
    """The user's line that called the (outermost) control-flow operator, else the innermost user line."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    for before, frame in zip(frames, frames[1:]):
        if _in_hop_module(frame.filename) and user_frame_of([before]) is not None:
            return before
    return user_frame(tb)


def user_frame_of(frames: list) -> Any:
    """The frame of ``frames`` that is the user's (not torch's or graphcap's), if any."""
    for frame in frames:
        if is_user_file(frame.filename):
            return frame
    return None


def _in_hop_module(filename: str) -> bool:
    """A file of torch's control-flow operators, or graphcap's ``torch.cond`` entry in front of them."""
    path = filename.replace("\\", "/")
    return "_higher_order_ops" in path or path.endswith("graphcap/trace/control_flow/nested_cond_operands.py")


def _refusal(e: BaseException) -> Optional[BaseException]:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BranchRefused):
            return e
        e = e.__cause__ or e.__context__
    return None


def cond_dense_stride_refusal() -> tuple[str, str]:
    """What and how to fix, when torch 2.10-2.13's cond refuses a branch output it cannot tell dense
    (``is_cond_dense_stride_refusal``), strict or not."""
    return (f"torch.cond could not be captured: a branch's output has strides holding Max(1, ...) (a size "
            f"computed from a Dim, which this torch's shape checks cannot rule out being 0), and torch "
            f"{torch.__version__}'s cond refuses outputs it cannot tell dense. torch.export on this torch "
            f"refuses the same model; torch 2.14 and newer accept it.",
            "Install torch 2.14 or newer (pip install 'torch>=2.14'), or leave the dimension that size "
            "comes from static in dynamic_shapes (drop its Dim), or compute the size-changing operator "
            "outside torch.cond (`.contiguous()` in the branch does not help: the strides stay the same).")


def explain_failure(e: BaseException, program_name: str) -> Optional[GraphcapError]:
    """A graphcap error for a ``torch.cond`` or ``while_loop`` that could not be captured, or None."""
    refused = _refusal(e)
    if refused is not None:
        return UnsupportedError(f"While tracing {program_name}, {refused.operator} could not be captured: "
                                f"{refused.what}", where=describe_frame(_operator_call_site(e.__traceback__)),
                                fix=refused.fix)
    if is_cond_container_operands_refusal(e) and cond_call_locals(e.__traceback__):
        return UnsupportedError(
            f"While tracing {program_name}, torch.cond could not be captured: its operands hold a "
            "container (dict, list or tuple), and this `cond` was bound before the export "
            "(`from torch import cond` or functorch's control_flow.cond), so graphcap could not "
            "flatten them: torch's cond itself takes them flat unless dynamo compiles it.",
            where=describe_frame(user_frame(e.__traceback__)),
            fix="Call it as `torch.cond(...)` (graphcap flattens nested operands there), or pass the "
                "tensors one by one, e.g. `cond(p, t, f, (d['a'], d['b']))` with branches taking "
                "them as separate arguments.")
    if is_cond_dense_stride_refusal(e):
        what, fix = cond_dense_stride_refusal()
        return UnsupportedError(f"While tracing {program_name}, {what}",
                                where=describe_frame(user_frame(e.__traceback__)), fix=fix)
    locals_ = cond_call_locals(e.__traceback__)
    operator_name, found = "torch.cond", None
    if locals_ is not None and "true_fn" in locals_:
        found = _compare_branches(locals_)
    else:
        locals_ = while_loop_call_locals(e.__traceback__)
        if locals_ is None or "body_fn" not in locals_:
            return None
        operator_name, found = "while_loop", _compare_loop_body(locals_)
    if found is None:
        if not blames_control_flow_capture(e):
            return None
        found = (f"a branch or body does something the control-flow capture cannot record "
                 f"({uncapturable_branch_reason(e)}).",
                 "Keep branches and loop bodies to tensor operations on their operands: no Python side "
                 "effects (writes to self or globals), no in-place writes to operands, and outputs of "
                 "fixed metadata.")
    what, fix = found
    return UnsupportedError(f"While tracing {program_name}, {operator_name} could not be captured: {what}",
                            where=describe_frame(user_frame(e.__traceback__)), fix=fix)
