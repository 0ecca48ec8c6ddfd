"""torch's dynamo front end, where graphcap meets it: error types and the compiler flags.

- ``UserError`` / ``UserErrorType`` (``torch._dynamo.exc``): torch.export raises
  these for a user mistake; graphcap's errors derive from them too, so that
  ``except`` clauses written for torch keep catching graphcap's.
- ``torch.compiler._is_compiling_flag`` / ``_is_exporting_flag``: what the
  public ``torch.compiler.is_compiling()`` / ``is_exporting()`` read outside
  dynamo; libraries pick export-friendly paths when they answer True.
- The ``custom`` node-metadata keys ``torch._dynamo.disable`` leaves on nodes
  recorded under ``preserve_node_meta`` (a naming convention, not an object:
  the surface test cannot check it; a change shows as extra ``custom`` metadata).
"""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Iterator, Optional

import torch
from torch._dynamo.exc import UserError, UserErrorType

from .messages import dynamo_side_effect_sources
from .thread_scoped import ThreadScopedPatch

RELIES_ON = {
    "torch._dynamo.exc.UserError": ("error_type", "msg"),
    "torch._dynamo.exc.UserErrorType": None,
    "torch.compiler._is_compiling_flag": None,
    "torch.compiler._is_exporting_flag": None,
    # what forget_control_flow_wrapper_skips resets on a torch that caches a dispatch-mode skip
    "torch._C._dynamo.eval_frame.set_code_exec_strategy": (),
    "torch._dynamo.types.FrameExecStrategy": None,
    "torch._dynamo.types.FrameAction": None,
    # the user's frames dynamo is reading (traced_user_line)
    "torch._guards.TracingContext.extract_stack": (),
}

# the first release whose torch.compile(fullgraph=True) fails when dynamo compiled no frame
SINCE = {"torch._C._dynamo.eval_frame.set_fullgraph_compiled_frame_count": "2.12"}
RELIES_ON["torch._C._dynamo.eval_frame.set_fullgraph_compiled_frame_count"] = None


@contextlib.contextmanager
def skipped_fullgraph_compiles_run_eagerly() -> Iterator[None]:
    """Within the block, a ``torch.compile(..., fullgraph=True)`` call whose frames dynamo skips runs
    its function eagerly and returns, as it does on torch before 2.14, instead of failing with
    "found no compiled frames".

    While graphcap records, its dispatch mode is active, so dynamo skips every frame a nested
    ``torch.compile`` meets (``hop_capture``'s design: nothing is compiled or cached by an
    export). Torch's own control-flow entry points call their compiled wrapper with the
    fullgraph frame counter already active, which turns that check off for the nested call;
    ``flex_attention`` calls ``torch.compile(fullgraph=True)`` itself, and failed. The counter
    is activated for the block and put back as it was after (a no-op where it is already
    active). Relies on ``torch._C._dynamo.eval_frame.set_fullgraph_compiled_frame_count``
    (torch 2.12 on; without it, nothing to do)."""
    setter = getattr(torch._C._dynamo.eval_frame, "set_fullgraph_compiled_frame_count", None)
    if setter is None:
        yield
        return
    old = setter(0)
    try:
        yield
    finally:
        setter(old)


# Key of the disabled method's name, and the prefix of all of dynamo's keys, in ``node.meta["custom"]``.
DISABLE_METHOD_META_KEY = "_torchdynamo_disable_method"
DYNAMO_META_KEY_PREFIX = "_torchdynamo"

__all__ = ["UserError", "UserErrorType", "exporting_flags_set", "DISABLE_METHOD_META_KEY", "DYNAMO_META_KEY_PREFIX"]


@contextlib.contextmanager
def exporting_flags_set() -> Iterator[None]:
    """Within the block ``torch.compiler.is_compiling()`` and ``is_exporting()`` answer True; restored after.

    Relies on the module globals ``torch.compiler._is_compiling_flag`` and
    ``torch.compiler._is_exporting_flag``, which those functions read.
    """
    saved = torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = saved


