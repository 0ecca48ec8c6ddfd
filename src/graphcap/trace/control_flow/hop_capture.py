"""graphcap's own capture of ``torch.cond``, ``map``, ``while_loop`` and ``scan``.

What torch does on its own: ``torch.cond(pred, t, f, ops)`` (and the other
control-flow entry points) hands a small wrapper to ``torch.compile`` unless
dynamo is already compiling; dynamo then captures the branches, and the result
is cached by the wrapper's code for every later call in the process. An export
that let that happen would leave compiled code behind, and dynamo's capture
reasons about sizes in a ShapeEnv of its own, out of graphcap's reach.

What graphcap does instead, for the duration of one recording:

* :class:`_EagerControlFlow`, a ``TorchDispatchMode`` of graphcap's own, sits
  on the dispatch stack. torch documents that ``torch.compile`` falls back to
  eager execution while a dispatch mode that does not ignore compile internals
  is active (``TorchDispatchMode.ignore_compile_internals``, and the docstring
  of torch's HOP compile helper), so ``torch.cond``'s internal compile runs
  its wrapper eagerly: nothing is compiled, nothing is cached. The mode passes
  every operator through unchanged; for control-flow operators it also
  scopes the branches when the operator's fake kernel runs them for output
  metadata.
* :class:`_ControlFlowCalls`, a ``TorchFunctionMode``, sees each call of a
  control-flow operator (``HigherOrderOperator.__call__`` honours torch
  function modes) before the recorder does, and calls the operator again
  with graphcap's branch callables: each runs the user's branch under the
  branch's predicate (:mod:`.branch_scope`: a guard raised in a branch binds
  only the sizes that take it, operands and closed-over tensors alike) and
  keeps these modes active inside, so nested control flow is captured the
  same way.

The operator's recorder (make_fx, the engine graphcap drives for every
operator) then writes one node with the branch graphs as submodules.
Tensors a branch closes over are recorded as constants of the branch graph;
:func:`graphcap.trace.control_flow.subgraph_constants.hoist_constants` turns them into operands.

Both modes are thread-local (torch's mode stacks are), pushed for one
recording and popped on every path: nothing of torch is changed.
"""
from __future__ import annotations

import contextlib
import inspect
import itertools
import operator
import traceback
from typing import Any, Callable, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

from ...errors import GraphcapError, UnsupportedError
from ...torch_private import block_replay, pytree
from ...torch_private.dispatch import dispatch_mode_base
from ...torch_private.dynamo import forget_control_flow_wrapper_skips, skipped_fullgraph_compiles_run_eagerly
from ...torch_private.fx import current_fx_tracer, share_module_proxies
from ...torch_private.higher_order import (
    MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE,
    map_keeps_symbolic_leading_dim,
    run_graph_preserving_meta,
)
from ...user_frames import describe_frame, is_user_file
from . import branch_checks, branch_scope, closures, nested_cond_operands

# operator name -> positions of its callable arguments
_CALLABLES_AT = {"cond": (1, 2), "map_impl": (0,), "while_loop": (0, 1), "scan": (0,)}
# operator name -> position of the operands its callables receive last (closed-over values join them)
_TRAILING_OPERANDS_AT = {"cond": 3, "map_impl": 2, "while_loop": 3, "scan": 3}
# operator name -> positions of the callables whose outputs are flattened for the recorder and
# rebuilt for the caller (a loop body returns its carried values in the structure the user gave
# them; the loop condition returns one boolean)
_FLAT_OUTPUTS = {"cond": (1, 2), "map_impl": (0,), "scan": (0,), "while_loop": (1,)}
# (operator name, position) -> what the user calls that callable, for messages
_SIDES = {("cond", 1): "true branch", ("cond", 2): "false branch", ("map_impl", 0): "map body",
          ("while_loop", 0): "loop condition", ("while_loop", 1): "loop body",
          ("scan", 0): "scan's combine function"}
_USER_NAMES = {"cond": "torch.cond", "map_impl": "map", "while_loop": "while_loop", "scan": "scan"}
_GRAPHCAP_BRANCH = "_graphcap_branch"


