"""Size 0/1 special cases the general program also handles.

Code often asks "is this size 1?" only to treat 1 specially where the general
path would do the same: ``if batch != position_ids.shape[0]:
position_ids = position_ids.expand(batch, -1)`` (transformers' masking code)
expands a size-1 dim, a no-op at batch 1. The trace takes the general branch
at the example (batch 2) and records the guard ``Ne(batch, 1)``; refusing it
would cost the user a program that is right at batch 1 too (torch.export
exports such code by assuming the general case holds at 0 and 1).

graphcap does not assume it, it checks it: the guard check
(``guard_checks``) keeps a user guard ``Ne(d, 0)`` / ``Ne(d, 1)`` on a
declared Dim whose range includes that value as a :class:`PendingSizeCheck`
instead of a violation. Once the program is built, :func:`confirm` runs it
and the eager model on the example inputs cut down to that size (the first
row(s) along every dimension that uses the Dim, derived dims at their
value), with the random generator seeded alike; the program keeps the size
only when both agree on every output and on what they write (inputs, and the
buffers: the state each run leaves, from the same start). Otherwise, or
when the check cannot be run (an input that cannot be cut, eager raising),
export raises the constraint violation the guard would have raised, with
the reason added.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

import sympy
import torch

from ..torch_private import pytree
from .dims import DerivedDim
from .guard_words import constraint_violation
from .symbols import RootSymbol, SymbolicInputs

log = logging.getLogger("graphcap.dynamic")


@dataclass
class PendingSizeCheck:
    """A user guard that excludes one size of a Dim (``Ne(batch, 1)``), to confirm on the program."""

    root: RootSymbol
    value: int  # the size the guard excludes (0 or 1)
    problem: str  # the constraint-violation line if the check fails
    fix: str  # the suggested fix if the check fails
    # a Dim.AUTO / Dim.DYNAMIC dim (hints take any range): a failed check cuts the size off
    # the program's range instead of refusing the export
    soft: bool = False


def is_size_special_case(guard: Any, sym: Any, declared: Any) -> Optional[int]:
    """The value ``k`` when ``guard`` is ``Ne(sym, k)`` with ``k`` 0 or 1 inside ``declared``."""
    if not isinstance(guard, sympy.Ne):
        return None
    sides = {guard.lhs, guard.rhs}
    for k in (0, 1):
        if sides == {sym, sympy.Integer(k)} and declared.lower <= k <= declared.upper:
            return k
    return None


def _sizes_at(inputs: SymbolicInputs, check: PendingSizeCheck) -> Optional[dict[tuple[int, Optional[int]], int]]:
    """Every dynamic input size (leaf, dim) with the checked Dim at its value, the others at the example."""
    env = inputs.shape_env
    values: dict[Any, int] = {}
    for r in inputs.roots:
        values[r.symbol] = r.value
        canon = env.replace(r.symbol)
        if isinstance(canon, sympy.Symbol):
            values.setdefault(canon, r.value)
    canon = env.replace(check.root.symbol)
    if not isinstance(canon, sympy.Symbol):
        return None
    values[canon] = values[check.root.symbol] = check.value
    _fit_hints(inputs, canon, values)
    sizes = {}
    for r in inputs.roots:
        for u in r.uses:
            expr = u.spec.fn(r.symbol) if isinstance(u.spec, DerivedDim) else r.symbol
            size = env.replace(sympy.sympify(expr)).xreplace({s: sympy.Integer(v) for s, v in values.items()})
            if not size.is_Integer:
                return None
            sizes[(u.leaf, u.dim)] = int(size)
    return sizes


def _fit_hints(inputs: SymbolicInputs, checked: Any, values: dict[Any, int]) -> None:
    """Move each Dim.AUTO / Dim.DYNAMIC size the program relates to the checked Dim so the program's
    guards and asserts over them still hold at the checked size: an attention mask whose automatic
    length is ``past + new`` (``mask <= past + new`` asserted) shrinks with ``new``. A size no
    relation ties keeps its example value; the largest value below it that satisfies them is taken
    (a cut input only shrinks)."""
    from ..torch_private.shapes import deferred_asserts, guards
    env = inputs.shape_env
    conds = [g.expr for g in guards(env)] + [a.expr for lst in deferred_asserts(env).values() for a in lst]
    for r in inputs.roots:
        sym = env.replace(r.symbol)
        if r.hint is None or not isinstance(sym, sympy.Symbol) or sym == checked:
            continue
        mine = [c for c in conds if sym in c.free_symbols and checked in c.free_symbols
                and c.free_symbols <= set(values)]
        if not mine:
            continue

        def holds(v: int, sym: Any = sym, mine: list[Any] = mine) -> bool:
            at = {s: sympy.Integer(values[s]) for s in values}
            at[sym] = sympy.Integer(v)
            try:
                return all(bool(c.xreplace(at)) for c in mine)
            except (TypeError, ZeroDivisionError):  # no truth value there (a size divided by 0)
                return False

        if holds(values[sym]):
            continue
        fit = next((v for v in range(values[sym] - 1, -1, -1) if holds(v)), None)
        if fit is not None:
            values[sym] = values[r.symbol] = fit


def _cut(leaves: list[Any], sizes: dict[tuple[int, Optional[int]], int]) -> Optional[list[Any]]:
    """The example leaves with each dynamic dimension cut to its size (None if one would grow)."""
    out = list(leaves)
    for (i, dim), size in sorted(sizes.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        if dim is None:
            out[i] = size
            continue
        t = out[i]
        if not isinstance(t, torch.Tensor) or type(t) is not torch.Tensor or size > t.shape[dim]:
            return None
        out[i] = t.narrow(dim, 0, size)
    for i, t in enumerate(out):
        if isinstance(t, torch.Tensor):
            out[i] = t.clone()  # each run gets its own copy (the call may write its inputs)
    return out


def _state_snapshot(mod: Any, parameters: frozenset = frozenset()) -> dict[str, torch.Tensor]:
    """Copies of the module's buffers and of its parameters named in ``parameters`` (those the
    program writes: copying every weight would double a model's memory for the check)."""
    if not isinstance(mod, torch.nn.Module):
        return {}
    state = {name: b.detach().clone() for name, b in mod.named_buffers()}
    state.update((name, p.detach().clone()) for name, p in mod.named_parameters() if name in parameters)
    return state


