"""A decomposed program must compute what the program did at every size its ranges accept.

A decomposition is Python that may branch on a size: bicubic's scale with ``align_corners`` is
``(in - 1) / (out - 1)`` only where ``out > 1``. The retrace answers such a question for its
example and records a guard; the decomposed program keeps the example's path only. Where a guard
leaves out sizes the program accepts, the operator that raised it is decomposed alone and its
code run, on real tensors, at one of those sizes, beside the operator itself: a reshape's copy
path is right at size 1 too (its guard asked about a layout), bicubic's path divides by zero
there. An operator whose code is wrong at such a size makes ``run_decompositions`` refuse,
naming the operator, the sizes and what to do.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import sympy
import torch
import torch.fx

from ..dynamic.range_decide import truth_at
from ..dynamic.symbol_names import dim_names, with_dim_names
from ..errors import UnsupportedError
from ..torch_private import pytree
from ..torch_private.ops import OpOverload, schema_of
from ..torch_private.shapes import example_values

# how many sizes above a range's lower end are tried for one a guard leaves out
_SIZES_TRIED = 64

TraceOne = Callable[[Callable[..., Any], list], torch.fx.GraphModule]


def decompositions_hold_where_guards_fail(ep: Any, env: Any, guarded_by: list[tuple[Any, torch.fx.Node]],
                                          asked: list[tuple[Any, torch.fx.Node]], asserted: list,
                                          trace_one: TraceOne) -> None:
    """Refuse the decomposition of ``ep`` when an operator's decomposed code, taken on a guard
    that leaves out sizes ``ep`` accepts, is wrong at such a size. ``guarded_by`` lists each
    guard the retrace recorded with the node of ``ep`` whose replay raised it; ``asked`` each size
    question a node's replay asked, with the answer it got: a second operator asking what a
    first one's guard already answered raises no guard, and is checked at the sizes the guards
    leave out where its own answer differs too. ``trace_one`` decomposes one call as the retrace
    does. Each operator call is checked once per size, however many guards lead to it."""
    if env is None or not guarded_by:
        return
    ranges = {sym: vr for sym, vr in ep.range_constraints.items() if getattr(sym, "is_Symbol", False)}
    base = {sym: sympy.Integer(int(v)) for sym, v in example_values(env).items()}
    conditions = [c for c in asserted if isinstance(c, sympy.Basic) and c.free_symbols <= ranges.keys()]

    def ours(guard: Any) -> bool:
        return isinstance(guard, sympy.Basic) and bool(guard.free_symbols) and guard.free_symbols <= ranges.keys()

    witness_of: dict[Any, Optional[dict]] = {}
    to_check: dict[tuple[Any, ...], tuple[torch.fx.Node, Any, dict]] = {}  # (call, size) -> (node, guard, size)
    operators: dict[torch.fx.Node, list[torch.fx.Node]] = {}

    def check_at(node: torch.fx.Node, guard: Any, witness: dict) -> None:
        if node not in operators:
            operators[node] = [op for op in _operators_of(node) if _checkable(op)]
        size = tuple(sorted(((str(k), int(v)) for k, v in witness.items())))
        for op in operators[node]:
            to_check.setdefault((_call_key(op), size), (op, guard, witness))

    for guard, node in guarded_by:
        if not ours(guard):
            continue
        if guard not in witness_of:
            witness_of[guard] = _size_left_out(guard, ranges, base, conditions)
        witness = witness_of[guard]
        if witness is not None:
            check_at(node, guard, witness)
    left_out = list({tuple(sorted(w.items(), key=str)): w for w in witness_of.values() if w is not None}.values())
    false_at: dict[Any, tuple[Any, list[dict]]] = {}  # (question, answer) -> its guard, the sizes where it differs
    for answered, node in asked if left_out else ():
        if answered not in false_at:
            question = _as_guard(*answered)  # made here, not as the retrace asks: only when guards left sizes out
            false_at[answered] = (question, [w for w in left_out if truth_at(question, {**base, **w}) is False]
                                  if ours(question) else [])
        question, witnesses = false_at[answered]
        for witness in witnesses:
            check_at(node, question, witness)
    for op, guard, witness in to_check.values():
        wrong = _wrong_at(op, {**base, **witness}, trace_one)
        if wrong is not None:
            _refuse(ep, op, guard, witness, ranges, wrong)


def _as_guard(question: Any, answer: Any) -> Any:
    """The condition under which ``question`` has the ``answer`` the ShapeEnv gave (what a guard on
    it would say): the question, its negation, or its equality to a number."""
    if answer is sympy.true or answer is True:
        return question
    if answer is sympy.false or answer is False:
        return sympy.Not(question)
    return sympy.Eq(question, answer)


def _call_key(node: torch.fx.Node) -> Any:
    """What decides an operator call's decomposed code: the operator and its arguments, tensors by
    their dtype, device, sizes and strides (symbolic), as text; two calls alike are checked once."""
    def described(a: Any) -> Any:
        value = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        if isinstance(value, torch.Tensor):
            return ("tensor", str(value.dtype), str(value.device), str(tuple(value.shape)),
                    str(value.stride()), str(value.storage_offset()))
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ("sym", str(value))
        return ("node", a.name) if isinstance(a, torch.fx.Node) and value is None else repr(value)
    return (node.target, str(torch.fx.node.map_aggregate((node.args, node.kwargs), described)))


def _operators_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The operator nodes a guard raised while replaying ``node`` may come from: ``node`` itself,
    or, for a ``torch.cond``, every operator of both branches (nested conds included), since the
    retrace decomposes the branches inside the one cond node it replays."""
    if node.target is not torch.ops.higher_order.cond:
        return [node]
    owner = node.graph.owning_module
    inner: list[torch.fx.Node] = []
    for branch in node.args[1:3]:
        graph = getattr(owner, branch.target).graph if isinstance(branch, torch.fx.Node) else None
        for n in graph.nodes if graph is not None else ():
            if n.op == "call_function":
                inner += _operators_of(n)
    return inner


