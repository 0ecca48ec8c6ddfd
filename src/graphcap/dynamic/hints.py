"""Bounds of ``Dim.AUTO(min=, max=)`` / ``Dim.DYNAMIC(min=, max=)`` after the trace.

A hint's symbol is traced over every size (or every int); what the program
needs of it (``var_to_range`` after the trace) is then intersected with the
user's bounds, as torch.export does. The result is the program's range for
that input. Two outcomes are errors (``ValueError``s, torch's wording):

- the ranges do not meet: the program cannot run on any size the user
  allows (``Received user-specified min/max range of [33, None], conflicting
  with the inferred min/max range of [0, 32], for inputs['x'].shape[0]``);
- a ``Dim.DYNAMIC`` whose range shrinks to one value: the user asked for a
  dynamic dimension and the program only works for one size.

A ``Dim.DYNAMIC`` that the program replaces by a constant outright is a
constraint violation reported with the other guard problems
(``graphcap.dynamic.guard_checks``).
"""
from __future__ import annotations

from typing import Any, Optional

import sympy

from ..errors import DynamicSpecError
from ..torch_private.shapes import (
    count_deferred_assert,
    deferred_asserts,
    guards,
    symbol_range_locations,
    symbol_ranges,
)
from ..torch_private.symbolic import ValueRangeError, ValueRanges, bound_sympy, int_oo
from .dims import DimHint
from .guard_words import in_framework, where_text
from .size_one_checks import PendingSizeCheck, is_size_special_case
from .symbols import RootSymbol, SymbolicInputs


def _bound_str(v: Any) -> str:
    return "None" if v is None else str(v)


def _spec_path(r: RootSymbol) -> str:
    return "inputs" + r.uses[0].arg_path


def _user_range(hint: DimHint) -> str:
    return f"[{_bound_str(hint.min)}, {_bound_str(hint.max)}]"


def _vr_str(vr: ValueRanges) -> str:
    return f"[{vr.lower}, {vr.upper}]"


def dynamic_specialization_problem(r: RootSymbol, value: Any, where: str) -> str:
    """The constraint-violation line for a ``Dim.DYNAMIC`` replaced by a constant."""
    return (f"You marked {r.uses[0].source} as dynamic but your code specialized it to be a constant "
            f"({value}){where}. If you're using Dim.DYNAMIC, replace it with either Dim.STATIC or Dim.AUTO.")


def _without_min_max(cond: Any) -> Any:
    """``Eq(Min(a, b), a)`` as ``a <= b`` and ``Eq(Max(a, b), a)`` as ``a >= b`` (what slicing and
    broadcasting guards look like), so one-dim guards read as bounds."""
    if isinstance(cond, sympy.Eq):
        for side, other in ((cond.lhs, cond.rhs), (cond.rhs, cond.lhs)):
            kind = type(side).__name__  # sympy's Min/Max or the shape engine's own
            if kind in ("Min", "Max") and len(side.args) == 2 and other in side.args:
                rest = side.args[0] if side.args[1] == other else side.args[1]
                return sympy.Le(other, rest) if kind == "Min" else sympy.Ge(other, rest)
    return cond


def _bound_of(cond: Any, sym: Any) -> Optional[ValueRanges]:
    """The range ``cond`` gives ``sym`` when it is ``sym`` compared with a number."""
    if not isinstance(cond, (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt)):
        return None
    lhs, rhs, rel = cond.lhs, cond.rhs, type(cond)
    if lhs != sym:
        lhs, rhs = rhs, lhs
        rel = {sympy.Le: sympy.Ge, sympy.Lt: sympy.Gt, sympy.Ge: sympy.Le, sympy.Gt: sympy.Lt}[rel]
    if lhs != sym or not rhs.is_Integer:
        return None
    c = int(rhs)
    return {sympy.Le: ValueRanges(-int_oo, c), sympy.Lt: ValueRanges(-int_oo, c - 1),
            sympy.Ge: ValueRanges(c, int_oo), sympy.Gt: ValueRanges(c + 1, int_oo)}[rel]


