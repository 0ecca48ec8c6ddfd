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
import dataclasses
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from .. import device_advice, frame_stack, module_inputs
from ..errors import GraphcapError, InternalError, MissingFakeKernelError, TraceError, UnsupportedError
from ..pytree import auto_register
from ..torch_private import fake as fake_private
from ..torch_private import fx as fx_private
from ..torch_private import higher_order as higher_order_private
from ..torch_private import pytree
from ..torch_private import shapes as shapes_private
from ..torch_private.dispatch import set_grad_enabled
from ..torch_private.dynamo import DISABLE_METHOD_META_KEY, DYNAMO_META_KEY_PREFIX, exporting_flags_set
from ..torch_private.engine_files import engine_files
from ..torch_private.fake import FakeTensorMode, unsupported_operator_error
from ..torch_private.messages import (
    custom_op_without_fake_kernel,
    fake_device_mismatch,
    is_data_dependent_failure,
    is_real_tensor_under_fake_mode,
    two_devices,
)
from ..torch_private.modules import reparametrized
from ..torch_private.ops import OpOverload, schema_of
from ..torch_private.tensor_meta import tensor_metadata_cached
from ..user_frames import ENGINE_PACKAGE_DIRS, describe_frame, raised_internally, user_frame
from . import block_reuse, graph_module_replay, module_paths, python_overrides, recorder_shortcuts, subclass_access
from .control_flow import control_flow_errors, hop_capture
from .module_state import preserved_module_attributes, reassigned_buffers, seeding_told


@dataclass
class Recording:
    """What one trace produced: the raw graph and the output structure."""

    graph_module: torch.fx.GraphModule
    out_spec: pytree.TreeSpec
    # buffers forward gave a new tensor; their new values are the graph's last outputs, in this order
    reassigned_buffers: list[str] = dataclasses.field(default_factory=list)
    # the fake tensors of the trace, held weakly (for graphcap.trace.leaks)
    tracked: Any = None


@contextlib.contextmanager
def _exporting_flags():
    """Make ``torch.compiler.is_compiling()`` / ``is_exporting()`` answer True.

    Libraries (transformers above all) pick export-friendly code paths — no
    data-dependent checks, no Python-side caches — when these say so.
    """
    with exporting_flags_set():
        yield


@contextlib.contextmanager
def backend_neutral():
    """Trace with the cuDNN, MKL-DNN and NNPACK backends switched off.

    Some operators take the backend choice as an argument when the user's
    Python calls them (``F.batch_norm`` and ``F.layer_norm`` pass
    ``torch.backends.cudnn.enabled``); recorded as it is on the exporting
    machine, that choice would be baked into the program. torch.export traces
    with these backends off, so both record ``cudnn_enabled=False``.
    """
    backends = (torch.backends.cudnn, torch.backends.mkldnn, torch.backends.nnpack)
    saved = [backend.set_flags(False) for backend in backends]
    try:
        yield
    finally:
        for backend, flags in zip(backends, saved):
            backend.set_flags(*flags)


@contextlib.contextmanager
def _restore_grad_mode():
    enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        set_grad_enabled(enabled)


