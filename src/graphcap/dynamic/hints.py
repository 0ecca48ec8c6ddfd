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
(``graphcap.dynamic.constraints``).
"""
from __future__ import annotations

from typing import Any, Optional

import sympy
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRangeError, ValueRanges

from ..errors import DynamicSpecError
from .dims import DimHint
from .symbols import RootSymbol, SymbolicInputs


def _bound_str(v: Any, none_if: Any) -> str:
    return "None" if v is None or v == none_if else str(v)


def _spec_path(r: RootSymbol) -> str:
    return "inputs" + r.uses[0].arg_path


def _user_range(hint: DimHint) -> str:
    return f"[{_bound_str(hint.min, None)}, {_bound_str(hint.max, None)}]"


def _vr_str(vr: ValueRanges) -> str:
    return f"[{vr.lower}, {vr.upper}]"


def dynamic_specialization_problem(r: RootSymbol, value: Any, where: str) -> str:
    """The constraint-violation line for a ``Dim.DYNAMIC`` replaced by a constant."""
    return (f"You marked {r.uses[0].source} as dynamic but your code specialized it to be a constant "
            f"({value}){where}. If you're using Dim.DYNAMIC, replace it with either Dim.STATIC or Dim.AUTO.")


def apply_bounds(env: Any, inputs: SymbolicInputs) -> None:
    """Narrow each hint symbol's traced range to the user's bounds; raise on conflicts."""
    conflicts: list[str] = []
    for r in inputs.roots:
        if r.hint is None:
            continue
        expr = env.replace(r.symbol)
        if expr != r.symbol:
            if expr.is_number:
                _check_number(r, int(expr), conflicts)
            continue
        traced = env.var_to_range.get(r.symbol, ValueRanges(-int_oo, int_oo))
        try:
            narrowed = traced & r.declared
        except ValueRangeError:
            narrowed = None
        if narrowed is None or narrowed.is_bool or _empty(narrowed):
            conflicts.append(
                f"- Received user-specified min/max range of {_user_range(r.hint)}, conflicting with the "
                f"inferred min/max range of {_vr_str(traced)}, for {_spec_path(r)}.")
            continue
        env.var_to_range[r.symbol] = narrowed
        if r.hint.kind is DimHint.Kind.DYNAMIC and narrowed.is_singleton():
            conflicts.append(
                f"- Received user-specified dim hint Dim.DYNAMIC(min={r.hint.min}, max={r.hint.max}), but "
                f"tracing inferred a static shape of {narrowed.lower} for dimension {_spec_path(r)}.")
    if conflicts:
        raise DynamicSpecError(
            "Found the following conflicts between user-specified ranges and inferred ranges from model "
            "tracing:\n" + "\n".join(conflicts),
            where="export(..., dynamic_shapes=...)",
            fix="Widen the hint's bounds to meet the range the program needs (or drop them), or use "
                "Dim.AUTO / Dim.STATIC where the program only works for one size.")


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


def source_of(r: RootSymbol) -> Optional[str]:
    return r.uses[0].source if r.uses else None