# --- strict mode's bytecode front end ----------------------------------------------------------

RELIES_ON.update({
    "torch._dynamo.export": ("f",),
    "torch._dynamo.config.patch": None,
    "torch._dynamo.maybe_mark_dynamic": ("t", "index"),
    "torch._dynamo.utils.counters": None,
    "torch._dynamo.utils.compilation_time_metrics": None,
    "torch._dynamo.convert_frame.input_codes": None,
    "torch._dynamo.convert_frame.output_codes": None,
    "torch._dynamo.convert_frame.FRAME_COUNTER": None,
    "torch._dynamo.convert_frame.FRAME_COMPILE_COUNTER": None,
    "torch._dynamo.eval_frame.cached_backends": None,
    "torch._dynamo.exc.TorchDynamoException": None,
    "torch._dynamo.exc.Unsupported": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_expr": ("self", "orig_expr"),
    "torch._guards.ShapeGuard": None,
    "torch.fx.experimental.sym_node.SymNode#_expr": None,
    # how dynamo records ``t.add_(other, alpha=...)`` (torch 2.10 / 2.11 split a plain-number alpha)
    # (its parameters: ``self, other`` on torch 2.10, ``self, tx, other`` from 2.11; alpha by keyword)
    "torch._dynamo.variables.tensor.TensorVariable.method_add_": ("self",),
})

# the first torch release whose dynamo records ``t.add_(other, alpha=a)`` with a plain-number ``a``
# as one ``add_``; before, as ``mul(other, a)`` then ``add_`` (another rounding than eager's)
ADD_WITH_SCALAR_ALPHA_WHOLE_SINCE = "2.12"

def _install_method_add_() -> Any:
    from torch._dynamo.variables.tensor import TensorVariable
    saved = TensorVariable.method_add_
    TensorVariable.method_add_ = _method_add_  # type: ignore[method-assign]
    return saved


def _restore_method_add_(saved: Any) -> None:
    from torch._dynamo.variables.tensor import TensorVariable
    TensorVariable.method_add_ = saved  # type: ignore[method-assign]


_SCALAR_ALPHA_WHOLE = ThreadScopedPatch(_install_method_add_, _restore_method_add_)


def _dynamo_keeps_scalar_alpha_whole() -> bool:
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= tuple(int(p) for p in ADD_WITH_SCALAR_ALPHA_WHOLE_SINCE.split("."))


def _method_add_(self: Any, *args: Any, alpha: Any = None) -> Any:
    """dynamo's rule for ``Tensor.add_``: on a capturing thread a plain-number alpha is left to
    dynamo's generic method call (one ``add_(other, alpha=a)``, as eager and torch 2.12 on do);
    a tensor alpha, and every other thread, get torch's own rule."""
    from torch._dynamo.variables.tensor import TensorVariable
    if alpha is not None and _SCALAR_ALPHA_WHOLE.in_scope() and not isinstance(alpha, TensorVariable):
        return None
    return _SCALAR_ALPHA_WHOLE.saved(self, *args, alpha=alpha)


@contextlib.contextmanager
def _scalar_alpha_kept_whole() -> Iterator[None]:
    """While strict capture runs on this thread, ``t.add_(other, alpha=0.1)`` is recorded whole.

    torch 2.10 and 2.11's dynamo rewrites it as ``add_(mul(other, 0.1))`` (a decomposition
    meant to spare an ``.item()`` of a tensor alpha, applied to every alpha), so strict mode
    recorded one more operator than non-strict mode and rounded differently from eager. From
    2.12 on dynamo splits a tensor alpha only; this gives older lines that rule on the exporting
    thread (other threads, torch.compile included, keep torch's). A no-op from 2.12 on.
    """
    if _dynamo_keeps_scalar_alpha_whole():
        yield
        return
    with _SCALAR_ALPHA_WHOLE.active():
        yield


def _sample_sym_node() -> Any:
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return ShapeEnv().create_symintnode(ShapeEnv().create_symbol(3, ConstantSource("n")), hint=3).node


