"""Trace each branch of a ``torch.cond`` under its predicate (see :mod:`.branch_scope`).

A branch is traced three times during an export, and each place must reason
under the branch's predicate:

1. torch compiles the call to ``torch.cond`` with dynamo, which traces the
   user's Python of each branch into a graph (``speculate_subgraph``), in a
   ``ShapeEnv`` of its own whose symbols stand for the operands' sizes. What
   a branch learned there is taken out of that ShapeEnv (so dynamo's check of
   its own guards does not carry it into the program unconditionally),
   rewritten over the program's symbols and raised in the program's
   ShapeEnv as an implication when the compiled call returns.
2. ``make_fx`` records the branch graphs (``trace_cond``), and
3. the fake-tensor kernel of ``cond`` runs them again for the output
   metadata, both in the program's ShapeEnv.

:func:`installed` wraps these three places for the duration of a capture.
The wrapped functions are module attributes of torch that are looked up at
call time; all are restored on exit.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import sympy
import torch

from . import branch_scope

_COND_MODULE = "torch._higher_order_ops.cond"
_COND_WRAPPER = "_cond_op_wrapper"


@dataclass
class _Compile:
    """One compiled control-flow call (``torch.cond``, ``map``, ...): the compiled function's
    arguments by parameter name, the program's ShapeEnv and predicate, and what dynamo learned."""

    frame: dict                 # the compiled function's locals at entry: what dynamo's L[...] names
    env: Any                    # the program's ShapeEnv
    pred: Optional[Any]         # a torch.cond predicate over the program's symbols (else None)
    to_program: dict = field(default_factory=dict)   # dynamo symbol -> program expression
    unresolved: set = field(default_factory=set)     # dynamo symbols no access path resolves
    learned: list = field(default_factory=list)
    opaque: dict = field(default_factory=dict)  # (id(dynamo ShapeEnv), opaque predicate) -> its meaning

    def mapping(self, dyn_env: Any) -> dict:
        """Dynamo's symbols named by an access path into the call, as program expressions
        (extended as dynamo makes more, e.g. for tensors a branch closes over)."""
        if len(self.to_program) + len(self.unresolved) < len(dyn_env.var_to_sources):
            frame = self.frame
            for sym, sources in dyn_env.var_to_sources.items():
                if sym in self.to_program or sym in self.unresolved:
                    continue
                self.unresolved.add(sym)
                for source in sources:
                    try:
                        value = _resolve(source, frame)
                    except (LookupError, TypeError, AttributeError):
                        continue
                    if isinstance(value, torch.SymInt):
                        self.to_program[sym] = value.node.expr
                    elif isinstance(value, int) and not isinstance(value, bool):
                        self.to_program[sym] = sympy.Integer(value)
                    else:
                        break
                    self.unresolved.discard(sym)
                    break
        return self.to_program


def _resolve(source: Any, frame: dict) -> Any:
    """The value an access path of dynamo (``L['args'][3][0].size()[0]``) names in the compiled call."""
    from torch._dynamo.source import GetItemSource, LocalSource, TensorProperty, TensorPropertySource
    if isinstance(source, LocalSource):
        return frame[source.local_name]
    if isinstance(source, GetItemSource) and not source.index_is_slice:
        return _resolve(source.base, frame)[source.index]
    if isinstance(source, TensorPropertySource):
        tensor = _resolve(source.base, frame)
        if source.prop is TensorProperty.SIZE:
            return tensor.size(source.idx)
        if source.prop is TensorProperty.STRIDE:
            return tensor.stride(source.idx)
        return tensor.storage_offset()
    raise LookupError(f"no value for {type(source).__name__}")


@dataclass
class _DynamoCond:
    """A ``cond`` dynamo is tracing; its condition is resolved when the first branch is.

    (dynamo wraps the operands, and names their sizes, only after the call starts.)
    """

    compile: _Compile
    pred_var: Any
    outermost: bool
    branches_seen: int = 0
    resolved: bool = False
    in_dynamo: Optional[Any] = None     # predicate over dynamo's symbols
    in_program: Optional[Any] = None    # the same over the program's symbols

    def resolve(self, dyn_env: Any) -> None:
        if self.resolved:
            return
        self.resolved = True
        sym_num = getattr(self.pred_var, "sym_num", None)
        expr = getattr(getattr(sym_num, "node", None), "expr", None)
        if expr is None:  # a tensor predicate: either branch may run for any size
            return
        mapping = self.compile.mapping(dyn_env)
        names = [src.name for s in expr.free_symbols for src in dyn_env.var_to_sources.get(s, [])]
        if self.outermost and self.compile.pred is not None \
                and any(n.startswith("cast_symbool_to_symint_guardless(L['args'][0])") for n in names):
            # the predicate passed to torch.cond, which dynamo only sees as an opaque input
            to_dynamo = {v: k for k, v in mapping.items() if isinstance(v, sympy.Symbol)}
            self.in_dynamo = _translate(self.compile.pred, to_dynamo)
            self.in_program = self.compile.pred
            if self.in_dynamo is not None:  # dynamo also runs the branches for the output metadata,
                # passing the predicate as it holds it (Eq(s2, 1)) or as that int (s2)
                for stand_in in (dyn_env.simplify(expr), *expr.free_symbols):
                    self.compile.opaque[(id(dyn_env), stand_in)] = self.in_dynamo
            return
        self.in_dynamo, self.in_program = expr, _translate(expr, mapping)