def without_min_max(cond: Any) -> Any:
    return _without_min_max(cond)


def bound_of(guard: Any, sym: Any) -> Optional[ValueRanges]:
    """The range a one-dim guard gives ``sym``, if it is a bound (possibly through Min/Max)."""
    return _bound_of(_without_min_max(guard), sym)


def narrow_from_guards(env: Any, inputs: SymbolicInputs, first_guard: int = 0) -> None:
    """Guards on one hint dim that its traced range does not show (``Min(3, s) == 3`` after a
    slice) become its range when they are a bound, else a runtime assert: either way the
    program refuses the sizes it was not traced for."""
    from torch.fx.experimental.symbolic_shapes import RuntimeAssert

    from ..torch_private.shapes import CapturedTraceback
    hinted = {r.symbol: r for r in inputs.roots if r.hint is not None}
    for guard in guards(env)[first_guard:]:
        g = env.simplify(guard.expr)
        syms = g.free_symbols
        if len(syms) != 1 or not syms <= set(hinted):
            continue
        (sym,) = syms
        traced = symbol_ranges(env).get(sym, ValueRanges(-int_oo, int_oo))
        try:
            holds = bound_sympy(g, {sym: traced})
            if holds.lower and holds.upper:
                continue
        except Exception:  # not boundable: keep it as an assert
            pass
        bound = _bound_of(_without_min_max(g), sym)
        if bound is not None:
            symbol_ranges(env)[sym] = traced & bound
            continue
        try:
            k = is_size_special_case(g, sym, hinted[sym].declared & traced)
        except ValueRangeError:  # the ranges do not meet: apply_bounds reports it
            k = None
        if k is not None and not in_framework(guard.sloc):
            # ``if b != pos.shape[0]: expand`` on Dim.AUTO: size k stays in the program's range
            # when the program matches eager there (checked once it exists), else it is cut off
            inputs.pending_size_checks.append(PendingSizeCheck(hinted[sym], k, "", "", soft=True))
            continue
        deferred_asserts(env).setdefault(None, []).append(
            RuntimeAssert(g, f"the program needs {g}", CapturedTraceback.extract(skip=1)))
        count_deferred_assert(env)


def _assert_range(env: Any, expr: Any, vr: ValueRanges, ranges: dict, message: str) -> None:
    """Assert ``vr.lower <= expr <= vr.upper`` in the graph where the symbols' ranges do not imply it."""
    from .guard_words import defer_assert, implied_by
    for cond in (sympy.Ge(expr, vr.lower) if vr.lower not in (-int_oo,) else None,
                 sympy.Le(expr, vr.upper) if vr.upper not in (int_oo,) else None):
        if cond is None or cond is sympy.true or implied_by(cond, ranges):
            continue
        defer_assert(env, cond, message)


def equate_with_hints(env: Any, r: RootSymbol, expr: Any, namer: Any, sloc: Any) -> Optional[str]:
    """A declared Dim ``r`` that the program found equal to ``expr`` over hint symbols only.

    The hints were traced over every size, so the Dim's declared range is what limits them:
    a hint symbol ``expr`` itself takes the range (met with what the trace needs of it);
    any other expression gets the range as runtime asserts. Returns a problem line when the
    ranges do not meet (the program cannot run on any size the Dim allows)."""
    from .guard_words import where_text
    if isinstance(expr, sympy.Symbol):
        traced = symbol_ranges(env).get(expr, ValueRanges(-int_oo, int_oo))
        try:
            met = traced & r.declared
        except ValueRangeError:
            met = None
        if met is None or met.is_bool or _empty(met):
            return (f"The program needs {r.name} = {namer(expr)}{where_text(sloc)}, which only takes "
                    f"{_vr_str(traced)}, outside the range {_vr_str(r.declared)} the spec declares for {r.name}.")
        symbol_ranges(env)[expr] = met
        log_equal(r, namer(expr), sloc)
        return None
    ranges = {s: symbol_ranges(env).get(s, ValueRanges(-int_oo, int_oo)) for s in expr.free_symbols}
    _assert_range(env, expr, r.declared, ranges,
                  f"{r.name} = {namer(expr)} must be in {_vr_str(r.declared)}{where_text(sloc)}")
    log_equal(r, namer(expr), sloc)
    return None