SAMPLES = {"torch.fx.experimental.sym_node.SymNode": _sample_sym_node}

# Attributes ``maybe_mark_dynamic`` leaves on a tensor (graphcap takes them off again).
_DIM_MARK_ATTRS = ("_dynamo_weak_dynamic_indices", "_has_dynamo_dim_marking")


def _export_dynamo_config() -> dict:
    """The dynamo settings strict capture runs with (the ones torch.export's strict mode uses).

    Python ints and floats are specialized, shapes are static unless marked,
    ``.item()`` and data-dependent output shapes stay in the graph as unbacked
    values, runtime asserts are left to graphcap, logging calls are not graph
    breaks, and side effects on outside state are not replayed but reported
    (as a warning, which :func:`capture_torch_level_graph` collects).
    """
    import logging
    import warnings
    return dict(
        allow_rnn=True,
        reorderable_logging_functions={logging.critical, logging.debug, logging.error, logging.exception,
                                       logging.info, logging.log, logging.warning, print, warnings.warn},
        do_not_emit_runtime_asserts=True,
        specialize_int=True,
        specialize_float=True,
        assume_static_by_default=True,
        automatic_dynamic_shapes=False,
        capture_dynamic_output_shape_ops=True,
        capture_scalar_outputs=True,
        replay_side_effects=False,
        side_effect_replay_policy="warn",
    )


@contextlib.contextmanager
def dynamo_state_kept() -> Iterator[None]:
    """Leave dynamo's process-wide bookkeeping as it was before the block.

    A capture counts itself (``torch._dynamo.utils.counters``, compile-time
    metrics, the frame counters), remembers the code objects it read and made
    (``convert_frame.input_codes`` / ``output_codes``, what ``torch._dynamo.reset``
    walks) and caches its backend (``eval_frame.cached_backends``). None of it
    concerns a later ``torch.compile``; all of it is put back.
    """
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.eval_frame as eval_frame
    from torch._dynamo import utils
    counters = utils.counters
    saved_counters = {k: dict(v) for k, v in counters.items()}
    trackers = [(t, len(t.seen), set(t.seen_ids)) for t in (convert_frame.input_codes, convert_frame.output_codes)]
    metrics = {k: list(v) for k, v in utils.compilation_time_metrics.items()}
    frames = convert_frame.FRAME_COUNTER, collections.Counter(convert_frame.FRAME_COMPILE_COUNTER)
    backends = set(eval_frame.cached_backends)
    try:
        yield
    finally:
        counters.clear()
        for k, v in saved_counters.items():
            counters[k].update(v)
        for tracker, length, ids in trackers:
            del tracker.seen[length:]  # the dropped weak references never call back
            tracker.seen_ids.intersection_update(ids)
        utils.compilation_time_metrics.clear()
        utils.compilation_time_metrics.update(metrics)
        convert_frame.FRAME_COUNTER = frames[0]
        convert_frame.FRAME_COMPILE_COUNTER.clear()
        convert_frame.FRAME_COMPILE_COUNTER.update(frames[1])
        for key in set(eval_frame.cached_backends) - backends:
            del eval_frame.cached_backends[key]


@contextlib.contextmanager
def dims_marked_dynamic(marks: list) -> Iterator[None]:
    """Mark ``(tensor, dim)`` pairs maybe-dynamic for dynamo for the block; the marks are taken off after.

    A maybe-dynamic dim gets a symbol in dynamo's trace but dynamo does not
    complain when the program specializes it: graphcap checks the spec itself.
    """
    saved = []
    for t, _ in marks:
        saved.append((t, {a: getattr(t, a) for a in _DIM_MARK_ATTRS if hasattr(t, a)}))
        for a, v in saved[-1][1].items():  # a user's own marks stay, and are not grown by graphcap
            setattr(t, a, set(v) if isinstance(v, set) else v)
    try:
        for t, dim in marks:
            torch._dynamo.maybe_mark_dynamic(t, dim)
        yield
    finally:
        for t, attrs in saved:
            for a in _DIM_MARK_ATTRS:
                if a in attrs:
                    setattr(t, a, attrs[a])
                elif hasattr(t, a):
                    delattr(t, a)