_CAPTURED_OPERATORS = {getattr(torch.ops.higher_order, name): name for name in _CALLABLES_AT}
# operators torch records with subgraphs of their own, whose closed-over tensors graphcap passes in
# (``subgraph_constants``): the recording they are called in is noted, to find those tensors' nodes
_RECORDED_WITH_CLOSURES = frozenset(getattr(torch.ops.higher_order, name) for name in ("flex_attention",))
# their classes: a set lookup on type(func) is the handlers' cheap first test
_HOP_TYPES = frozenset(type(op) for op in (*_CAPTURED_OPERATORS, *_RECORDED_WITH_CLOSURES))


_SYMBOLIC_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _Outputs:
    """The output structure of a call's callables (flattened for the recorder), checked to agree."""

    def __init__(self, operator: str):
        self.operator, self.spec, self.first = operator, None, None
        self.symbolic_scalar: Optional[str] = None  # where a branch returned a symbolic int/float/bool

    def flatten(self, side: str, out: Any) -> list:
        leaves, spec = pytree.tree_flatten(out)
        if self.symbolic_scalar is None and any(isinstance(leaf, _SYMBOLIC_SCALARS) for leaf in leaves):
            path = next(p for p, leaf in pytree.tree_flatten_with_path(out)[0] if isinstance(leaf, _SYMBOLIC_SCALARS))
            self.symbolic_scalar = f"{branch_checks.output_name(path)} of the {side}"
        if self.spec is None:
            # (the first structure is kept as text: holding the output would keep fake tensors alive)
            self.spec, self.first = spec, (side, branch_checks.structure(out))
        elif spec != self.spec:
            other, first_structure = self.first
            raise branch_checks.BranchRefused(
                self.operator,
                f"the branches return different structures: the {other} returns "
                f"{first_structure}, the {side} {branch_checks.structure(out)}.",
                "Return the same structure (same number of tensors, same containers) from both branches.")
        return tuple(leaves)

    def rebuild(self, result: Any) -> Any:
        return result if self.spec is None else pytree.tree_unflatten(list(result), self.spec)


def _branch(fn: Callable, name: str, at: int, condition: Any, env: Any, root: Any, *,
            reenter_function_mode: bool, reenter_dispatch_mode: bool, extra: int = 0,
            outputs: Optional[_Outputs] = None) -> Callable:
    """``fn`` run under ``condition`` (when not None) with graphcap's modes active inside,
    checked for what a subgraph cannot hold (:mod:`.branch_checks`).

    ``extra`` trailing operands (closed-over values passed in) are not passed on to ``fn``;
    with ``outputs`` the result is flattened. A GraphModule runs node by node when torch
    preserves node metadata (so the recorded subgraph keeps each node's source line), as
    torch's own control-flow tracing runs it.
    """
    run = run_graph_preserving_meta(fn)
    operator, side = _USER_NAMES[name], _SIDES[(name, at)]
    caller_tracer = current_fx_tracer()  # the branch may close over module proxies it handed out

    def branch(*operands):
        if extra:
            operands = operands[:len(operands) - extra]
        share_module_proxies(caller_tracer)
        with contextlib.ExitStack() as stack:
            if condition is not None:
                stack.enter_context(branch_scope.scoped(env, condition))
            if reenter_dispatch_mode:
                stack.enter_context(_EagerControlFlow(root))
            if reenter_function_mode:
                stack.enter_context(_ControlFlowCalls(root))
                stack.enter_context(_reentered_overrides())
            stack.enter_context(branch_checks.no_module_writes(root, operator, side))
            out = run(*operands)
        if name == "cond":
            branch_checks.check_fresh_outputs(operator, side, operands, out)
        return outputs.flatten(side, out) if outputs is not None else out

    branch.__name__ = getattr(fn, "__name__", side.replace(" ", "_"))
    setattr(branch, _GRAPHCAP_BRANCH, True)
    return branch


def _reentered_overrides():
    """graphcap's traceable replacements of Python constructs, on again inside a branch
    (torch turns every function mode off while an operator's handler runs)."""
    from .. import python_overrides
    return python_overrides.reentered()


def _conditions(name: str, args: tuple) -> tuple[Any, list[Any]]:
    """The ShapeEnv and, per callable, the condition it runs under (None: unconditional)."""
    positions = _CALLABLES_AT[name]
    if name != "cond":
        return None, [None] * len(positions)
    pred = args[0]
    true_cond = branch_scope.branch_condition(pred, True)
    if true_cond is None:
        return None, [None, None]
    return pred.node.shape_env, [true_cond, branch_scope.branch_condition(pred, False)]