def _record_user_stack_traces(tracer: torch.fx.Tracer, reuse_of: Callable[[Callable[[Any], tuple],
                                                                            Callable[[tuple], str]], Any],
                              calling_frame: Any = None) -> tuple[Any, Callable[[], None]]:
    """Give each node the user frames of the stack that created it.

    torch's tracer formats the whole Python stack (50+ frames, each with its
    source line) for every node and then keeps only the ``forward`` frames;
    that is up to a third of an export. This walks the live frames and keeps
    them by the same rule — frames of a ``forward``, of functions registered
    as stack-trace anchors (the exported function), never torch's own files —
    and formats each distinct stack once: consecutive nodes mostly share it.

    ``calling_frame`` (the traced function's frame, or None): the frames from it up to the
    top of the stack stay where they are while the recording runs, so with the recorder's
    shortcuts on (:mod:`recorder_shortcuts`) their part of every stack is found once and a
    walk stops there; which code objects a stack keeps is remembered per code object too.

    ``reuse_of(frame_keys, format_keys)`` makes the block reuse of this recording (or None):
    it is told each node's frames, and makes the nodes of a replayed call itself.
    Returns the block reuse and a function to call when the recording ends (it lets go of
    ``calling_frame``).
    """
    anchors = fx_private.stack_trace_anchors()  # the live set: an anchor may come or go while recording
    internal = engine_files()
    create = tracer.create_node
    formatted: dict[tuple, str] = {}

    def kept(code: Any) -> bool:
        file, name = code.co_filename, code.co_name
        return (name == "forward" or file.endswith("torch/__init__.py") or (file, name) in anchors) \
            and file not in internal and file != graph_module_replay.REPLAY_FILE

    def frame_keys_walking_all(frame: Any) -> tuple:
        keys: list[tuple] = []
        while frame is not None:
            code = frame.f_code
            if kept(code):
                keys.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        return tuple(reversed(keys))

    stop: list[Any] = [calling_frame] if calling_frame is not None else []
    above_stop: list[tuple] = []  # the keys of the frames from the stop frame up, once found
    kept_by_code: dict[Any, bool] = {}
    anchors_seen: list[frozenset] = [frozenset(anchors)]

    def frame_keys_bounded(frame: Any) -> tuple:
        if anchors_seen[0] != anchors:  # an anchor came or went: decide each code and the top part again
            anchors_seen[0] = frozenset(anchors)
            kept_by_code.clear()
            above_stop.clear()
        end = stop[0] if stop else None
        keys: list[tuple] = []
        while frame is not None:
            if frame is end:
                if not above_stop:
                    above_stop.append(tuple(reversed(frame_keys_walking_all(frame))))
                keys.extend(above_stop[0])
                break
            code = frame.f_code
            keep = kept_by_code.get(code)
            if keep is None:
                keep = kept_by_code[code] = kept(code)
            if keep:
                keys.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        return tuple(reversed(keys))

    frame_keys = frame_keys_bounded if recorder_shortcuts.enabled() else frame_keys_walking_all

    def format_keys(stack: tuple) -> str:
        text = formatted.get(stack)
        if text is None:
            frames = [traceback.FrameSummary(f, line, n) for f, line, n in stack]
            text = "".join(traceback.StackSummary.from_list(frames).format()).strip()
            formatted[stack] = text
        return text

    reuse = reuse_of(frame_keys, format_keys)

    def create_node(*args, **kwargs):
        if reuse is not None and reuse.replaying is not None:
            return reuse.create_replayed(create, args, kwargs)
        node = create(*args, **kwargs)
        _drop_torch_disable_annotation(node, sys._getframe(1))
        stack = None
        if node.op not in ("placeholder", "output") and not node.stack_trace:
            stack = frame_keys(sys._getframe(1))
            if stack:
                node.stack_trace = format_keys(stack)
            elif node.op == "call_function":
                node.meta["stack_trace"] = None  # recorded: no user frame made it (e.g. a decorator's wrapper)
        if reuse is not None:
            reuse.note(node, stack, args[4] if len(args) > 4 else kwargs.get("name"))
        return node

    tracer.create_node = create_node
    return reuse, stop.clear


def _drop_torch_disable_annotation(node: torch.fx.Node, frame: Any) -> None:
    """Keep a ``torch._dynamo.disable`` annotation (``custom`` metadata, recorded under
    ``preserve_node_meta``) only when the disabled function is the user's.

    torch's own tracing machinery is disabled the same way and would annotate
    every node; a user's ``@torch._dynamo.disable`` method is a live frame
    outside torch's and graphcap's files while the node is made (a graphcap
    function that happens to share the disabled function's name is no such frame).
    """
    custom = node.meta.get("custom")
    if not isinstance(custom, dict) or DISABLE_METHOD_META_KEY not in custom:
        return
    method = custom[DISABLE_METHOD_META_KEY]
    while frame is not None:
        code = frame.f_code
        if code.co_name == method and not code.co_filename.startswith(ENGINE_PACKAGE_DIRS):
            node.meta["custom"] = dict(custom)  # not shared with the nodes made after it
            return
        frame = frame.f_back
    kept = {k: v for k, v in custom.items() if not str(k).startswith(DYNAMO_META_KEY_PREFIX)}
    if kept:
        node.meta["custom"] = kept
    else:
        del node.meta["custom"]