def traced_user_line() -> Optional[tuple[str, int, str, str]]:
    """The user's line dynamo is reading now (file, line number, function, code), or None outside
    its capture. Relies on ``torch._guards.TracingContext.extract_stack()``."""
    from torch._guards import TracingContext
    stack = TracingContext.extract_stack()
    if not stack:
        return None
    frame = stack[-1]
    return frame.filename, frame.lineno or 0, frame.name, (frame.line or "").strip()


def capture_torch_level_graph(fn: Any, args: tuple, kwargs: dict, *, runtime_asserts: bool = False) \
        -> tuple[torch.fx.GraphModule, list[str]]:
    """dynamo's full-graph capture of ``fn(*args, **kwargs)``: one torch-level fx graph, or dynamo's error;
    with dynamo's names of the outside objects the call changed (side effects, not replayed).

    Relies on ``torch._dynamo.export(f, aten_graph=False, ...)`` (torch
    functions and tensor methods, not ATen), whose graph takes the flat
    ``(args, kwargs)`` leaves as placeholders and reaches the module's tensors by
    ``get_attr`` on attributes holding the same tensor objects; a graph break
    raises dynamo's ``Unsupported`` (a ``TorchDynamoException``). Side effects
    are reported by a warning listing their sources (``side_effect_replay_policy="warn"``).
    ``runtime_asserts``: dynamo writes the asserts of what its ShapeEnv assumed into the graph
    (draft_export: the questions it answered with the example's real values), else graphcap
    derives every assert itself.
    """
    import warnings

    import torch._dynamo
    side_effects: list[str] = []
    config = dict(_export_dynamo_config(), do_not_emit_runtime_asserts=not runtime_asserts)
    with torch._dynamo.config.patch(config), dynamo_state_kept(), _scalar_alpha_kept_whole(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = torch._dynamo.export(
            fn, aten_graph=False, tracing_mode="symbolic", assume_static_by_default=True,
            disable_constraint_solver=True, same_signature=True, _log_export_usage=False)(*args, **kwargs)
    for w in caught:
        sources = dynamo_side_effect_sources(w.message)
        if sources is not None:
            side_effects.extend(sources)
        else:  # the program's own warnings reach the user as they would
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result.graph_module, side_effects


def front_end_error_types() -> tuple:
    """The exception types dynamo raises when it refuses a program (graph break, side effect, ...)."""
    from torch._dynamo.exc import TorchDynamoException
    return (TorchDynamoException,)


def is_graph_break(e: BaseException) -> bool:
    from torch._dynamo.exc import Unsupported
    return isinstance(e, Unsupported)


def user_stack_of(e: BaseException) -> list:
    """The user frames dynamo attached to its error (``real_stack``), innermost last; may be empty."""
    return list(getattr(e, "real_stack", None) or [])


def add_guard(shape_env: Any, expr: Any, sloc: Any = None) -> None:
    """Guard ``expr`` (a sympy boolean over ``shape_env``'s symbols) in ``shape_env``, as user code
    branching on it would; the new guards and replacements say they come from ``sloc``."""
    guards_before = len(shape_env.guards)
    replaced_before = set(shape_env.replacements_slocs)
    ranges_before = {sym: (b.lower, b.upper) for sym, b in shape_env.var_to_range_sloc.items()}
    shape_env.evaluate_expr(expr)
    if sloc is None:
        return
    for i in range(guards_before, len(shape_env.guards)):
        shape_env.guards[i] = shape_env.guards[i]._replace(sloc=sloc)
    for sym in set(shape_env.replacements_slocs) - replaced_before:
        shape_env.replacements_slocs[sym] = sloc
    for sym, bounds in list(shape_env.var_to_range_sloc.items()):  # narrowed ranges: where from
        old_lower, old_upper = ranges_before.get(sym, (None, None))
        if bounds.lower is not old_lower:
            bounds.lower = sloc
        if bounds.upper is not old_upper:
            bounds.upper = sloc


def user_sloc(filename: str, lineno: int, name: str, code: str, user_line: Any = None) -> Any:
    """A guard location naming a line the way graphcap's own guards do (a frame); ``user_line``
    (``file:line in fn: code``) is the user's line beside a framework frame, as torch records an
    operator's guard made under a user's line."""
    import traceback

    from .shapes import SLoc
    return SLoc(traceback.FrameSummary(filename, lineno, name, line=code), user_line)


def unreplaced_expr(size: Any) -> tuple[Any, Any]:
    """A SymInt's expression as it was made (before its ShapeEnv replaced it, e.g. by a constant the
    program specialized it to), and where that replacement was decided (None if it was not).

    Relies on ``SymNode._expr`` (the public ``expr`` applies the replacements) and
    ``ShapeEnv.replacements_slocs``.
    """
    raw = size.node._expr
    env = size.node.shape_env
    return raw, env.replacements_slocs.get(raw)



def note_sloc(text: str) -> Any:
    """A guard location that is a note rather than a line (what made the guard, in words)."""
    from .shapes import SLoc
    return SLoc(None, text)


# --- control-flow wrappers left skipped (torch 2.10 to 2.13) ------------------------------------

# torch's control-flow entry points hand a small nested wrapper to torch.compile; these modules hold them
_CONTROL_FLOW_MODULES = ("cond", "while_loop", "map", "scan", "associative_scan")
# other entry points that do the same (flex_attention's ``_flex_attention_hop_wrapper``)
_OTHER_WRAPPER_MODULES = ("torch.nn.attention.flex_attention",)
_WRAPPER_CODES: list = []


def _caches_dispatch_mode_skip() -> bool:
    """Whether this torch's dynamo remembers, on the code object, that it skipped a frame because a
    dispatch mode was active (torch 2.10 to 2.13; from 2.14 on that skip applies to the frame only)."""
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) < (2, 14)


