"""Rules for guards that are not a plain range or equality of one declared Dim.

A size equal to a product of other dims (kept, its range asserted), a
multiple of a constant (a new root: ``d = 3*_d``), an equality through
Min/Max read on the example's side (``dy0 = dx0 + 4``), a dim narrowed only
by ``torch._check`` on data (the assert stays in the graph), a Dim fixed to
one value through a derived dim.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import sympy

from ..torch_private.shapes import deferred_asserts, guards, symbol_ranges
from ..torch_private.symbolic import ValueRanges, int_oo
from .dims import DerivedDim
from .guard_words import DimNamer, defer_assert, dim_fix, finite_int, implied_by, where_text
from .symbols import RootSymbol, SymbolicInputs


def is_affine_in_one(expr: Any) -> bool:
    """Whether a replacement can be written in a spec: ``a*other + b`` of one other Dim."""
    syms = expr.free_symbols
    if len(syms) != 1:
        return False
    (s,) = syms
    poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
    return poly is not None and poly.degree() == 1


def defer_range_asserts(env: Any, r: RootSymbol, expr: Any, namer: "DimNamer", sloc: Any) -> None:
    ranges = {s: symbol_ranges(env).get(s, ValueRanges(0, int_oo)) for s in expr.free_symbols}
    for cond in (expr >= r.declared.lower, expr <= r.declared.upper):
        if cond is sympy.true or r.declared.upper is int_oo and cond.rhs is int_oo or implied_by(cond, ranges):
            continue
        defer_assert(env, cond, f"{r.name} = {namer(expr)} must stay in its declared range{where_text(sloc)}")


def divisor_guard(guard: Any) -> Optional[tuple[Any, int, int, int]]:
    """``(d, a, b, m)`` when ``guard`` says ``a*d + b`` is a multiple of ``m`` for one dim ``d``:
    ``Eq(Mod(a*d + b, m), 0)`` (``d % 3 == 0``, or ``(dx + 1) % 3 == 0`` once ``dy = dx + 1``)."""
    if not isinstance(guard, sympy.Eq) or guard.rhs != 0:
        return None
    mod = guard.lhs
    if type(mod).__name__ not in ("Mod", "PythonMod") or len(mod.args) != 2:
        return None
    base, m = mod.args
    if not m.is_Integer or int(m) <= 1 or not is_affine_in_one(base):
        return None
    (d,) = base.free_symbols
    a, b = sympy.Poly(base, d).all_coeffs()
    if not (a.is_Integer and b.is_Integer) or int(a) < 1:
        return None
    return d, int(a), int(b), int(m)


def new_root_step(a: int, b: int, m: int, example: Optional[int]) -> Optional[tuple[int, int]]:
    """``(step, c)`` such that ``a*d + b`` is a multiple of ``m`` exactly when ``d = step*_d - c``
    (``0 <= c < step``); ``None`` when no size satisfies it. With gcd(a, m) = g the sizes that work
    are one residue class modulo m/g; the example (which satisfied the guard) picks it."""
    g = sympy.igcd(a, m)
    if b % g:
        return None
    step = m // g
    if example is not None and (a * example + b) % m == 0:
        residue = example % step
    else:  # solve a/g * d = -b/g (mod step) directly
        residue = (-(b // g) * pow(a // g, -1, step)) % step if step > 1 else 0
    return step, (-residue) % step


def new_root_fixes(r: RootSymbol, step: int, c: int, need: ValueRanges, fixes: dict) -> dict[str, str]:
    """``_d = Dim('_d', ...)`` and ``d = step*_d - c``: a dim restricted to one residue class.

    The new root's range is the one that keeps ``d`` in the range the program needs."""
    lo = max(need.lower, r.declared.lower)
    hi = min(need.upper, r.declared.upper)
    root = f"_{r.name}"
    root_lo = -(-(int(lo) + c) // step)
    root_hi = None if finite_int(hi) is None else (int(hi) + c) // step
    # the range of d is now the root's: ``d = step*_d - c`` replaces d's range fix where it stands
    offset = f" - {c}" if c else ""
    return {root: dim_fix(root, root_lo, root_hi), r.name: f"{r.name} = {step}*{root}{offset}"}


def rebase_on_new_roots(fixes: dict[str, str], related: dict[str, Any], new_roots: dict[Any, Any],
                        root_names: set[str], namer: "DimNamer") -> dict[str, str]:
    """One round of fixes: every ``y = f(d)`` fix of a dim ``d`` that got a new root ``d = step*_d - c``
    is rewritten over ``_d`` (``dy = dx + 1`` becomes ``dy = 3*_dx``); the fixes keep their order and
    each new root's ``Dim`` line comes just before the first line that uses it, as a spec needs it
    defined before the dims derived from it."""
    out: dict[str, str] = {}
    for name, text in fixes.items():
        if name in root_names:
            continue
        expr = related.get(name)
        if expr is not None and expr.free_symbols & set(new_roots):
            text = f"{name} = {namer(sympy.expand(expr.xreplace(new_roots)))}"
        for root in sorted(root_names - set(out)):
            if re.search(rf"\b{root}\b", text):
                out[root] = fixes[root]
        out[name] = text
    return out


def tie_at_example(guard: Any, example: dict) -> Optional[tuple[Any, Any]]:
    """``(d, a*e + b)``: the equality between two dims ``guard`` says on the example's side of its
    Min/Max (``dx0 == Max(0, dy0 - Min(4, dy0))`` at dy0 = 10 is ``dy0 = dx0 + 4``)."""
    def branch(e: Any) -> Any:
        values = [a.xreplace({s: example.get(s, s) for s in a.free_symbols}) for a in e.args]
        if not all(v.is_number for v in values):
            return e
        pick = min if type(e).__name__ == "Min" else max
        return e.args[values.index(pick(values))]
    plain = guard.replace(lambda e: type(e).__name__ in ("Min", "Max"), branch)
    if not isinstance(plain, sympy.Eq) or len(plain.free_symbols) != 2:
        return None
    for target in sorted(plain.free_symbols, key=str):
        try:
            sols = sympy.solve(plain, target)
        except NotImplementedError:
            continue
        if len(sols) == 1 and is_affine_in_one(sols[0]):
            (other,) = sols[0].free_symbols
            poly = sympy.Poly(sols[0], other)
            a, b = poly.all_coeffs()
            if a.is_Integer and b.is_Integer and a >= 1 and b >= 0:
                return target, sols[0]
    return None


def narrowed_only_by_asserts(env: Any, inputs: SymbolicInputs, sym: Any) -> bool:
    """Whether no guard of the program mentions ``sym`` but a deferred runtime assert on a value read
    from data does (``torch._check(u < y.size(0))``). An assert on input sizes alone (kept under no
    data symbol: ``prefer_deferred_runtime_asserts_over_guards`` makes the shape engine defer its
    guards so) counts as the guard it stands for."""
    if any(sym in env.simplify(g.expr).free_symbols for g in guards(env)[inputs.first_program_guard:]):
        return False
    return any(sym in a.expr.free_symbols
               for data_symbol, asserts in deferred_asserts(env).items() if data_symbol is not None
               for a in asserts)


def ranges_meet(a: ValueRanges, b: ValueRanges) -> bool:
    return bool(max(a.lower, b.lower) <= min(a.upper, b.upper))


def only_solution(guard: Any, sym: Any) -> Optional[int]:
    """The one integer value of ``sym`` an equality guard allows, if it is one."""
    if not isinstance(guard, sympy.Eq):
        return None
    try:
        sols = sympy.solve(guard, sym)
    except NotImplementedError:
        return None
    return int(sols[0]) if len(sols) == 1 and sols[0].is_integer else None


def specialization_problem(r: RootSymbol, value: int, guard: str, where: str) -> str:
    """A declared Dim the program's guards fix to one value (through the dims derived from it)."""
    derived = [u.spec for u in r.uses if isinstance(u.spec, DerivedDim)]
    through = "".join(f" solving the guards generated for {d.__name__} resulted in a specialized value of "
                      f"{int(d.fn(value))};" for d in derived)
    return (f"Specializations unexpectedly required ({r.name})! The program needs {guard}{where}:{through} "
            f"{r.name} can only be {value}.")