_compiles: list[_Compile] = []
_dynamo_conds: list[_DynamoCond] = []
_open_dynamo_scopes: list[int] = []


def _translate(expr: Any, mapping: dict) -> Optional[Any]:
    if not expr.free_symbols <= set(mapping):
        return None
    return expr.xreplace(mapping)


def _collect(comp: _Compile, dyn_env: Any, cond: Any, learned: list) -> None:
    """Keep what dynamo's outermost branch learned, over the program's symbols."""
    mapping = comp.mapping(dyn_env)
    in_program = _translate(cond, mapping)
    for guard, sloc in learned:
        program_guard = _translate(guard, mapping)
        if program_guard is None or in_program is None:  # not about the program's inputs: dynamo keeps it
            branch_scope.raise_guard(dyn_env, guard, sloc)
        else:
            comp.learned.append((program_guard, sloc, sympy.Not(in_program)))


def _scoped_speculation(original):
    def speculate_subgraph(tx, f, *args, **kwargs):
        cond = _dynamo_conds[-1] if _dynamo_conds else None
        if (cond is None or kwargs.get("source_target") is not torch.ops.higher_order.cond
                or cond.branches_seen >= 2):
            return original(tx, f, *args, **kwargs)
        branch = cond.branches_seen == 0
        cond.branches_seen += 1
        dyn_env = tx.output.shape_env
        cond.resolve(dyn_env)
        if cond.in_dynamo is None or cond.in_program is None:
            return original(tx, f, *args, **kwargs)
        condition = cond.in_dynamo if branch else sympy.Not(cond.in_dynamo)
        outermost = not _open_dynamo_scopes
        on_exit = (lambda c, learned: _collect(cond.compile, dyn_env, c, learned)) if outermost else None
        _open_dynamo_scopes.append(1)
        saved_summary = dyn_env.__dict__.get("_get_stack_summary")
        if outermost:
            dyn_env._get_stack_summary = _user_located(dyn_env._get_stack_summary)
        try:
            with branch_scope.scoped(dyn_env, condition, on_exit):
                return original(tx, f, *args, **kwargs)
        finally:
            _open_dynamo_scopes.pop()
            if outermost:
                if saved_summary is None:
                    del dyn_env._get_stack_summary
                else:
                    dyn_env._get_stack_summary = saved_summary
    return speculate_subgraph


def _user_located(summary):
    """Locate dynamo's guards at the user's line, written as graphcap's own messages write it."""
    from torch._guards import SLoc, TracingContext

    def located(is_debug: bool = False, framework_loc: Any = None):
        sloc, extra = summary(is_debug, framework_loc)
        stack = TracingContext.extract_stack()
        if stack:
            frame = stack[-1]
            code = (frame.line or "").strip()
            sloc = SLoc(sloc.framework_loc, f"{frame.filename}:{frame.lineno} in {frame.name}: {code}")
        return sloc, extra
    return located


def _tracked_cond_call(original):
    def _call_function(self, tx, args, kwargs):
        if not _compiles or not args:
            return original(self, tx, args, kwargs)
        pred = args[0].realize() if hasattr(args[0], "realize") else args[0]
        _dynamo_conds.append(_DynamoCond(_compiles[-1], pred, outermost=not _dynamo_conds))
        try:
            return original(self, tx, args, kwargs)
        finally:
            _dynamo_conds.pop()
    return _call_function


def _frame(fn: Any, args: tuple, kwargs: Optional[dict]) -> Optional[dict]:
    try:
        return dict(inspect.signature(fn).bind(*args, **(kwargs or {})).arguments)
    except (TypeError, ValueError):
        return None