def _written_parameters(ep: Any) -> frozenset:
    """The parameters the program writes in place (a forward updating a weight under no_grad)."""
    from ..signature import InputKind
    from ..trace.mutations import written_placeholders
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    specs = dict(zip(placeholders, ep.graph_signature.input_specs))
    return frozenset(specs[p].target for p in written_placeholders(ep.graph)
                     if p in specs and specs[p].kind is InputKind.PARAMETER)


def _restore(mod: Any, saved: dict[str, torch.Tensor]) -> None:
    if not saved:
        return
    current = {**dict(mod.named_parameters()), **dict(mod.named_buffers())}
    with torch.no_grad():
        for name, value in saved.items():
            if name in current and current[name].shape == value.shape:
                current[name].copy_(value)


def _differently_written_buffer(eager: dict[str, torch.Tensor], program: dict[str, torch.Tensor]) -> Optional[str]:
    """The first buffer or written parameter (by name) whose value after the program's run is not
    eager's, or None.

    A size the general branch handles must leave the state as eager leaves it, not only return
    the same outputs: a buffer the special branch updates otherwise (a counter, running
    statistics) would silently drift in the program."""
    from ..verification.compare import compare_tensors
    for name, e in eager.items():
        p = program.get(name)
        if p is None:
            continue  # a buffer the program does not hold (nothing reads or writes it)
        if p.shape != e.shape or p.dtype != e.dtype or not compare_tensors(name, e, p, None, None).ok:
            return name
    return None


def _run(fn: Callable, call: tuple, seed: int = 0) -> tuple[Any, Optional[BaseException]]:
    args, kwargs = call
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        try:
            return fn(*args, **kwargs), None
        except Exception as e:  # reported as why the size is refused
            return None, e