@dataclass
class _TracedCallResults:
    """What the traced function learns while ``make_fx`` runs it, read once the trace is done."""

    out_spec: Optional[pytree.TreeSpec] = None
    # the buffers forward reassigned, in the order their new values follow the user's outputs
    reassigned: list[str] = dataclasses.field(default_factory=list)
    tracked: Any = None  # the tracer's fake tensor -> proxy map (weak)


@contextlib.contextmanager
def _recording_surroundings(target: Any, root: Optional[torch.nn.Module], fake_mode: FakeTensorMode,
                            flat_inputs: list[Any]) -> Iterator[None]:
    """Everything one recording runs inside, entered in this order and left in the reverse one."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(fx_private.stack_trace_anchor(target))  # the exported function's frames are the user's
        stack.enter_context(fake_mode)
        stack.enter_context(_exporting_flags())
        stack.enter_context(backend_neutral())
        stack.enter_context(_restore_grad_mode())
        stack.enter_context(preserved_module_attributes(root))
        stack.enter_context(hop_capture.capturing(root))
        stack.enter_context(python_overrides.installed())
        stack.enter_context(fake_private.slice_ends_clamped_symbolically())
        stack.enter_context(fake_private.copies_check_broadcast_only())
        stack.enter_context(higher_order_private.compile_regions_inlined())
        stack.enter_context(subclass_access.recorded(flat_inputs))
        stack.enter_context(tensor_metadata_cached())
        stack.enter_context(fx_private.code_generated_on_first_use())
        if recorder_shortcuts.enabled():
            stack.enter_context(fx_private.dropped_stack_traces_skipped())
        yield


def record(
    call: Callable[..., Any],
    root: Optional[torch.nn.Module],
    state_names: list[str],
    flat_inputs: list[Any],
    in_spec: pytree.TreeSpec,
    fake_mode: FakeTensorMode,
    program_name: str,
    buffer_names: Optional[list[str]] = None,
) -> Recording:
    """Trace ``call(*args, **kwargs)`` once on fake inputs.

    ``flat_inputs`` holds the fake parameters and buffers (named by
    ``state_names``, in that order) followed by the flat user inputs, whose
    structure is ``in_spec`` over ``(args, kwargs)``. The graph gets one
    placeholder per flat input, in the same order. Its outputs are the flat
    user outputs, then the new tensor of each buffer (of ``buffer_names``)
    that forward reassigned.
    """
    n_state = len(state_names)
    results = _TracedCallResults()
    scope = module_paths.ScopeRoot(root) if root is not None else None

    def traced(*flat):
        # The top-level tracer's nodes get graphcap's stack recording (_record_user_stack_traces), so
        # torch's own (costly) recording is switched off on this one tracer instance: subgraph tracers
        # (torch.cond branches, ...), made inside this call, keep it, and no process-wide flag changes.
        tracer = fx_private.current_make_fx_tracer().fx_tracer
        tracer.record_stack_traces = False
        block_reuse.LAST_STATS.clear()
        reuse, end_stack_recording = _record_user_stack_traces(tracer, lambda keys, fmt: (
            block_reuse.BlockReuse(tracer, scope, root, fake_mode, keys, fmt)
            if scope is not None and block_reuse.reuse_enabled() else None), sys._getframe())
        results.tracked = getattr(tracer, "tensor_tracker", None)
        state = dict(zip(state_names, flat[:n_state]))
        args, kwargs = module_inputs.unwrap(pytree.tree_unflatten(list(flat[n_state:]), in_spec))
        ctx = (reparametrized(root, state, tie_weights=True, strict=False, stack_weights=True)
               if root is not None else contextlib.nullcontext())
        try:
            with ctx:
                out = frame_stack.with_room(module_paths.traced_call(scope, call, root) if root is not None else call,
                                            *args, **kwargs)
                reassigned = (reassigned_buffers(root, state, buffer_names or [], program_name)
                              if root is not None else {})
        finally:
            end_stack_recording()
            if reuse is not None:
                reuse.close()
        auto_register(out, "outputs")
        flat_out, results.out_spec = pytree.tree_flatten(out)
        results.reassigned = list(reassigned)
        return tuple(flat_out) + tuple(reassigned.values())

    if scope is not None:
        # lets make_fx record nn_module_stack against the user's module tree
        fx_private.set_module_stack_root(traced, scope)
    target = getattr(call, "__func__", call)
    try:
        with seeding_told(program_name) as recorded, \
                _recording_surroundings(target, root, fake_mode, flat_inputs):
            # sizes given by a ShapeVar are unbacked symbols the inputs bind: their placeholders say so
            input_bindings = shapes_private.claim_input_bindings(fake_mode.shape_env, flat_inputs)
            gm = make_fx(traced, pre_dispatch=True, record_module_stack=root is not None,
                         record_stack_traces=True)(*flat_inputs)
            recorded.append(gm)
        _bind_placeholders(gm, input_bindings)
        fx_private.generate_code_of_submodules(gm)  # subgraphs stay in the program: plain modules
    except GraphcapError:
        raise
    except Exception as e:  # the user's program (or an operator) failed while tracing
        raise _explain_trace_failure(e, program_name, root) from e
    _drop_failed_calls(gm)
    module_paths.normalize_module_stacks(gm)
    assert results.out_spec is not None  # make_fx returned: the traced function ran to its end
    return Recording(gm, results.out_spec, results.reassigned, results.tracked)


def _drop_failed_calls(gm: torch.fx.GraphModule) -> None:
    """Remove operator calls that raised while tracing (the user caught the error).

    The recorder adds a node before the operator runs; when the operator then
    raises (``x.view(-1, 7)`` inside a ``try``), the node stays, without a
    ``val`` and unused, and would raise again every time the program runs.
    """
    erased = False
    for node in reversed(list(gm.graph.nodes)):
        op = node.target
        if node.op == "call_function" and isinstance(op, OpOverload) and not node.users \
                and "val" not in node.meta and len(schema_of(op).returns) > 0 \
                and not any(a.alias_info is not None and a.alias_info.is_write for a in schema_of(op).arguments):
            gm.graph.erase_node(node)
            erased = True
    if erased:
        gm.recompile()


def _bind_placeholders(gm: torch.fx.GraphModule, input_bindings: dict[int, dict]) -> None:
    """Record on each placeholder the unbacked symbols its input binds (``unbacked_bindings``)."""
    if not input_bindings:
        return
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, bindings in input_bindings.items():
        placeholders[i].meta["unbacked_bindings"] = dict(bindings)


def _op_without_fake_kernel(e: BaseException) -> Optional[str]:
    """``ns::name`` of a custom operator that failed for want of a fake kernel, else None."""
    UnsupportedOperatorException = unsupported_operator_error()
    for err in (e, e.__cause__, e.__context__):
        if isinstance(err, UnsupportedOperatorException) and isinstance(err.func, OpOverload):
            ns = err.func.namespace
            if ns not in ("aten", "prims"):
                return f"{ns}::{schema_of(err.func).name.split('::')[-1]}"
        named = custom_op_without_fake_kernel(err) if err is not None else None
        if named:
            return named
    return None


def _meta_weights_refused_by_older_torch(e: Exception, program_name: str, where: Any) -> Optional[GraphcapError]:
    """The clear refusal when this torch's fake tensors cannot run ``aten.embedding`` over weights
    on the meta device and real indices (exporting a model built on ``torch.device("meta")``)."""
    mismatch = fake_device_mismatch(e)
    if mismatch is None or fake_private.embedding_takes_meta_weights():
        return None
    op, *devices = mismatch
    if not op.startswith("aten.embedding") or "meta" not in devices:
        return None
    other = next((d for d in devices if d != "meta"), "meta")
    since = fake_private.EMBEDDING_OF_META_WEIGHTS_SINCE
    return UnsupportedError(
        f"While tracing {program_name}, {op} met weights on the meta device and indices on {other}: "
        f"exporting a model whose weights are on the meta device with example inputs on a real device "
        f"needs torch {since} or newer (torch {torch.__version__}'s fake tensors refuse the two devices).",
        where=where,
        fix=f"Install torch {since} or newer (pip install 'torch>={since}'), or build the model on a "
            f"real device for the export.")


def _explain_trace_failure(e: Exception, program_name: str,
                           root: Optional[torch.nn.Module] = None) -> GraphcapError:
    frame = user_frame(e.__traceback__)
    where = describe_frame(frame)
    name = type(e).__name__
    text = str(e).strip().splitlines()[0] if str(e).strip() else name
    op = _op_without_fake_kernel(e)
    if op is not None:
        return MissingFakeKernelError(
            f"While tracing {program_name}, the custom operator torch.ops.{op.replace('::', '.')} was "
            f"called, but it has no fake (meta) kernel: export runs the program on fake tensors and "
            f"needs one to know the shape and dtype of the operator's outputs without computing them.",
            where=where, op_name=op,
            fix=f"Register a fake kernel that builds empty outputs of the right shape, e.g.\n"
                f"    @torch.library.register_fake(\"{op}\")\n"
                f"    def _(x):\n"
                f"        return torch.empty_like(x)\n"
                f"  (for an operator made with @torch.library.custom_op, `@my_op.register_fake` "
                f"does the same).")
    control_flow = control_flow_errors.explain_failure(e, program_name)
    if control_flow is not None:
        return control_flow
    older_torch = _meta_weights_refused_by_older_torch(e, program_name, where)
    if older_torch is not None:
        return older_torch
    if is_data_dependent_failure(e):
        from .data_dependent import explain_data_dependent
        return explain_data_dependent(e, program_name, where)
    if is_real_tensor_under_fake_mode(e):
        return UnsupportedError(
            f"While tracing {program_name}, a real tensor reached an operator in a way graphcap cannot "
            f"lift ({text}).",
            where=where,
            fix="Register the tensor as a buffer (module.register_buffer) or pass it as an input.")
    full_text = str(e).strip() or name
    if raised_internally(e):
        return InternalError.like(
            e, f"graphcap failed while tracing {program_name}: {name}: "
               f"{full_text if len(full_text) < 4000 else text}. This is an error inside graphcap "
               f"(or the torch machinery it drives), not in {program_name}.",
            where=where,
            fix="Please report it with the traceback (the original exception is chained below). "
                "If other threads were exporting at the same time, check that each exported its "
                "own model instance.")
    fix = ("Check that the example inputs are valid for the model (calling it eagerly with them "
           "should work). If it does run eagerly, the line above does something that needs real "
           "data — reading values with .item()/.tolist(), numpy, or printing tensors — move that "
           "out of forward or guard it with `if not torch.compiler.is_compiling():`.")
    devices = two_devices(e)
    if devices is not None:
        fix = device_advice.device_mismatch_fix(devices, root)
    elif frame is not None and ".numpy()" in (frame.line or ""):
        fix = ("NumPy needs the tensor's data, which export's fake tensors do not have. Write the line "
               "with torch operators (most NumPy functions have one of the same name: torch.sin for "
               "np.sin), or export with strict=True, whose front end turns NumPy calls into torch "
               "operators: export(mod, args, strict=True).")
    if "type(" in (where or ""):
        fix += (" While exporting, tensors are fake tensors, a subclass of torch.Tensor: "
                "`type(x) is torch.Tensor` is False for them; test `isinstance(x, torch.Tensor)` instead.")
    return TraceError.like(
        e, f"{program_name} raised {name} while graphcap ran it on fake tensors: "
           f"{full_text if len(full_text) < 4000 else text}",
        where=where, fix=fix)