def _compile_and_call(original):
    def _hop_compile_and_call(fn, args, kwargs=None):
        from . import hops
        env, frame = _fake_env(args), _frame(fn, args, kwargs)
        if env is None or frame is None:
            return original(fn, args, kwargs)
        is_cond = getattr(fn, "__name__", None) == _COND_WRAPPER
        comp = _Compile(frame, env, branch_scope.branch_condition(args[0], True) if is_cond else None)
        hops.forget_compiled_wrappers()  # a cached compile would skip speculation (and its scoping)
        _compiles.append(comp)
        try:
            out = original(fn, args, kwargs)
        finally:
            _compiles.pop()
        for guard, sloc, unless in comp.learned:
            branch_scope.raise_guard(env, guard, sloc, unless=unless)
        return out
    return _hop_compile_and_call


def _fake_env(args: Any) -> Optional[Any]:
    """The program's ShapeEnv, from a symbolic predicate or a fake operand."""
    for leaf in torch.utils._pytree.tree_leaves(args):
        env = getattr(getattr(leaf, "node", None), "shape_env", None)
        if env is None:
            mode = getattr(leaf, "fake_mode", None)
            env = mode.shape_env if mode is not None else None
        if env is not None:
            return env
    return None


def _condition(pred: Any, branch: bool) -> Optional[Any]:
    """When ``branch`` runs, over the ShapeEnv of ``pred``; dynamo's opaque stand-in for
    the predicate passed to torch.cond is read as what it stands for."""
    if not isinstance(pred, (torch.SymBool, torch.SymInt)):
        return None
    env = pred.node.shape_env
    for comp in reversed(_compiles):
        meaning = comp.opaque.get((id(env), env.simplify(pred.node.expr)))
        if meaning is not None:
            return meaning if branch else sympy.Not(meaning)
    return branch_scope.branch_condition(pred, branch) if isinstance(pred, torch.SymBool) else None


def _scoped_branch(fn: Any, pred: Any, branch: bool) -> Any:
    """``fn`` run under the condition that selects it (node metadata kept as torch keeps it)."""
    from torch._higher_order_ops.utils import _maybe_run_with_interpreter
    condition = _condition(pred, branch)
    if condition is None:
        return fn
    env = pred.node.shape_env
    run = _maybe_run_with_interpreter(fn)
    on_exit = None
    if _compiles and env is not _compiles[-1].env and not _open_dynamo_scopes:
        # dynamo running a branch for output metadata, outside its own branch scopes:
        # what it learns goes to the program, as speculation's does
        comp = _compiles[-1]
        on_exit = lambda c, learned: _collect(comp, env, c, learned)  # noqa: E731

    def branch_fn(*operands):
        with branch_scope.scoped(env, condition, on_exit):
            return run(*operands)
    branch_fn.__name__ = getattr(fn, "__name__", "branch")
    return branch_fn


def _scoped_trace(original):
    def trace_cond(proxy_mode, func_overload, pred, true_fn, false_fn, operands):
        return original(proxy_mode, func_overload, pred, _scoped_branch(true_fn, pred, True),
                        _scoped_branch(false_fn, pred, False), operands)
    return trace_cond


def _scoped_fake(original):
    def cond_fake_tensor_mode(mode, pred, true_fn, false_fn, operands):
        return original(mode, pred, _scoped_branch(true_fn, pred, True),
                        _scoped_branch(false_fn, pred, False), operands)
    return cond_fake_tensor_mode


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Scope cond branches' guards for the duration of a capture."""
    import torch._dynamo.variables.higher_order_ops as dynamo_hops
    import torch._higher_order_ops.utils as hop_utils
    from torch._subclasses.fake_tensor import FakeTensorMode
    cond_module = sys.modules[_COND_MODULE]
    cond_op = torch.ops.higher_order.cond
    patches = [
        (hop_utils, "_hop_compile_and_call", _compile_and_call),
        (dynamo_hops, "speculate_subgraph", _scoped_speculation),
        (dynamo_hops.CondHigherOrderVariable, "_call_function", _tracked_cond_call),
        (cond_module, "trace_cond", _scoped_trace),
    ]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    fake_kernel = cond_op.python_key_table[FakeTensorMode]
    try:
        for owner, name, wrap in patches:
            setattr(owner, name, wrap(owner.__dict__[name]))
        cond_op.python_key_table[FakeTensorMode] = _scoped_fake(fake_kernel)
        cond_op._dispatch_cache.clear()
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        cond_op.python_key_table[FakeTensorMode] = fake_kernel
        cond_op._dispatch_cache.clear()