def _with_branches(name: str, args: tuple, root: Any, *, reenter_function_mode: bool,
                   reenter_dispatch_mode: bool, extra: int = 0,
                   outputs: Optional[_Outputs] = None) -> tuple:
    env, conditions = _conditions(name, args)
    args = list(args)
    for at, condition in zip(_CALLABLES_AT[name], conditions):
        fn = args[at]
        if callable(fn) and not getattr(fn, _GRAPHCAP_BRANCH, False):
            flat_outputs = outputs if outputs is not None and at in _FLAT_OUTPUTS[name] else None
            args[at] = _branch(fn, name, at, condition, env, root, reenter_function_mode=reenter_function_mode,
                               reenter_dispatch_mode=reenter_dispatch_mode, extra=extra, outputs=flat_outputs)
    return tuple(args)


def _with_closed_over_symbols(name: str, args: tuple) -> tuple[tuple, int]:
    """``args`` with the symbolic ints the callables close over appended to their trailing operands."""
    at = _TRAILING_OPERANDS_AT[name]
    if len(args) <= at:
        return args, 0
    if name == "cond" and isinstance(args[at], list):  # recorded as a tuple, as torch records it
        args = (*args[:at], tuple(args[at]), *args[at + 1:])
    trailing = list(args[at])
    fns = [args[i] for i in _CALLABLES_AT[name]]
    found = closures.closed_over_symbols(fns, trailing)
    if not found:
        return args, 0
    _refuse_closed_over_non_int(name, fns, found)
    args = list(args)
    args[at] = type(args[at])([*trailing, *found]) if isinstance(args[at], (tuple, list)) else (*trailing, *found)
    return tuple(args), len(found)


def _refuse_closed_over_non_int(name: str, fns: list[Any], found: list[Any]) -> None:
    """A branch or body closing over a symbolic float or bool (``v = f.item()`` of a float tensor,
    ``flag = b.item()``): the operator takes only tensors, ints and symbolic ints as operands, so
    the value cannot be passed in as every other closed-over symbol is."""
    for value in found:
        if isinstance(value, (torch.SymFloat, torch.SymBool)):
            kind = "float" if isinstance(value, torch.SymFloat) else "bool"
            var = closures.closure_name(fns, value)
            called = f"`{var}`" if var else f"a {kind}"
            user = _USER_NAMES.get(name, name)
            raise UnsupportedError(
                where=_user_call_site(),
                what=f"{user}'s branch or body closes over {called}, a {kind} read from tensor data (a symbolic "
                f"{kind}); {user} passes only tensors, ints and symbolic ints into its subgraphs, so the value "
                f"cannot be passed in as a closed-over int is.",
                fix=f"Close over the tensor the value is read from instead, and compute with it as a tensor "
                    f"inside (x * t rather than x * {var or 'v'} where {var or 'v'} = t.item()), or read it "
                    f"there with t.item(); or pass the tensor as an operand.")


def _user_call_site() -> Optional[str]:
    """The innermost line of the user's code on the current stack (the control-flow call)."""
    frame = inspect.currentframe()
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return describe_frame(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))


_DATA_DESCRIPTOR = inspect.getattr_static(torch.Tensor, "data")
# the type of ``_DATA_DESCRIPTOR.__set__`` (a new bound object on every access, so compared by type first)
_METHOD_WRAPPER = type(_DATA_DESCRIPTOR.__set__)


def _is_data_assignment(func: Any) -> bool:
    return getattr(func, "__name__", None) == "__set__" and getattr(func, "__self__", None) is _DATA_DESCRIPTOR