def _wrapper_codes() -> list:
    """The code objects of the functions nested in torch's control-flow entry points (and in
    flex_attention's module)."""
    if not _WRAPPER_CODES:
        import inspect
        import sys
        import types

        import torch._higher_order_ops.associative_scan  # each imported for sys.modules below:
        import torch._higher_order_ops.cond  # the package's attribute "cond" is the function
        import torch._higher_order_ops.map
        import torch._higher_order_ops.scan
        import torch._higher_order_ops.while_loop
        import torch.nn.attention.flex_attention  # noqa: F401
        for path in (*(f"torch._higher_order_ops.{name}" for name in _CONTROL_FLOW_MODULES), *_OTHER_WRAPPER_MODULES):
            module = sys.modules[path]
            for value in vars(module).values():
                value = inspect.unwrap(value) if callable(value) else value  # cond is a decorated function
                code = getattr(value, "__code__", None)
                if isinstance(value, types.FunctionType) and code.co_filename == module.__file__:  # (cond's
                    # __module__ says "torch": it is exposed there)
                    _WRAPPER_CODES.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return _WRAPPER_CODES


def forget_control_flow_wrapper_skips() -> None:
    """Undo what a recording leaves in dynamo on torch 2.10 to 2.13: ``torch.cond`` (and
    ``while_loop``, ...) hands its wrapper to torch.compile, which, under graphcap's dispatch mode,
    runs it eagerly and, on those releases, marks the wrapper's code to be skipped for good; a
    later eager ``torch.cond`` then ran its wrapper uncompiled and failed. The wrappers' codes get
    dynamo's default strategy back (dynamo decides afresh on their next call). No-op on 2.14 on.

    Relies on ``torch._C._dynamo.eval_frame.set_code_exec_strategy`` and
    ``torch._dynamo.types.FrameExecStrategy`` / ``FrameAction``."""
    if not _caches_dispatch_mode_skip():
        return
    from torch._C._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy
    default = FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT)
    for code in _wrapper_codes():
        set_code_exec_strategy(code, default)