def log_equal(r: RootSymbol, other: str, sloc: Any) -> None:
    import logging

    from .guard_words import where_text
    logging.getLogger("graphcap.dynamic").info(
        "graphcap: dimension %s was found to equal %s%s", r.name, other, where_text(sloc))


def _unify_hint(env: Any, inputs: SymbolicInputs, r: RootSymbol, expr: Any, conflicts: list[str]) -> None:
    """Keep a hint's bounds when the program found its size equal to another dim (``expr``).

    Two hints (or a hint and a Dim) made one by ``x + y``: the survivor's range is met with this
    hint's bounds, so ``module()`` refuses the sizes the user excluded; a non-symbol ``expr``
    gets the bounds as runtime asserts."""
    if r.hint.min is None and r.hint.max is None:
        return
    by_sym = inputs.by_symbol()
    if isinstance(expr, sympy.Symbol):
        target = by_sym.get(expr)
        if target is not None and target.hint is None:
            current = inputs.narrowed_by_hints.get(expr, target.declared)
        else:
            current = symbol_ranges(env).get(expr, ValueRanges(-int_oo, int_oo))
        met = _meet_or_conflict(current, r, conflicts)
        if met is None:
            return
        symbol_ranges(env)[expr] = met
        if target is not None and target.hint is None:
            inputs.narrowed_by_hints[expr] = met
        return
    ranges = {s: symbol_ranges(env).get(s, ValueRanges(-int_oo, int_oo)) for s in expr.free_symbols}
    for s in expr.free_symbols:
        t = by_sym.get(s)
        if t is not None and t.hint is None:
            ranges[s] = inputs.narrowed_by_hints.get(s, t.declared)
    _assert_range(env, expr, r.declared, ranges, f"{_spec_path(r)} must be in {_user_range(r.hint)}")


def _meet_or_conflict(current: Any, r: RootSymbol, conflicts: list[str]) -> Any:
    """``current`` narrowed to the hint's declared range, or None after recording the conflict
    (the two ranges do not meet)."""
    try:
        met = current & r.declared
    except ValueRangeError:
        met = None
    if met is None or met.is_bool or _empty(met):
        conflicts.append(
            f"- Received user-specified min/max range of {_user_range(r.hint)}, conflicting with the "
            f"inferred min/max range of {_vr_str(current)}, for {_spec_path(r)}.")
        return None
    return met


def apply_bounds(env: Any, inputs: SymbolicInputs) -> None:
    """Narrow each hint symbol's traced range to the user's bounds; raise on conflicts."""
    narrow_from_guards(env, inputs, inputs.first_program_guard)
    conflicts: list[str] = []
    outside = [_example_outside(r) for r in inputs.roots if r.hint is not None]
    for r in inputs.roots:
        if r.hint is None:
            continue
        expr = env.replace(r.symbol)
        if expr != r.symbol:
            if expr.is_number:
                _check_number(r, int(expr), conflicts)
            else:
                _unify_hint(env, inputs, r, expr, conflicts)
            continue
        traced = symbol_ranges(env).get(r.symbol, ValueRanges(-int_oo, int_oo))
        narrowed = _meet_or_conflict(traced, r, conflicts)
        if narrowed is None:
            continue
        narrowed = _keep_zero_one_to_check(env, inputs, r, narrowed)
        symbol_ranges(env)[r.symbol] = narrowed
        if r.hint.kind is DimHint.Kind.DYNAMIC and narrowed.is_singleton():
            conflicts.append(
                f"- Received user-specified dim hint Dim.DYNAMIC(min={r.hint.min}, max={r.hint.max}), but "
                f"tracing inferred a static shape of {narrowed.lower} for dimension {_spec_path(r)}"
                f"{_where_pinned(env, r.symbol)}. Mark it Dim.STATIC, or Dim.AUTO to let export keep that "
                f"one size, or change the code that fixes it.")
    conflicts += [line for line in outside if line]
    if conflicts:
        raise DynamicSpecError(
            "Found the following conflicts between user-specified ranges and inferred ranges from model "
            "tracing:\n" + "\n".join(conflicts),
            where="export(..., dynamic_shapes=...)",
            fix="Widen the hint's bounds to meet the range the program needs (or drop them), or use "
                "Dim.AUTO / Dim.STATIC where the program only works for one size.")