def _refuse_data_assignment(args: tuple) -> None:
    """``t.data = value`` swaps a tensor's contents where no recorder sees it: the program would
    keep computing with the old value. (While graphcap's dispatch mode is active, reading
    ``t.data`` is recorded as a ``detach``; the assignment cannot be.)"""
    import traceback

    from ...errors import FakeConstantError
    from ...user_frames import describe_frame, is_user_file
    frame = next((f for f in reversed(traceback.extract_stack()[:-1]) if is_user_file(f.filename)), None)
    raise FakeConstantError(  # what torch raises for it: a RuntimeError
        "forward assigns a tensor's `.data`; the exported program cannot replay that (it would keep "
        "computing with the old value).",
        where=describe_frame(frame),
        fix="Update the tensor in place instead, e.g. `with torch.no_grad(): self.p.copy_(new_value)` "
            "(a buffer update becomes an output of the program), or register the new value as a buffer.")


_METHOD_DESCRIPTOR = type(torch.Tensor.item)
# reading a value out of a tensor: the read must be recorded where the value is used
_DATA_READS = frozenset({torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__float__,
                         torch.Tensor.__bool__, torch.Tensor.__index__})


def _recorded_here(t: Any) -> Any:
    """``t``, made known to the recording running now if it is a fake tensor of an enclosing one.

    A branch that reads ``y.item()`` of a tensor it closes over (not an operand): the branch's
    recorder does not know ``y``, and torch's recorder treats a data read of an unknown tensor
    as a constant to fold, so the value's symbol is not in the branch graph and the next
    operator using it fails ("not tracked with proxy"). An ``alias`` of ``y`` is recorded
    first: ``y`` becomes a constant of the branch graph (which ``subgraph_constants`` turns
    into an operand, as for any closed-over tensor) and the read is recorded on the alias."""
    from ...torch_private.fake import FakeTensor
    from ...torch_private.fx import current_recording, recorded_node
    if not isinstance(t, FakeTensor):
        return t
    recording = current_recording()
    if recording is None or recorded_node(recording[1], t) is not None:
        return t
    return torch.ops.aten.alias.default(t)


