"""The integer values of one symbol where a condition holds, as sorted disjoint intervals.

A small solver over sympy conditions (relations, ``And``/``Or``/``Not``) on a
single symbol; ``branch_scope`` uses it to turn a guard raised under a
branch's predicate into the symbol's range.
"""
from __future__ import annotations

from typing import Any, Optional

import sympy

from ...torch_private.symbolic import int_oo, solve_relation

Interval = tuple[Any, Any]  # closed integer interval; bounds may be ±int_oo


def _clip(pieces: list[Interval], lo: Any, hi: Any) -> list[Interval]:
    out = []
    for a, b in pieces:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            out.append((a, b))
    return out


def _union(pieces: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(pieces, key=lambda p: p[0]):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _complement(pieces: list[Interval], lo: Any, hi: Any) -> list[Interval]:
    out, start = [], lo
    for a, b in _union(pieces):
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    if start <= hi:
        out.append((start, hi))
    return out


def _relation(rel: Any, rhs: Any) -> Optional[list[Interval]]:
    if not rhs.is_number:
        return None
    r = sympy.sympify(rhs)
    if isinstance(rel, sympy.Gt):
        return [(sympy.floor(r) + 1, int_oo)]
    if isinstance(rel, sympy.Ge):
        return [(sympy.ceiling(r), int_oo)]
    if isinstance(rel, sympy.Lt):
        return [(-int_oo, sympy.ceiling(r) - 1)]
    if isinstance(rel, sympy.Le):
        return [(-int_oo, sympy.floor(r))]
    if isinstance(rel, (sympy.Eq, sympy.Ne)):
        point = [(r, r)] if r.is_integer else []
        return point if isinstance(rel, sympy.Eq) else _complement(point, -int_oo, int_oo)
    return None


def solve_for(cond: Any, sym: sympy.Symbol, lo: Any = -int_oo, hi: Any = int_oo) -> Optional[list[Interval]]:
    """The values of ``sym`` in ``[lo, hi]`` where ``cond`` (over ``sym`` only) holds,
    as sorted disjoint intervals; None if the condition cannot be solved."""
    if cond is sympy.true:
        return [(lo, hi)]
    if cond is sympy.false:
        return []
    if isinstance(cond, sympy.Not):
        inner = solve_for(cond.args[0], sym, lo, hi)
        return None if inner is None else _complement(inner, lo, hi)
    if isinstance(cond, (sympy.And, sympy.Or)):
        parts = [solve_for(a, sym, lo, hi) for a in cond.args]
        if any(p is None for p in parts):
            return None
        if isinstance(cond, sympy.Or):
            return _union([piece for p in parts for piece in p])
        acc = [(lo, hi)]
        for p in parts:
            acc = _union([q for a, b in p for q in _clip(acc, a, b)])
        return acc
    if not isinstance(cond, sympy.Rel) or cond.free_symbols != {sym}:
        return None
    solved = solve_relation(cond, sym)
    if solved is None or solved[0].lhs != sym:
        return None
    pieces = _relation(solved[0], solved[1])
    return None if pieces is None else _union(_clip(pieces, lo, hi))


def interval_around(pieces: list[Interval], value: Any) -> Optional[Interval]:
    """The piece holding ``value``, else the nearest one."""
    if not pieces:
        return None
    return min(pieces, key=lambda p: 0 if p[0] <= value <= p[1] else min(abs(p[0] - value), abs(p[1] - value)))