def _where_pinned(env: Any, sym: Any) -> str:
    """The user line that set ``sym``'s range to one size (`` (at file:line in fn: code)``), or "".
    With ``prefer_deferred_runtime_asserts_over_guards`` the code's ``assert x.shape[0] == 3`` is
    a runtime assert rather than a guard, and its line is where the range was narrowed."""
    bounds = symbol_range_locations(env).get(sym)
    for sloc in (getattr(bounds, "upper", None), getattr(bounds, "lower", None)):
        text = where_text(sloc)
        if text:
            return text
    return ""


def _keep_zero_one_to_check(env: Any, inputs: SymbolicInputs, r: RootSymbol, narrowed: Any) -> Any:
    """A hint whose range user code cut by sizes 0/1 only (``if x.size(0) > 1:``): those sizes
    stay in the range, each a pending check on the program (``size_one_checks``) that cuts it
    off again where the program would differ from eager there."""
    lo = r.declared.lower if r.declared.lower != -int_oo else 0
    lo = max(int(lo), 0)
    if not (lo < narrowed.lower <= 2):
        return narrowed
    slocs = symbol_range_locations(env).get(r.symbol)
    if slocs is None or in_framework(slocs.lower):
        return narrowed
    for k in range(lo, int(narrowed.lower)):
        inputs.pending_size_checks.append(PendingSizeCheck(r, k, "", "", soft=True))
    return ValueRanges(lo, narrowed.upper)


def _example_outside(r: RootSymbol) -> Optional[str]:
    """The conflict line when the example lies outside the hint's own bounds: the program would
    refuse the very input it was exported with (``Dim.DYNAMIC(max=5)`` with size 8)."""
    lo, hi = r.declared.lower, r.declared.upper
    if lo <= r.value <= hi:
        return None
    return (f"- The example input has size {r.value} at {_spec_path(r)}, outside the bounds {_user_range(r.hint)} "
            f"of its spec {r.hint!r}: the exported program would refuse the input it was exported with. "
            f"Change the example, or widen the bounds, e.g. Dim.{r.hint.kind.name}("
            + ", ".join(f"{k}={v}" for k, v in (("min", None if r.hint.min is None else min(r.hint.min, r.value)),
                                                ("max", None if r.hint.max is None else max(r.hint.max, r.value)))
                        if v is not None) + ").")


def _check_number(r: RootSymbol, value: int, conflicts: list[str]) -> None:
    lo, hi = r.declared.lower, r.declared.upper
    if not (lo <= value <= hi):
        conflicts.append(
            f"- Received user-specified min/max range of {_user_range(r.hint)}, conflicting with the "
            f"inferred min/max range of [{value}, {value}], for {_spec_path(r)}.")


def _empty(vr: ValueRanges) -> bool:
    lo, hi = vr.lower, vr.upper
    return bool(sympy.sympify(lo > hi)) if lo.is_number and hi.is_number else False


def is_dynamic_hint(r: RootSymbol) -> bool:
    return r.hint is not None and r.hint.kind is DimHint.Kind.DYNAMIC
