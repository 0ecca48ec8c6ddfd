"""Decide whether a guard holds for every size a bounded range allows.

The shape engine's interval arithmetic (``bound_sympy``) proves many guards
from the declared ranges, but it is loose on floor division, modulo and
``Min``/``Max``: over ``1 <= b <= 16`` it cannot see that
``(3*b - 1)//b == 2`` (what ``torch.chunk(torch.cat([a, b]), 2)`` needs),
although it is true for every ``b`` there. Refusing such a guard costs the
user a program that works on every size they declared.

:func:`holds_over_ranges` decides a guard by range splitting: a box of ranges
is accepted when interval arithmetic proves the guard on it, rejected as soon
as one point of it falsifies the guard, and otherwise cut in half along its
widest finite side; a box of one point is evaluated exactly. It answers True
only when every point of the ranges was covered by a proof or an exact
evaluation, so it stays sound: a guard false for some size in range, or one
that cannot be decided within the work budget (an unbounded range that
interval arithmetic cannot bound, say), is not accepted.
"""
from __future__ import annotations

from typing import Any, Optional

import sympy

from ..torch_private.symbolic import ValueRanges, bound_sympy, int_oo

# How many boxes one guard may cost before it is left undecided (not accepted).
BOX_BUDGET = 512


def _bounded(guard: Any, box: dict) -> Optional[bool]:
    try:
        vr = bound_sympy(guard, box)
    except Exception:  # an expression the range analysis cannot bound
        return None
    if vr.lower and vr.upper:
        return True
    if not vr.lower and not vr.upper and vr.is_bool:
        return False
    return None


def _positive(expr: Any, box: dict) -> bool:
    try:
        return bool(bound_sympy(expr, box).lower > 0)
    except Exception:
        return False


def _as_differences(guard: Any, box: dict) -> Any:
    """``guard`` with floor-division equations turned into inequalities and every comparison
    written as ``lhs - rhs`` against 0, which interval arithmetic bounds far more tightly
    (``2*b <= 3*b - 1`` cannot be bounded; ``b - 1 >= 0`` can).

    ``p // q == k`` with ``q > 0`` over the box is ``k*q <= p`` and ``p <= (k+1)*q - 1``."""
    if isinstance(guard, (sympy.And, sympy.Or)):
        return type(guard)(*(_as_differences(a, box) for a in guard.args))
    if isinstance(guard, sympy.Eq):
        for side, other in ((guard.lhs, guard.rhs), (guard.rhs, guard.lhs)):
            if type(side).__name__ == "FloorDiv" and _positive(side.args[1], box):
                p, q = side.args
                return sympy.And(sympy.Ge(sympy.expand(p - other * q), 0),
                                 sympy.Ge(sympy.expand((other + 1) * q - 1 - p), 0))
    if isinstance(guard, (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt, sympy.Eq, sympy.Ne)):
        return type(guard)(sympy.expand(guard.lhs - guard.rhs), 0)
    return guard


def _proved(guard: Any, box: dict) -> Optional[bool]:
    """True / False when interval arithmetic decides ``guard`` on all of ``box``, else None."""
    verdict = _bounded(guard, box)
    if verdict is not None:
        return verdict
    try:
        rewritten = _as_differences(guard, box)
    except Exception:  # a form the rewrite does not know: leave it to splitting
        return None
    return _bounded(rewritten, box) if rewritten is not guard else None


def _finite(v: Any) -> bool:
    return v not in (int_oo, -int_oo, sympy.oo, -sympy.oo) and getattr(v, "is_number", True)


def truth_at(guard: Any, point: dict) -> Optional[bool]:
    """The guard's truth at one point, or None if it does not evaluate to a boolean."""
    try:
        v = guard.xreplace({s: sympy.Integer(int(x)) for s, x in point.items()})
    except Exception:
        return None
    if v is sympy.true or v is True:
        return True
    if v is sympy.false or v is False:
        return False
    return None


def _corners(box: dict) -> list[dict]:
    """A few points of ``box`` to try first (its ends and middle), where counterexamples usually are."""
    points = []
    for pick in (lambda vr: vr.lower, lambda vr: vr.upper, lambda vr: (vr.lower + vr.upper) // 2):
        point = {}
        for s, vr in box.items():
            if not (_finite(vr.lower) and _finite(vr.upper)):
                return points
            point[s] = int(pick(vr))
        points.append(point)
    return points


def holds_over_ranges(guard: Any, ranges: dict, budget: int = BOX_BUDGET) -> bool:
    """Whether ``guard`` (a sympy boolean over symbols) is true for every point of ``ranges``.

    ``ranges`` maps each free symbol of ``guard`` to its ``ValueRanges``;
    a symbol missing from it makes the answer False.
    """
    syms = guard.free_symbols
    if not syms:
        return bool(guard) if guard in (sympy.true, sympy.false, True, False) else False
    if any(s not in ranges for s in syms):
        return False
    box = {s: ranges[s] for s in syms}
    first = _proved(guard, box)
    if first is not None:
        return first
    for point in _corners(box):
        if truth_at(guard, point) is not True:
            return False
    todo = [box]
    spent = 0
    while todo:
        box = todo.pop()
        spent += 1
        if spent > budget:
            return False
        if all(_finite(vr.lower) and vr.lower == vr.upper for vr in box.values()):
            if truth_at(guard, {s: vr.lower for s, vr in box.items()}) is not True:
                return False
            continue
        verdict = _proved(guard, box)
        if verdict is True:
            continue
        if verdict is False:
            return False
        widest = _widest_finite_side(box)
        if widest is None:
            return False  # an unbounded side interval arithmetic cannot decide: not proved
        vr = box[widest]
        mid = (vr.lower + vr.upper) // 2
        todo.append({**box, widest: ValueRanges(mid + 1, vr.upper)})
        todo.append({**box, widest: ValueRanges(vr.lower, mid)})
    return True


def _widest_finite_side(box: dict) -> Any:
    best, width = None, 0
    for s, vr in box.items():
        if not (_finite(vr.lower) and _finite(vr.upper)):
            continue
        w = int(vr.upper - vr.lower)
        if w > width:
            best, width = s, w
    return best