def _checkable(node: torch.fx.Node) -> bool:
    """An operator whose decomposition can be run beside it and compared: not random, writing
    nothing, and making no size from data."""
    op = node.target
    return (isinstance(op, OpOverload) and not node.meta.get("unbacked_bindings")
            and torch.Tag.nondeterministic_seeded not in op.tags and not schema_of(op).is_mutable)


def _size_left_out(guard: Any, ranges: dict, base: dict, conditions: list) -> Optional[dict]:
    """A size, in its range, at which ``guard`` is false and the program's asserts hold (the other
    sizes at their examples), as ``{symbol: value}``; None when there is none to try."""
    for sym in sorted(guard.free_symbols, key=str):
        vr = ranges[sym]
        if not vr.lower.is_Integer:
            continue
        for value in _sizes_to_try(vr):
            sizes = {**base, sym: sympy.Integer(value)}
            if truth_at(guard, sizes) is False and all(truth_at(c, sizes) is True for c in conditions):
                return {sym: sympy.Integer(value)}
    return None


def _sizes_to_try(vr: Any) -> list[int]:
    """Sizes of a range where a guard's exceptions usually are: its lower end, its upper end (or,
    unbounded, powers of two and their neighbours up to about a million)."""
    lower = int(vr.lower)
    upper = int(vr.upper) if vr.upper.is_Integer else None
    tried = set(range(lower, lower + _SIZES_TRIED + 1))
    if upper is not None:
        tried |= set(range(upper - _SIZES_TRIED, upper + 1))
    tried |= {2 ** k + d for k in range(7, 21) for d in (-1, 0, 1)}
    return sorted(v for v in tried if v >= lower and (upper is None or v <= upper))


def _wrong_at(node: torch.fx.Node, sizes: dict, trace_one: TraceOne) -> Optional[str]:
    """How ``node``'s decomposed code goes wrong at ``sizes`` (a failure, or other values than the
    operator's own on the same inputs), or None: right there, or nothing to judge by (a size read
    from data, arguments the operator refuses)."""
    def value_of(a: Any) -> Any:
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a
    args, kwargs = torch.fx.node.map_aggregate((node.args, node.kwargs), value_of)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    symbolic = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (torch.Tensor, torch.SymInt, torch.SymFloat))]
    def stand_ins() -> Optional[list]:
        made = [_real_at(leaves[i], sizes) for i in symbolic]
        return None if any(r is None for r in made) else made
    real = stand_ins()
    if real is None:
        return None

    def call(*values: Any) -> Any:
        filled = list(leaves)
        for i, v in zip(symbolic, values):
            filled[i] = v
        a, k = pytree.tree_unflatten(filled, spec)
        return node.target(*a, **k)

    try:
        with torch.no_grad():
            expected = call(*real)
    except Exception:
        return None  # the operator itself refuses these stand-in inputs: nothing to compare with
    decomposed = trace_one(call, [leaves[i] for i in symbolic])
    try:
        with torch.no_grad():
            got = decomposed(*stand_ins())
    except Exception as e:
        return f"its decomposed code fails ({type(e).__name__}: {str(e).strip().splitlines()[0]})"
    got_leaves, want_leaves = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    if len(got_leaves) != len(want_leaves) or not all(_same(g, w) for g, w in zip(got_leaves, want_leaves)):
        return "its decomposed code computes other values than the operator"
    return None


