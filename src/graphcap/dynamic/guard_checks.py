"""Check the guards raised while tracing against the ``dynamic_shapes`` spec.

After the trace the ``ShapeEnv`` knows what the program needed of each
symbol: a narrower range (``if x.shape[0] > 4``), a constant (a shape branch
that only works for one size), an equality with another symbol (``x + y``)
or some other relation. For a declared ``Dim`` these are constraint
violations: the error lists each in plain words (torch.export's phrases
included), with the user source line, and ends with ``Suggested fixes:``
lines (``x = Dim('x', min=5, max=16)``, ``y = x``, ``x = 8``, ``_x = Dim('_x')``
and ``x = 3*_x``) that ``refine_dynamic_shapes_from_suggested_fixes`` (ours or
torch's, see ``suggested_fixes``) applies to the spec. Relations no Dim can
state and that an operator (not the user's branch) needs are kept as runtime
asserts instead (``relations``), as torch.export accepts them. ``Dim.AUTO``
findings are used as they are and logged; a ``Dim.DYNAMIC`` fixed to a
constant is an error (``hints``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import sympy

from ..torch_private.naming_and_shapes import raised_by_copy_overlap_check
from ..torch_private.shapes import example_values, guards, replacement_locations, symbol_range_locations, symbol_ranges
from ..torch_private.symbolic import ValueRanges, int_oo
from . import hints as dyn_hints
from .guard_words import (
    DimNamer,
    constraint_violation,
    defer_assert,
    dim_fix,
    finite_int,
    implied_by,
    in_framework,
    range_words,
    where_text,
)
from .relations import (
    defer_range_asserts,
    divisor_guard,
    is_affine_in_one,
    narrowed_only_by_asserts,
    new_root_fixes,
    new_root_step,
    only_solution,
    ranges_meet,
    rebase_on_new_roots,
    specialization_problem,
    tie_at_example,
)
from .size_one_checks import PendingSizeCheck, is_size_special_case
from .symbols import SymbolicInputs

log = logging.getLogger("graphcap.dynamic")


def _is_zero_one_check(g: Any, sym: Any) -> bool:
    """``Ne(s, 0)`` / ``Ne(s, 1)``: a size compared with 0 or 1 and nothing else; also a size an
    operator derives from ``s`` alone compared with 0 or 1, possibly scaled: ``Ne(8*s, 8)`` (a
    stride of a dim of size ``s`` times 8 heads), ``Ne((s + 1)//2, 1)`` (a strided window count)."""
    if not isinstance(g, sympy.Ne):
        return False
    if {g.lhs, g.rhs} in ({sym, sympy.Integer(0)}, {sym, sympy.Integer(1)}):
        return True
    size, const = (g.lhs, g.rhs) if g.rhs.is_Integer else (g.rhs, g.lhs)
    if not const.is_Integer or size.free_symbols != {sym}:
        return False
    if isinstance(size, sympy.Mul):  # 8*s against 8: s against 1
        coeff, rest = size.as_coeff_Mul()
        if coeff.is_Integer and coeff > 0 and const % coeff == 0:
            size, const = rest, const // coeff
    return const in (0, 1)


@dataclass
class _Findings:
    """What ``check_guards`` has found so far, and what it reads: the steps below fill it in turn."""

    env: Any  # the ShapeEnv of the trace
    inputs: SymbolicInputs
    namer: DimNamer
    example: dict[Any, Any]  # symbol -> its size in the example
    problems: list[str] = field(default_factory=list)
    range_problems: list[str] = field(default_factory=list)  # listed after the guards', as torch.export does
    fixes: dict[str, str] = field(default_factory=dict)
    related: dict[str, Any] = field(default_factory=dict)  # fix name -> the expression over other dims' symbols
    new_roots: dict[Any, Any] = field(default_factory=dict)  # dim symbol -> step*_d - c (a residue class)
    covered: set[Any] = field(default_factory=set)  # symbols a problem already names
    named: set[str] = field(default_factory=set)  # the Dim names the problems are about (the headline's)
    reported: set[Any] = field(default_factory=set)  # guards already turned into a problem or an assert
    by_sym: dict[Any, Any] = field(init=False)  # symbol -> its root dim
    declared: list[Any] = field(init=False)  # the root dims the spec declares (not hints)

    def __post_init__(self) -> None:
        self.by_sym = self.inputs.by_symbol()
        self.declared = [r for r in self.inputs.roots if r.hint is None]


def _check_each_dim(found: _Findings) -> None:
    """Each root dim after the trace: specialized to a constant, replaced by an expression over other
    dims, or narrowed to a smaller range; each is a problem (with its fix) or, for hints, a log line."""
    env = found.env
    for r in found.inputs.roots:
        expr = env.replace(r.symbol)
        sloc = replacement_locations(env).get(r.symbol)
        if expr.is_number:
            _check_specialized(found, r, expr, sloc)
        elif expr != r.symbol:
            _check_replaced(found, r, expr, sloc)
        else:
            _check_narrowed(found, r)


def _check_specialized(found: _Findings, r: Any, expr: Any, sloc: Any) -> None:
    """The trace fixed dim ``r`` to the constant ``expr`` (a shape branch that works for one size):
    for a declared Dim the spec promised more, so it is a problem fixed by ``r = <constant>``; a
    ``Dim.DYNAMIC`` is refused as well (without a fix: the user asked for dynamic), a ``Dim.AUTO``
    is just logged."""
    found.covered.add(r.symbol)
    if dyn_hints.is_dynamic_hint(r):
        found.problems.append(dyn_hints.dynamic_specialization_problem(r, expr, where_text(sloc)))
        found.named.add(r.name)
        return
    if r.hint is not None:
        log.info("graphcap: dimension %s (%s) was specialized to %s%s", r.name, r.hint, expr, where_text(sloc))
        return
    found.problems.append(
        f"You marked {r.name} as dynamic but your code specialized it to be a constant ({expr}): "
        f"the spec gives the range {range_words(r.name, r.declared)}, but the program "
        f"only works for {r.name} = {expr}{where_text(sloc)}. If you're using Dim.DYNAMIC, replace it "
        f"with either Dim.STATIC or Dim.AUTO.")
    found.fixes[r.name] = f"{r.name} = {int(expr)}"


def _check_replaced(found: _Findings, r: Any, expr: Any, sloc: Any) -> None:
    """The trace replaced dim ``r`` by ``expr`` over other dims (``x + y`` makes them equal). A
    relation no Dim can state is kept as runtime asserts; one with a hint is the hint's to follow;
    one between declared Dims is a problem, fixed by a derived Dim where one can say it."""
    found.covered.add(r.symbol)
    others = [found.by_sym.get(s) for s in expr.free_symbols]
    if r.hint is None and not any(o is None for o in others) and not is_affine_in_one(expr):
        # e.g. z = x0*x1 from a reshape: no Dim can say it; as in torch.export the
        # program keeps the relation (the input check computes z from x) and its range
        # becomes a runtime assert where the other dims do not imply it
        defer_range_asserts(found.env, r, expr, found.namer, sloc)
        return
    if r.hint is not None or any(o is None for o in others):
        log.info("graphcap: dimension %s was found to equal %s%s", r.name, found.namer(expr), where_text(sloc))
        return
    if all(o.hint is not None for o in others):
        # a Dim the program equates with Dim.AUTO / Dim.DYNAMIC dims: the hints take the
        # Dim's range (they are traced over every size), whichever operand came first
        problem = dyn_hints.equate_with_hints(found.env, r, expr, found.namer, sloc)
        if problem is not None:
            found.problems.append(problem)
            found.named.update([r.name, *(o.name for o in others)])
        return
    other = others[0]
    same = (f"The values of {r.name} and {other.name} must always be equal: "
            if expr == other.symbol else "")
    found.problems.append(
        f"{same}The program needs {r.name} = {found.namer(expr)}{where_text(sloc)}, but the spec declares them as "
        f"independent dims.")
    if expr == other.symbol and other.hint is None:
        found.fixes[r.name] = f"{r.name} = {other.name}"
        found.related[r.name] = expr
    elif len(others) == 1 and other.hint is None:
        found.fixes[r.name] = f"{r.name} = {found.namer(expr)}"
        found.related[r.name] = expr
    else:  # no fix to suggest: the headline names every dim of the relation
        found.named.update([r.name, *(o.name for o in others)])


def _needed_range(found: _Findings, r: Any) -> tuple[Any, Any, Any]:
    """``(lo, hi, slocs)``: the range the program needs of declared dim ``r``, within the declared
    one, leaving out what does not narrow it: torch's own 0/1 layout assumptions and checks that
    stay runtime asserts on a value read from data."""
    env = found.env
    vr = symbol_ranges(env).get(r.symbol, r.declared)
    lo = max(vr.lower, r.declared.lower)
    hi = min(vr.upper, r.declared.upper)
    slocs = symbol_range_locations(env).get(r.symbol)
    if lo != r.declared.lower and lo <= 2 and lo != hi and slocs is not None and in_framework(slocs.lower):
        # A layout decision inside torch (memory format, kernel choice) assumed the size is
        # not 0/1; the recorded operators are the same for those sizes, so, as torch.export
        # does, this assumption does not narrow the declared range. (A range of one size is
        # no such assumption: a broadcast that needs the size 1, read at the example's sizes
        # with prefer_deferred_runtime_asserts_over_guards, leaves [1, 1].)
        log.debug("graphcap: ignoring the framework's 0/1 assumption on %s%s", r.name, where_text(slocs.lower))
        lo = r.declared.lower
    if (lo, hi) != (r.declared.lower, r.declared.upper) and narrowed_only_by_asserts(env, found.inputs, r.symbol):
        # torch._check(u < y.size(0)) on a value read from data: the check stays a runtime
        # assert in the graph; no guard needs the narrower range of the input size
        log.debug("graphcap: %s narrowed only by runtime asserts; keeping the declared range", r.name)
        lo, hi = r.declared.lower, r.declared.upper
    return lo, hi, slocs


def _check_narrowed(found: _Findings, r: Any) -> None:
    """Dim ``r`` kept its symbol but the trace narrowed its range (``if x.shape[0] > 4``): for a
    declared Dim a range problem, fixed by the narrower ``Dim(...)``; hints take any range."""
    if r.hint is not None:
        return
    lo, hi, slocs = _needed_range(found, r)
    if (lo, hi) == (r.declared.lower, r.declared.upper):
        return
    sloc = None
    if slocs is not None:
        sloc = slocs.lower if lo != r.declared.lower else slocs.upper
    problem = (f"Not all values of {r.name} ({_where_dim(r)}) in the specified range "
               f"{range_words(r.name, r.declared)} satisfy the generated guard "
               f"{range_words(r.name, ValueRanges(lo, hi))}: the program needs "
               f"{range_words(r.name, ValueRanges(lo, hi))}{where_text(sloc)}.")
    fix = dim_fix(r.name, finite_int(lo), finite_int(hi))
    if hi == r.declared.upper and r.declared.lower < lo <= 2:
        # ``if x.size(0) > 1:`` only cuts sizes 0/1 off the range: like ``Ne(batch, 1)``, the
        # general branch the trace took is kept for them when the program matches eager there
        # each size's fix cuts the range just above it: a failure at 0 alone keeps 1 (the later
        # size's fix wins when both fail, as ``confirm`` reads them)
        for k in range(max(0, finite_int(r.declared.lower)), finite_int(lo)):
            found.inputs.pending_size_checks.append(
                PendingSizeCheck(r, k, problem, dim_fix(r.name, k + 1, finite_int(hi))))
        # the dim is not covered: its other guards (a bound ``Min(128, d) == d`` the range does
        # not show) are still checked
        return
    found.covered.add(r.symbol)
    found.range_problems.append(problem)
    found.fixes[r.name] = fix


def _where_dim(r: Any, torch_source: bool = False) -> str:
    """Where Dim ``r`` is an input size, for a problem's words: the first input dimension that is
    exactly ``r`` (``*args[0].shape[0]``, or `` = L['x'].size()[0]`` in torch's form); where every
    use is derived from it (``{0: d + 1}``), the first use with its form (``*args[0].shape[0] is
    d + 1``): the size there is not ``r`` itself."""
    use = next((u for u in r.uses if getattr(u.spec, "root", None) is None), None)
    if use is not None:
        return f" = {use.source}" if torch_source else use.path
    use = r.uses[0]
    form = getattr(use.spec, "__name__", str(use.spec))
    return f" ({use.source} is {form})" if torch_source else f"{use.path} is {form}"


def _check_relations(found: _Findings, prefer_deferred_asserts: bool) -> None:
    """The guards that are not a replacement or a range of one dim: divisibility, bounds from slices,
    size special cases, relations between dims; each a problem, a pending check or a runtime assert."""
    env, inputs, by_sym = found.env, found.inputs, found.by_sym
    ranges = _ranges_for_relations(found)
    for guard in guards(env)[inputs.first_program_guard:]:  # not the ones fakifying the inputs raised
        if raised_by_copy_overlap_check(getattr(guard.sloc, "framework_loc", None)):
            continue  # copy_'s own self-overlap check: no requirement of the program (see there)
        g = env.simplify(guard.expr)
        syms = g.free_symbols
        if g in found.reported or not syms or not any(s in by_sym and by_sym[s].hint is None for s in syms):
            continue
        if _check_divisibility(found, g, guard.sloc, prefer_deferred_asserts):
            continue
        if syms <= found.covered or any(s not in ranges for s in syms):
            continue
        if len(syms) == 1 and _check_one_dim_guard(found, g, ranges, guard.sloc, prefer_deferred_asserts):
            continue
        _check_relation(found, g, ranges, guard.sloc, prefer_deferred_asserts)


def _ranges_for_relations(found: _Findings) -> dict[Any, Any]:
    """Symbol -> the range a relation may assume: a declared Dim's declared range (what the spec
    promises), a hint's traced range (it takes whatever the trace found)."""
    ranges = {r.symbol: r.declared for r in found.declared}
    for r in found.inputs.roots:
        if r.hint is not None:
            ranges[r.symbol] = symbol_ranges(found.env).get(r.symbol, r.declared)
    return ranges


def _check_divisibility(found: _Findings, g: Any, sloc: Any, prefer_deferred_asserts: bool) -> bool:
    """A divisibility guard on a declared dim (a reshape to ``(-1, 3)``): a problem, fixed by a new
    root Dim when the sizes that pass are one residue class, or a runtime assert when asked to
    prefer those. Whether ``g`` was one."""
    modulus = divisor_guard(g)
    if modulus is None or modulus[0] not in found.by_sym or found.by_sym[modulus[0]].hint is not None:
        return False
    # e.g. a reshape to (-1, 3), or y.shape[0] % 3 == 0 with dy = dx + 1: (dx + 1) % 3 == 0
    found.reported.add(g)
    r, (sym, a, b, m) = found.by_sym[modulus[0]], modulus
    if prefer_deferred_asserts:
        defer_assert(found.env, g, f"the program needs {found.namer(g)}{where_text(sloc)}")
        return True
    found.problems.append(f"Not all values of {r.name}{_where_dim(r, torch_source=True)} in the specified range "
                          f"{range_words(r.name, r.declared)} satisfy the generated guard {found.namer(g)}"
                          f"{where_text(sloc)}.")
    found.named.add(r.name)
    found.covered.add(r.symbol)
    example = found.example.get(sym)
    step = new_root_step(a, b, m, finite_int(example) if example is not None else None)
    if step is not None and sym not in found.new_roots:  # one residue class: d = step*_d - c
        found.fixes.update(new_root_fixes(r, *step, symbol_ranges(found.env).get(r.symbol, r.declared), found.fixes))
        found.new_roots[sym] = step[0] * sympy.Symbol(f"_{r.name}", integer=True) - step[1]
    return True


def _check_one_dim_guard(found: _Findings, g: Any, ranges: dict[Any, Any], sloc: Any,
                         prefer_deferred_asserts: bool) -> bool:
    """A guard over one dim that is not a plain range. Whether it was settled here; else it is
    checked as a relation."""
    (sym,) = g.free_symbols
    if implied_by(g, {sym: symbol_ranges(found.env).get(sym, ranges[sym])}):
        return True  # a range guard: the range check above saw it
    if _check_bound(found, g, sym, sloc):
        return True
    if in_framework(sloc) and _is_zero_one_check(g, sym):
        # torch's own 0/1 reasoning inside an operator (strides, memory format: Ne(s, 1)
        # in a conv's fake kernel); the values do not depend on it, and graphcap keeps
        # sizes 0 and 1 in the declared range rather than assert them away
        return True
    if not prefer_deferred_asserts and _pend_size_special_case(found, g, sym, sloc):
        return True
    return _check_only_solution(found, g, sym, sloc)


def _check_bound(found: _Findings, g: Any, sym: Any, sloc: Any) -> bool:
    """A bound on a declared dim (``Min(3, d) == 3`` from a slice: ``d >= 3``) is a range problem,
    fixed by the range the program needs. Whether ``g`` was one."""
    bound = dyn_hints.bound_of(g, sym)
    r = found.by_sym[sym]
    if bound is None or r.hint is not None:
        return False
    found.reported.add(g)
    found.covered.add(sym)
    need = r.declared & bound if ranges_meet(r.declared, bound) else bound
    found.problems.append(f"Not all values of {r.name} ({_where_dim(r)}) in the specified range "
                          f"{range_words(r.name, r.declared)} satisfy the generated guard {found.namer(g)}: "
                          f"the program needs "
                          f"{range_words(r.name, need)}{where_text(sloc)}.")
    found.fixes[r.name] = dim_fix(r.name, finite_int(need.lower), finite_int(need.upper))
    return True


def _pend_size_special_case(found: _Findings, g: Any, sym: Any, sloc: Any) -> bool:
    """A size special case from user code (``Ne(batch, 1)``) on a declared dim: whether the program
    really differs at that size is confirmed on the program once it exists (``size_one_checks``),
    so the problem waits in ``inputs.pending_size_checks``. Whether ``g`` was one."""
    r = found.by_sym[sym]
    k = is_size_special_case(g, sym, r.declared) if r.hint is None else None
    if k is None:
        return False
    found.reported.add(g)
    lo = k + 1 if k == finite_int(r.declared.lower) else finite_int(r.declared.lower)
    found.inputs.pending_size_checks.append(PendingSizeCheck(
        r, k, f"The program needs {found.namer(g)}{where_text(sloc)}, which the spec does not "
              f"guarantee.", dim_fix(r.name, lo, finite_int(r.declared.upper))))
    return True


def _check_only_solution(found: _Findings, g: Any, sym: Any, sloc: Any) -> bool:
    """An equation one size alone solves (``2*(d - 6) == d`` from a reshape) specializes a declared
    dim: a problem fixed by that size. Whether ``g`` was one."""
    r = found.by_sym[sym]
    value = only_solution(g, sym)
    if value is None or r.hint is not None:
        return False
    found.reported.add(g)
    found.covered.add(sym)
    found.problems.append(specialization_problem(r, value, found.namer(g), where_text(sloc)))
    found.fixes[r.name] = f"{r.name} = {value}"
    return True


def _check_relation(found: _Findings, g: Any, ranges: dict[Any, Any], sloc: Any,
                    prefer_deferred_asserts: bool) -> None:
    """A relation between dims the declared ranges do not imply: an equality at the example's side
    (``x + y[4:]``) is fixed by a derived Dim; one an operator needs, or any when asked to prefer
    asserts, becomes a runtime assert; the rest is a problem without a fix."""
    if implied_by(g, ranges):
        return
    found.reported.add(g)
    namer, by_sym = found.namer, found.by_sym
    tied = tie_at_example(g, found.example) if isinstance(g, sympy.Eq) else None
    if tied is not None and all(by_sym[t].hint is None for t in g.free_symbols):  # x + y[4:]: dy0 = dx0 + 4
        target, expr = tied
        found.problems.append(f"The program needs {namer(target)} = {namer(expr)} for sizes on the example's "
                              f"side of {namer(g)}{where_text(sloc)}, but the spec declares them as "
                              f"independent dims.")
        found.fixes[by_sym[target].name] = f"{by_sym[target].name} = {namer(expr)}"
        found.related[by_sym[target].name] = expr
        return
    if _check_min_max_bounds(found, g, sloc):
        return
    framework_relation = in_framework(sloc) and not isinstance(dyn_hints.without_min_max(g), sympy.Eq)
    if prefer_deferred_asserts or framework_relation or _hint_follows(found, g):
        # prefer_deferred_runtime_asserts_over_guards=True, a relation an operator needs of its
        # input sizes (a slice assigned from another input), or a Dim.AUTO / DYNAMIC size that
        # follows declared ones (``mask.shape[1] <= past + new``, an equality at the example;
        # no Dim can say a sum of two dims): asserted and checked before computing
        defer_assert(found.env, g, f"the program needs {namer(g)}{where_text(sloc)}")
        return
    found.problems.append(f"The program needs {namer(g)}{where_text(sloc)}, which the spec does not guarantee.")
    found.named.update(by_sym[s].name for s in g.free_symbols if s in by_sym)


def _hint_follows(found: _Findings, g: Any) -> bool:
    """Whether inequality ``g`` ties a Dim.AUTO / Dim.DYNAMIC size to declared dims: it holds with
    equality at the example (an automatic mask length equal to ``past + new``), so the automatic
    size follows the declared ones rather than bounding them; no declared Dim loses a size."""
    by_sym = found.by_sym
    if not isinstance(g, (sympy.Le, sympy.Ge)) or not any(
            s in by_sym and by_sym[s].hint is not None for s in g.free_symbols):
        return False
    at = {s: sympy.Integer(v) for s, v in found.example.items() if s in g.free_symbols}
    if set(at) != g.free_symbols:
        return False
    return bool(sympy.expand((g.lhs - g.rhs).xreplace(at)) == 0)


# a relation read the other way round: ``a < b`` is ``b > a``; ``-x < c`` is ``x > -c``
_MIRRORED = {sympy.Gt: sympy.Lt, sympy.Ge: sympy.Le, sympy.Lt: sympy.Gt, sympy.Le: sympy.Ge}


def _linear_bound(cond: Any, sym: Any) -> ValueRanges | None:
    """The range of ``sym`` that ``cond`` allows when it is linear in ``sym`` alone (``4*h > 4``:
    ``h >= 2``), else None."""
    rel = type(cond)
    if rel not in (sympy.Gt, sympy.Ge, sympy.Lt, sympy.Le) or cond.free_symbols != {sym}:
        return None
    expr = sympy.expand(cond.lhs - cond.rhs)  # expr REL 0
    a, b = expr.coeff(sym, 1), expr.coeff(sym, 0)
    if not (a.is_Rational and b.is_Rational) or a == 0 or sympy.expand(a * sym + b - expr) != 0:
        return None
    x0 = -b / a
    if a < 0:  # a*sym + b > 0 with a < 0 is sym < x0
        rel = _MIRRORED[rel]
    lo = {sympy.Gt: sympy.floor(x0) + 1, sympy.Ge: sympy.ceiling(x0)}.get(rel)
    hi = {sympy.Lt: sympy.ceiling(x0) - 1, sympy.Le: sympy.floor(x0)}.get(rel)
    return ValueRanges(-int_oo if lo is None else int(lo), int_oo if hi is None else int(hi))


def _min_max_parts(g: Any) -> list[Any] | None:
    """``Min(a, b) > c`` as ``[a > c, b > c]`` (and ``Max(a, b) < c`` likewise): a guard on the
    smaller (larger) of several sizes that holds exactly when it holds for each, as a shape branch
    on ``min(h, w)`` records; None when ``g`` is not one."""
    if not isinstance(g, (sympy.Gt, sympy.Ge, sympy.Lt, sympy.Le)):
        return None
    rel, lhs, rhs = type(g), g.lhs, g.rhs
    if not lhs.args or type(lhs).__name__ not in ("Min", "Max"):
        lhs, rhs = rhs, lhs
        rel = _MIRRORED[rel]
    kind = type(lhs).__name__
    if not rhs.is_Integer or (kind, rel) not in (("Min", sympy.Gt), ("Min", sympy.Ge),
                                                   ("Max", sympy.Lt), ("Max", sympy.Le)):
        return None
    return [rel(arg, rhs) for arg in lhs.args]


def _check_min_max_bounds(found: _Findings, g: Any, sloc: Any) -> bool:
    """``Min(4*h, 4*w) > 4`` (Swin's ``if min(input_resolution) <= window_size``) bounds each declared
    dim in it: a range problem per dim it narrows, each fixed by the narrower ``Dim(...)``, as a
    bound on one dim is. Whether ``g`` was one."""
    parts = _min_max_parts(g)
    if parts is None:
        return False
    bounds = []
    for part in parts:
        if part.free_symbols and len(part.free_symbols) != 1:
            return False
        if not part.free_symbols:
            continue
        (sym,) = part.free_symbols
        r = found.by_sym.get(sym)
        bound = _linear_bound(part, sym)
        if r is None or r.hint is not None or bound is None or r.symbol != sym:
            return False
        bounds.append((r, bound))
    found.reported.add(g)
    for r, bound in bounds:
        if r.declared.lower >= bound.lower and r.declared.upper <= bound.upper:
            continue
        found.covered.add(r.symbol)
        need = r.declared & bound if ranges_meet(r.declared, bound) else bound
        found.problems.append(f"Not all values of {r.name} ({_where_dim(r)}) in the specified range "
                              f"{range_words(r.name, r.declared)} satisfy the generated guard {found.namer(g)}: "
                              f"the program needs {range_words(r.name, need)}{where_text(sloc)}.")
        found.fixes[r.name] = dim_fix(r.name, finite_int(need.lower), finite_int(need.upper))
    return True


def _add_pending_size_checks(found: _Findings) -> None:
    """Size special cases (``Ne(batch, 1)``) wait to be confirmed on the program; when other problems
    already stop the export there is no program, so they are reported with the rest."""
    pending = [c for c in found.inputs.pending_size_checks if not c.soft]
    if not found.problems or not pending:
        return
    for check in pending:
        found.problems.append(check.problem)
        found.named.add(check.root.name)
        found.fixes.setdefault(check.root.name, check.fix)
    found.inputs.pending_size_checks[:] = [c for c in found.inputs.pending_size_checks if c.soft]


def _raise_violations(found: _Findings) -> None:
    """One ``ConstraintViolationError`` listing every problem, its fixes last (``Suggested fixes:``),
    the fixes rewritten over the new root Dims that divisibility introduced."""
    root_names = {f"_{found.by_sym[s].name}" for s in found.new_roots}
    fixes = found.fixes
    if found.new_roots:
        fixes = rebase_on_new_roots(fixes, found.related, found.new_roots, root_names, found.namer)
    if not found.problems:
        return
    # the dims the problems are about (a problem without a fix names its dims too), not every
    # declared dim: a dynamic batch beside a specialized height is no part of the violation
    names = sorted(({*fixes} | found.named) - root_names or {r.name for r in found.declared}
                   or {r.name for r in found.inputs.roots})
    raise constraint_violation(names, found.problems, fixes.values(),
                               ", or change the code at the line shown, or use Dim.AUTO to let graphcap "
                               "find the ranges.")


def check_guards(mode: Any, inputs: SymbolicInputs, prefer_deferred_asserts: bool = False) -> None:
    """Raise ``ConstraintViolationError`` if the trace needed more of a declared Dim than the spec gives.

    With ``prefer_deferred_asserts`` a relation between dims that the spec
    does not guarantee is asserted in the graph instead (module() refuses
    inputs that break it, before computing)."""
    env = mode.shape_env
    found = _Findings(env, inputs, DimNamer(inputs.roots), example_values(env))
    _check_each_dim(found)  # what the trace did to each declared dim: a constant, another dim, a range
    _check_relations(found, prefer_deferred_asserts)  # the other guards: relations between dims
    found.problems += found.range_problems  # after the guards' problems, as torch.export lists them
    _add_pending_size_checks(found)
    _raise_violations(found)