def _agree(mod: Any, ep: Any, call_of: Callable[[list[Any]], tuple], leaves: list[Any]) -> Optional[str]:
    """None when eager and the program agree on ``leaves``, else why not."""
    from ..verification.compare import compare_outputs
    written_parameters = _written_parameters(ep)
    saved = _state_snapshot(mod, written_parameters)
    try:
        eager_call = call_of([t.clone() if isinstance(t, torch.Tensor) else t for t in leaves])
        expected, err = _run(mod, eager_call)
        if err is not None:
            return f"eager raised {type(err).__name__} there"
        eager_state = _state_snapshot(mod, written_parameters)  # what eager wrote into its state
        _restore(mod, saved)  # the program starts from the state eager started from
        program_call = call_of([t.clone() if isinstance(t, torch.Tensor) else t for t in leaves])
        program = ep.module()
        got, err = _run(program, program_call)
        if err is not None:
            return f"the program raised {type(err).__name__} there"
        bad = [c for c in compare_outputs(expected, got, None, None) if not c.ok]
        if bad:
            return f"the program's {bad[0].name} differs from eager's there"
        written = _differently_written_buffer(eager_state, _state_snapshot(program, written_parameters))
        if written is not None:
            kind = "parameter" if written in written_parameters else "buffer"
            return f"the program writes {kind} {written} differently from eager there"
        eager_leaves, program_leaves = pytree.tree_leaves(eager_call), pytree.tree_leaves(program_call)
        for e, p in zip(eager_leaves, program_leaves):
            if isinstance(e, torch.Tensor) and isinstance(p, torch.Tensor) and e.shape == p.shape \
                    and not torch.equal(e, p):
                return "the program writes an input differently from eager there"
        return None
    finally:
        _restore(mod, saved)


def cut_off(ep: Any, sym: Any, value: int) -> None:
    """Raise the lower bound of symbol ``sym``'s range in ``ep`` above ``value`` (and the ranges of
    the sizes derived from it): ``module()`` then refuses that size before computing."""
    from ..torch_private.symbolic import ValueRanges, bound_sympy
    ranges = ep.range_constraints
    if sym not in ranges or ranges[sym].lower > value:
        return
    ranges[sym] = ValueRanges(value + 1, ranges[sym].upper)
    for expr in list(ranges):
        if expr != sym and sym in getattr(expr, "free_symbols", ()):
            ranges[expr] = bound_sympy(expr, {s: ranges.get(s, ValueRanges(value + 1, ranges[sym].upper))
                                              for s in expr.free_symbols})


def confirm(ep: Any, mod: Any, call_of: Callable[[list[Any]], tuple], leaves: list[Any],
            inputs: Optional[SymbolicInputs]) -> None:
    """Keep each pending size when the program agrees with eager at it; else raise the violation.

    ``call_of`` turns flat input leaves into ``(args, kwargs)`` for ``mod`` and ``ep.module()``."""
    if inputs is None or not inputs.pending_size_checks:
        return
    problems: list[str] = []
    fixes: dict[str, str] = {}  # one line per Dim: sizes 0 and 1 failing alike must not repeat the fix
    verdicts: dict[tuple[str, int], Optional[str]] = {}  # one run per (Dim, size), however many guards
    for check in inputs.pending_size_checks:
        key = (check.root.name, check.value)
        if key not in verdicts:
            sizes = _sizes_at(inputs, check)
            cut = _cut(leaves, sizes) if sizes is not None else None
            if cut is None:
                verdicts[key] = "graphcap could not build an input of that size from the example to check it"
            else:
                try:
                    verdicts[key] = _agree(mod, ep, call_of, cut)
                except Exception as e:  # weights on meta, outputs that do not compare, ...
                    verdicts[key] = f"graphcap could not run the check ({type(e).__name__}: {e})"
        reason = verdicts[key]
        if reason is None:
            log.info("graphcap: %s = %d takes the general branch: the program matches eager there",
                     check.root.name, check.value)
            continue
        if check.soft:
            log.info("graphcap: %s = %d is left out of the program's range: %s", check.root.name, check.value,
                     reason)
            cut_off(ep, check.root.symbol, check.value)
            continue
        problems.append(f"{check.problem} At {check.root.name} = {check.value} the general branch the program "
                        f"took was checked and is not the same: {reason}.")
        fixes[check.root.name] = check.fix  # the later size's fix wins, as the refine helper reads it
    if problems:
        names = sorted({c.root.name for c in inputs.pending_size_checks if not c.soft})
        raise constraint_violation(names, problems, fixes.values(), ", or change the code at the line shown.")