class _ControlFlowCalls(TorchFunctionMode):
    """Calls a control-flow operator with graphcap's branches instead of the user's callables
    (and refuses ``t.data = value``, which no recorder sees)."""

    def __init__(self, root: Optional[torch.nn.Module] = None):
        super().__init__()
        self.root = root

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # every operator of every export passes through here: the common case (neither a
        # captured operator nor the `.data` setter) is two type checks and the call, no allocation
        func_type = type(func)
        if func_type in _HOP_TYPES:
            name = _CAPTURED_OPERATORS.get(func)
            if name is not None:
                return self._call_with_branches(func, name, args, kwargs or {})
            closures.remember_recording()
        elif func_type is _METHOD_WRAPPER and _is_data_assignment(func):
            _refuse_data_assignment(args)
        elif func_type is _METHOD_DESCRIPTOR and func in _DATA_READS and args:
            args = (_recorded_here(args[0]), *args[1:])
        return func(*args, **kwargs) if kwargs else func(*args)

    def _call_with_branches(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        if name == "map_impl":
            _refuse_symbolic_mapped_dim_before_its_release(args)
        closures.remember_recording()
        args, extra = _with_closed_over_symbols(name, tuple(args))
        outputs = _Outputs(_USER_NAMES[name])
        # inside this handler every function mode is off: branches turn them back on for what
        # they call; the dispatch mode is still on (it is off only inside its own handler)
        args = _with_branches(name, args, self.root, reenter_function_mode=True, reenter_dispatch_mode=False,
                              extra=extra, outputs=outputs)
        tracer = current_fx_tracer()
        recorded_before = len(tracer.graph.nodes) if tracer is not None else 0
        try:
            result = func(*args, **kwargs)
        except GraphcapError:
            raise
        except Exception as e:
            if name == "cond" and outputs.symbolic_scalar is not None:
                raise _symbolic_scalar_refused(_USER_NAMES[name], outputs.symbolic_scalar) from e
            raise
        if tracer is not None:
            _name_the_call(tracer, func, len(tracer.graph.nodes) - recorded_before)
        return outputs.rebuild(result) if outputs is not None else result


def _name_the_call(tracer: Any, func: Any, recorded: int) -> None:
    """Give the nodes a control-flow call just recorded (the operator's node and the ``getitem``s
    of its results) the ``torch_fn`` of that call, ``('cond_1', 'CondOp.cond')``, counted with the
    trace's other calls of ``func``.

    The recorder notes the torch function called last for the nodes it makes next; this mode
    handles the call before that note is taken, so without this the nodes would name whatever
    the branches' capture called last (``numel``, ``clone``), and so would their
    ``source_fn_stack``."""
    if recorded <= 0:
        return
    nodes = [n for n in reversed(list(itertools.islice(reversed(tracer.graph.nodes), recorded)))
             if n.op == "call_function"]
    calls = [n for n in nodes if n.target is func]
    called = f"{type(func).__name__}.{func.__name__}"
    if not calls or all((n.meta.get("torch_fn") or ("", ""))[1] == called for n in calls):
        return  # (strict capture: the recorder saw the call itself)
    counts = block_replay.torch_fn_counts(tracer)
    counts[func] = counts.get(func, 0) + 1
    named = (f"{func.__name__}_{counts[func]}", called)
    results = set(calls)
    for node in nodes:
        if node in results or (node.target is operator.getitem and node.args and node.args[0] in results):
            results.add(node)
            node.meta["torch_fn"] = named


def _symbolic_scalar_refused(operator: str, where_in_branch: str) -> UnsupportedError:
    """The error for a cond whose branches return a symbolic int (a size of a dynamic dim) that this
    torch's cond could not merge (torch 2.14: an assertion in its fake kernel; torch.export fails too)."""
    import traceback

    from ...user_frames import describe_frame, is_user_file
    frame = next((f for f in reversed(traceback.extract_stack()[:-1]) if is_user_file(f.filename)), None)
    return UnsupportedError(
        f"{where_in_branch} of a {operator} call is a symbolic number (computed from a dynamic size, such as "
        f"`y.shape[0] * 2`); {operator} on this torch ({torch.__version__}) returns tensors and plain numbers "
        f"from its branches, not sizes that vary with the input.",
        where=describe_frame(frame),
        fix=f"Compute the number outside the {operator} call (sizes are known there: `n = x.shape[0] * 2`), "
            f"or return it as a tensor from both branches (`torch.full((), y.shape[0] * 2)`).")


def _refuse_symbolic_mapped_dim_before_its_release(args: tuple) -> None:
    """On a torch whose ``map`` fixes a symbolic mapped dim to the example's size (2.10), refuse
    with the release that keeps it, instead of a constraint violation that blames the spec."""
    if map_keeps_symbolic_leading_dim() or len(args) < 2:
        return
    leading = [t.shape[0] for t in pytree.tree_leaves(args[1]) if isinstance(t, torch.Tensor) and t.dim()]
    if any(isinstance(d, torch.SymInt) for d in leading):
        raise UnsupportedError(
            f"map over a dim of dynamic size needs torch {MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE} or newer: this "
            f"torch ({torch.__version__}) runs the map body once per slice while tracing, which fixes the "
            f"mapped dim to the example's size.",
            fix=f"Install torch>={MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE} (make test TORCH="
                f"{MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE} sets one up), or export with that dim static "
                f"(drop it from dynamic_shapes), or write the loop as a batched operation.")


class _EagerControlFlow(dispatch_mode_base()):
    """Keeps ``torch.compile`` from compiling while graphcap records, and scopes the branches
    a control-flow operator's fake kernel runs again for its output metadata."""

    supports_higher_order_operators = True

    def __init__(self, root: Optional[torch.nn.Module] = None):
        super().__init__()
        self.root = root

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # a pass-through for every operator but the captured ones: one type check and the call
        if type(func) in _HOP_TYPES:
            name = _CAPTURED_OPERATORS.get(func)
            if name is not None:
                # this mode and the function modes are all off in here: branches turn them back on
                args = _with_branches(name, tuple(args), self.root, reenter_function_mode=True,
                                      reenter_dispatch_mode=True)
        return func(*args, **kwargs) if kwargs else func(*args)


@contextlib.contextmanager
def capturing(root: Optional[torch.nn.Module] = None) -> Iterator[None]:
    """Capture control-flow operators with graphcap's own branches while the block records
    (``root``: the module being exported, whose attributes branches must not write)."""
    try:
        with nested_cond_operands.flattened(), skipped_fullgraph_compiles_run_eagerly(), \
                _EagerControlFlow(root), _ControlFlowCalls(root):
            yield
    finally:
        forget_control_flow_wrapper_skips()  # torch 2.10 to 2.13 remember a skip the mode caused