def _same(got: Any, want: Any) -> bool:
    if not isinstance(want, torch.Tensor):
        return True  # sizes and flags: the tensors they describe are compared
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.is_floating_point() or want.is_complex():
        return torch.allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    return torch.equal(got, want)


def _real_at(value: Any, sizes: dict) -> Any:
    """A real stand-in of ``value`` (a fake tensor or a symbolic number of the program) at
    ``sizes``; None when a size depends on something else (a value read from data)."""
    def number(x: Any) -> Optional[int]:
        if not isinstance(x, (torch.SymInt, torch.SymFloat)):
            return x
        expr = x.node.expr.xreplace(sizes)
        return (int(expr) if isinstance(x, torch.SymInt) else float(expr)) if expr.is_number else None
    if not isinstance(value, torch.Tensor):
        return number(value)
    shape = [number(s) for s in value.shape]
    stride = [number(s) for s in value.stride()]
    if None in shape or None in stride:
        return None
    # the values are drawn over the storage the strides reach, then viewed: a stride of 0 (an expanded
    # tensor, which a size of 1 makes of a broadcast) lets elements share memory, which copy_ refuses
    dims = [int(n) for n in shape if n is not None]
    steps = [int(st) for st in stride if st is not None]
    extent = 0 if 0 in dims else 1 + sum((n - 1) * abs(st) for n, st in zip(dims, steps))
    if value.dtype.is_floating_point or value.dtype.is_complex:
        base = torch.randn(extent, dtype=value.dtype, generator=torch.Generator().manual_seed(0))
    else:
        base = torch.zeros(extent, dtype=value.dtype)  # zeros: a valid index along every dim that has one
    return base.as_strided(dims, steps)


def _refuse(ep: Any, node: torch.fx.Node, guard: Any, witness: dict, ranges: dict, wrong: str) -> None:
    names = dim_names(ep)
    sym, value = next(iter(witness.items()))
    name = with_dim_names(sym, names)
    vr = ranges[sym]
    op_text = f"torch.ops.{node.target}"
    fixes = ["keep the operator whole:\n    table = graphcap.default_decompositions()\n"
             f"    del table[{op_text}]\n    ep = ep.run_decompositions(table)"]
    left_out = _sizes_left_out_from_lower_end(guard, sym, vr)
    if left_out:
        fixes.append(f"or, if {name} is never {', '.join(map(str, left_out))}, export with a range that leaves "
                     f"those out: Dim({name!r}, min={left_out[-1] + 1}"
                     + (f", max={int(vr.upper)})" if vr.upper.is_Integer else ")"))
    lines = (node.meta.get("stack_trace") or "").strip().splitlines()
    where = f"node {node.name}" + (f" ({lines[-2].strip()}: {lines[-1].strip()})" if len(lines) >= 2 else "")
    raise UnsupportedError(
        f"run_decompositions cannot decompose {op_text} for every size the program accepts: its "
        f"decomposition takes a path that holds only where {with_dim_names(guard, names)}, and at "
        f"{name} = {value}, which the program accepts (its range is [{vr.lower}, {vr.upper}]), {wrong}.",
        where=where, fix="\n".join(fixes))


def _sizes_left_out_from_lower_end(guard: Any, sym: Any, vr: Any) -> list[int]:
    """The sizes at the lower end of ``sym``'s range where ``guard`` is false, when those are all
    the sizes it leaves out (a range starting above them avoids them); else []."""
    if not vr.lower.is_Integer or guard.free_symbols != {sym}:
        return []
    lower = int(vr.lower)
    upper = int(vr.upper) if vr.upper.is_Integer else lower + _SIZES_TRIED
    truths = [truth_at(guard, {sym: sympy.Integer(v)}) for v in range(lower, min(upper, lower + _SIZES_TRIED) + 1)]
    if False not in truths or None in truths:
        return []
    first_true = truths.index(True) if True in truths else len(truths)
    return list(range(lower, lower + first_true)) if False not in truths[first_true:] else []
