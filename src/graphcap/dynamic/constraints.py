"""Check the guards raised while tracing against the spec; ranges; runtime asserts.

After the trace the ``ShapeEnv`` knows what the program needed of each
symbol: a narrower range (``if x.shape[0] > 4``), a constant (a shape branch
that only works for one size), an equality with another symbol (``x + y``)
or some other relation. For a declared ``Dim`` any of these is a constraint
violation: the error lists each in plain words, with the user source line,
and ends with ``Suggested fixes:`` lines (``x = Dim('x', min=5, max=16)``,
``y = x``, ``x = 8``) that :func:`refine_dynamic_shapes_from_suggested_fixes`
applies to the spec. For ``Dim.AUTO`` / ``Dim.DYNAMIC`` dims what was found
is used as it is, and each specialization is logged with its source line.

Then every symbol of the graph gets a range (``range_constraints``), and the
asserts the trace deferred (data-dependent values bounded by
``torch._check``) are inserted into the graph as ``aten._assert_scalar``
nodes, so the program refuses data that breaks them.
"""
from __future__ import annotations

import logging
import re
import traceback
from typing import Any, Optional

import sympy
import torch
import torch.utils._pytree as pytree
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from ..errors import ConstraintViolationError, ExportInputError, UnsupportedError
from . import hints as dyn_hints
from .dims import DerivedDim, Dim, as_dim
from .symbols import RootSymbol, SymbolicInputs

log = logging.getLogger("graphcap.dynamic")


# ---------------------------------------------------------------------------
# guard check
# ---------------------------------------------------------------------------

def _bound(v: Any) -> Optional[int]:
    if v in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    return int(v)


def _range_words(name: str, vr: ValueRanges) -> str:
    lo, hi = _bound(vr.lower), _bound(vr.upper)
    if hi is None:
        return f"{name} >= {lo}"
    return f"{lo} <= {name} <= {hi}"


def _dim_fix(name: str, lo: Optional[int], hi: Optional[int]) -> str:
    parts = []
    if lo is not None and lo > 0:
        parts.append(f"min={lo}")
    if hi is not None:
        parts.append(f"max={hi}")
    return f"{name} = Dim('{name}'" + "".join(f", {p}" for p in parts) + ")"


def _where(sloc: Any) -> str:
    """The user source line of a guard, as `` (at file:line in fn: code)``."""
    if sloc is None:
        return ""
    user = getattr(sloc, "maybe_user_loc", None)
    if user:
        return f" (at {user.strip()})"
    frame = getattr(sloc, "framework_loc", None)
    if isinstance(frame, traceback.FrameSummary) and "/torch/" not in frame.filename:
        code = f": {frame.line.strip()}" if frame.line else ""
        return f" (at {frame.filename}:{frame.lineno} in {frame.name}{code})"
    return ""


def _in_framework(sloc: Any) -> bool:
    """Whether a guard was raised inside torch (an operator's own logic), not by user code."""
    frame = getattr(sloc, "framework_loc", None)
    return isinstance(frame, traceback.FrameSummary) and "/torch/" in frame.filename


class _Namer:
    """Print expressions over symbols with the user's Dim names."""

    def __init__(self, roots: list[RootSymbol]):
        self.sub = {r.symbol: sympy.Symbol(r.name, integer=True) for r in roots}

    def __call__(self, expr: Any) -> str:
        return str(sympy.sympify(expr).xreplace(self.sub))


def _expressible(expr: Any) -> bool:
    """Whether a replacement can be written in a spec: ``a*other + b`` of one other Dim."""
    syms = expr.free_symbols
    if len(syms) != 1:
        return False
    (s,) = syms
    poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
    return poly is not None and poly.degree() == 1


def _defer_range(env: Any, r: RootSymbol, expr: Any, namer: "_Namer", sloc: Any) -> None:
    ranges = {s: env.var_to_range.get(s, ValueRanges(0, int_oo)) for s in expr.free_symbols}
    for cond in (expr >= r.declared.lower, expr <= r.declared.upper):
        if cond is sympy.true or r.declared.upper is int_oo and cond.rhs is int_oo or _implied(cond, ranges):
            continue
        _defer(env, cond, f"{r.name} = {namer(expr)} must stay in its declared range{_where(sloc)}")


def _divisor(guard: Any) -> Optional[tuple[Any, int]]:
    """``(d, c)`` when ``guard`` says a dim ``d`` is a multiple of ``c``: ``Eq(Mod(d, c), 0)``."""
    if not isinstance(guard, sympy.Eq) or guard.rhs != 0:
        return None
    mod = guard.lhs
    if type(mod).__name__ != "Mod" or len(mod.args) != 2:
        return None
    base, c = mod.args
    if not isinstance(base, sympy.Symbol) or not c.is_Integer or int(c) <= 1:
        return None
    return base, int(c)


def _new_root_fixes(r: RootSymbol, c: int, need: ValueRanges, fixes: dict) -> dict[str, str]:
    """``_d = Dim('_d', ...)`` and ``d = c*_d``: a dim that must be a multiple of ``c``."""
    lo = max(need.lower, r.declared.lower)
    hi = min(need.upper, r.declared.upper)
    root = f"_{r.name}"
    root_lo = -(-int(lo) // c)
    root_hi = None if _bound(hi) is None else int(hi) // c
    fixes.pop(r.name, None)  # the range of d is now the root's
    return {root: _dim_fix(root, root_lo, root_hi), r.name: f"{r.name} = {c}*{root}"}


def _tie_at_example(guard: Any, example: dict) -> Optional[tuple[Any, Any]]:
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
        if len(sols) == 1 and _expressible(sols[0]):
            (other,) = sols[0].free_symbols
            poly = sympy.Poly(sols[0], other)
            a, b = poly.all_coeffs()
            if a.is_Integer and b.is_Integer and a >= 1 and b >= 0:
                return target, sols[0]
    return None


def _meets(a: ValueRanges, b: ValueRanges) -> bool:
    return bool(max(a.lower, b.lower) <= min(a.upper, b.upper))


def _only_solution(guard: Any, sym: Any) -> Optional[int]:
    """The one integer value of ``sym`` an equality guard allows, if it is one."""
    if not isinstance(guard, sympy.Eq):
        return None
    try:
        sols = sympy.solve(guard, sym)
    except NotImplementedError:
        return None
    return int(sols[0]) if len(sols) == 1 and sols[0].is_integer else None


def _specialization(r: RootSymbol, value: int, guard: str, where: str) -> str:
    """A declared Dim the program's guards fix to one value (through the dims derived from it)."""
    derived = [u.spec for u in r.uses if isinstance(u.spec, DerivedDim)]
    through = "".join(f" solving the guards generated for {d.__name__} resulted in a specialized value of "
                      f"{int(d.fn(value))};" for d in derived)
    return (f"Specializations unexpectedly required ({r.name})! The program needs {guard}{where}:{through} "
            f"{r.name} can only be {value}.")


def _defer(env: Any, cond: Any, message: str) -> None:
    """Assert ``cond`` in the graph (checked at run time) instead of requiring it of the spec."""
    from torch.fx.experimental.symbolic_shapes import RuntimeAssert
    from torch.utils._traceback import CapturedTraceback
    env.deferred_runtime_asserts.setdefault(None, []).append(
        RuntimeAssert(cond, message, CapturedTraceback.extract(skip=2)))
    env.num_deferred_runtime_asserts += 1


def check_guards(mode: Any, inputs: SymbolicInputs, prefer_deferred_asserts: bool = False) -> None:
    """Raise ``ConstraintViolationError`` if the trace needed more of a declared Dim than the spec gives.

    With ``prefer_deferred_asserts`` a relation between dims that the spec
    does not guarantee is asserted in the graph instead (module() refuses
    inputs that break it, before computing)."""
    env = mode.shape_env
    by_sym = inputs.by_symbol()
    namer = _Namer(inputs.roots)
    problems: list[str] = []
    fixes: dict[str, str] = {}
    declared = [r for r in inputs.roots if r.hint is None]
    covered: set[Any] = set()

    for r in inputs.roots:
        expr = env.replace(r.symbol)
        sloc = env.replacements_slocs.get(r.symbol)
        if expr.is_number:
            covered.add(r.symbol)
            if dyn_hints.is_dynamic_hint(r):
                problems.append(dyn_hints.dynamic_specialization_problem(r, expr, _where(sloc)))
                continue
            if r.hint is not None:
                log.info("graphcap: dimension %s (%s) was specialized to %s%s", r.name, r.hint, expr, _where(sloc))
                continue
            problems.append(
                f"You marked {r.name} as dynamic but your code specialized it to be a constant ({expr}): "
                f"the spec gives the range {_range_words(r.name, r.declared)}, but the program "
                f"only works for {r.name} = {expr}{_where(sloc)}. If you're using Dim.DYNAMIC, replace it "
                f"with either Dim.STATIC or Dim.AUTO.")
            fixes[r.name] = f"{r.name} = {int(expr)}"
            continue
        if expr != r.symbol:
            covered.add(r.symbol)
            others = [by_sym.get(s) for s in expr.free_symbols]
            if r.hint is None and not any(o is None for o in others) and not _expressible(expr):
                # e.g. z = x0*x1 from a reshape: no Dim can say it; as in torch.export the
                # program keeps the relation (the input check computes z from x) and its range
                # becomes a runtime assert where the other dims do not imply it
                _defer_range(env, r, expr, namer, sloc)
                continue
            if r.hint is not None or any(o is None for o in others):
                log.info("graphcap: dimension %s was found to equal %s%s", r.name, namer(expr), _where(sloc))
                continue
            other = others[0]
            same = (f"The values of {r.name} and {other.name} must always be equal: "
                    if expr == other.symbol else "")
            problems.append(
                f"{same}The program needs {r.name} = {namer(expr)}{_where(sloc)}, but the spec declares them as "
                f"independent dims.")
            if expr == other.symbol and other.hint is None:
                fixes[r.name] = f"{r.name} = {other.name}"
            elif len(others) == 1 and other.hint is None:
                fixes[r.name] = f"{r.name} = {namer(expr)}"
            continue
        vr = env.var_to_range.get(r.symbol, r.declared)
        if r.hint is not None:
            continue
        lo = max(vr.lower, r.declared.lower)
        hi = min(vr.upper, r.declared.upper)
        slocs = env.var_to_range_sloc.get(r.symbol)
        if lo != r.declared.lower and lo <= 2 and slocs is not None and _in_framework(slocs.lower):
            # A layout decision inside torch (memory format, kernel choice) assumed the size is
            # not 0/1; the recorded operators are the same for those sizes, so, as torch.export
            # does, this assumption does not narrow the declared range.
            log.debug("graphcap: ignoring the framework's 0/1 assumption on %s%s", r.name, _where(slocs.lower))
            lo = r.declared.lower
        if (lo, hi) != (r.declared.lower, r.declared.upper):
            covered.add(r.symbol)
            sloc = None
            if slocs is not None:
                sloc = slocs.lower if lo != r.declared.lower else slocs.upper
            problems.append(
                f"Not all values of {r.name} ({r.uses[0].path}) in the specified range "
                f"{_range_words(r.name, r.declared)} satisfy the generated guard "
                f"{_range_words(r.name, ValueRanges(lo, hi))}: the program needs "
                f"{_range_words(r.name, ValueRanges(lo, hi))}{_where(sloc)}.")
            fixes[r.name] = _dim_fix(r.name, _bound(lo), _bound(hi))

    # other guards: relations that are not a replacement or a range of one symbol
    ranges = {r.symbol: r.declared for r in declared}
    for r in inputs.roots:
        if r.hint is not None:
            ranges[r.symbol] = env.var_to_range.get(r.symbol, r.declared)
    reported: set[Any] = set()
    for guard in env.guards[inputs.first_program_guard:]:  # not the ones fakifying the inputs raised
        g = env.simplify(guard.expr)
        syms = g.free_symbols
        if g in reported or not syms or not any(s in by_sym and by_sym[s].hint is None for s in syms):
            continue
        modulus = _divisor(g)
        if modulus is not None and by_sym[modulus[0]].hint is None:  # e.g. a reshape to (-1, 3)
            reported.add(g)
            r, c = by_sym[modulus[0]], modulus[1]
            if prefer_deferred_asserts:
                _defer(env, g, f"the program needs {namer(g)}{_where(guard.sloc)}")
                continue
            problems.append(f"Not all values of {r.name} = {r.uses[0].source} in the specified range "
                            f"{_range_words(r.name, r.declared)} satisfy the generated guard {namer(g)}"
                            f"{_where(guard.sloc)}.")
            fixes.update(_new_root_fixes(r, c, env.var_to_range.get(r.symbol, r.declared), fixes))
            covered.add(r.symbol)
            continue
        if syms <= covered or any(s not in ranges for s in syms):
            continue
        if len(syms) == 1:
            (sym,) = syms
            if _implied(g, {sym: env.var_to_range.get(sym, ranges[sym])}):
                continue  # a range guard: the range check above saw it
            bound = dyn_hints.bound_of(g, sym)
            r = by_sym[sym]
            if bound is not None and r.hint is None:  # e.g. Min(3, d) == 3 from a slice: d >= 3
                reported.add(g)
                covered.add(sym)
                need = r.declared & bound if _meets(r.declared, bound) else bound
                problems.append(f"Not all values of {r.name} ({r.uses[0].path}) in the specified range "
                                f"{_range_words(r.name, r.declared)} satisfy the generated guard {namer(g)}: "
                                f"the program needs "
                                f"{_range_words(r.name, need)}{_where(guard.sloc)}.")
                fixes[r.name] = _dim_fix(r.name, _bound(need.lower), _bound(need.upper))
                continue
            value = _only_solution(g, sym)
            if value is not None and by_sym[sym].hint is None:  # e.g. 2*(d - 6) == d from a reshape
                reported.add(g)
                covered.add(sym)
                problems.append(_specialization(by_sym[sym], value, namer(g), _where(guard.sloc)))
                fixes[by_sym[sym].name] = f"{by_sym[sym].name} = {value}"
                continue
        if _implied(g, ranges):
            continue
        reported.add(g)
        tied = _tie_at_example(g, env.var_to_val) if isinstance(g, sympy.Eq) else None
        if tied is not None and all(by_sym[t].hint is None for t in syms):  # x + y[4:]: dy0 = dx0 + 4
            target, expr = tied
            problems.append(f"The program needs {namer(target)} = {namer(expr)} for sizes on the example's "
                            f"side of {namer(g)}{_where(guard.sloc)}, but the spec declares them as "
                            f"independent dims.")
            fixes[by_sym[target].name] = f"{by_sym[target].name} = {namer(expr)}"
            continue
        framework_relation = _in_framework(guard.sloc) and not isinstance(dyn_hints.without_min_max(g), sympy.Eq)
        if prefer_deferred_asserts or framework_relation:
            # prefer_deferred_runtime_asserts_over_guards=True, or a relation an operator needs of
            # its input sizes (a slice assigned from another input): asserted and checked before
            # computing, as torch.export accepts it
            _defer(env, g, f"the program needs {namer(g)}{_where(guard.sloc)}")
            continue
        problems.append(f"The program needs {namer(g)}{_where(guard.sloc)}, which the spec does not guarantee.")

    if problems:
        names = sorted({*fixes} or {r.name for r in declared} or {r.name for r in inputs.roots})
        listing = "\n".join(f"  - {p}" for p in problems)
        suggested = ("\nSuggested fixes:\n" + "\n".join(f"  {f}" for f in fixes.values())) if fixes else ""
        raise ConstraintViolationError(
            f"Constraints violated ({', '.join(names)})! The program does not work for every size the "
            f"dynamic_shapes spec allows:\n{listing}",
            where="export(..., dynamic_shapes=...)",
            fix="Change the spec as suggested (graphcap.refine_dynamic_shapes_from_suggested_fixes(str(e), "
                "dynamic_shapes) does it for you), or change the code at the line shown, or use Dim.AUTO to "
                "let graphcap find the ranges." + suggested)


# ---------------------------------------------------------------------------
# range constraints and runtime asserts
# ---------------------------------------------------------------------------

def _sizes(val: Any) -> list[Any]:
    if isinstance(val, torch.Tensor):
        return list(val.shape)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return [val]
    return []


def range_constraints(gm: torch.fx.GraphModule, mode: Any, inputs: Optional[SymbolicInputs]) -> dict[Any, ValueRanges]:
    """A range for every symbol (and derived size expression of an input) in the graph."""
    env = mode.shape_env
    out: dict[Any, ValueRanges] = {}

    def symbol_range(sym: Any) -> ValueRanges:
        vr = env.var_to_range.get(sym, ValueRanges(-int_oo, int_oo))
        root = inputs.by_symbol().get(sym) if inputs is not None else None
        if root is not None and root.hint is None:  # the check passed: the declared range holds
            vr = root.declared
        return vr

    def add(expr: Any) -> None:
        expr = env.replace(expr)
        if expr.is_number or expr in out:
            return
        if isinstance(expr, sympy.Symbol):
            out[expr] = symbol_range(expr)
            return
        # a derived size first, then its root, as torch.export lists them
        out[expr] = bound_sympy(expr, {s: symbol_range(s) for s in expr.free_symbols})
        for s in sorted(expr.free_symbols, key=str):
            add(s)

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            for s in _sizes(node.meta.get("val")):
                if isinstance(s, torch.SymInt):
                    add(s.node.expr)
    if inputs is not None:
        for r in inputs.roots:
            add(r.symbol)
    for node in gm.graph.nodes:
        for s in _sizes(node.meta.get("val")):
            if isinstance(s, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                for sym in env.replace(s.node.expr).free_symbols:
                    add(sym)
    return out


def _implied(guard: Any, ranges: dict) -> bool:
    try:
        implied = bound_sympy(guard, ranges)
    except Exception:  # noqa: BLE001 (an expression the range analysis cannot bound)
        return False
    return bool(implied.lower and implied.upper)


def defer_relations(mode: Any, inputs: SymbolicInputs) -> None:
    """Turn relations between ``Dim.AUTO`` dims that ranges cannot hold into runtime asserts.

    ``if x.shape[0] <= y.shape[0]:`` with both dims automatic specializes the
    program to one side of the comparison; nothing about either dim alone says
    so. The relation is asserted in the graph (``aten._assert_scalar`` over the
    input sizes), which ``module()`` checks with the inputs, before computing.
    (Declared Dims: ``check_guards`` reports such a relation, except a size
    that equals a non-linear expression of other Dims, which is kept.)
    """
    from torch.fx.experimental.symbolic_shapes import RuntimeAssert
    from torch.utils._traceback import CapturedTraceback
    env = mode.shape_env
    by_sym = inputs.by_symbol()
    ranges = {s: env.var_to_range.get(s, r.declared) for s, r in by_sym.items()}
    seen = set()
    for guard in env.guards:
        g = env.simplify(guard.expr)
        syms = g.free_symbols
        if len(syms) < 2 or not syms <= set(by_sym) or any(by_sym[s].hint is None for s in syms):
            continue  # one dim (a range) or a declared Dim (check_guards decides)
        if g in seen or _implied(g, ranges):
            continue
        seen.add(g)
        message = f"the program needs {_Namer(inputs.roots)(g)}{_where(guard.sloc)}"
        env.deferred_runtime_asserts.setdefault(None, []).append(
            RuntimeAssert(g, message, CapturedTraceback.extract(skip=1)))
        env.num_deferred_runtime_asserts += 1


def finish(gm: torch.fx.GraphModule, mode: Any, inputs: Optional[SymbolicInputs], name: str,
           prefer_deferred_asserts: bool = False) -> dict[Any, ValueRanges]:
    """The pipeline's guards step: check, insert runtime asserts, return range_constraints."""
    env = mode.shape_env
    if inputs is not None:
        check_guards(mode, inputs, prefer_deferred_asserts)
        dyn_hints.apply_bounds(env, inputs)
        defer_relations(mode, inputs)
    if env is None:
        return {}
    has_symbols = inputs is not None and inputs.roots
    if has_symbols or env.deferred_runtime_asserts or env.unbacked_symfloat_counter or env.unbacked_symint_counter:
        from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts
        insert_deferred_runtime_asserts(gm, env, f"exported program: {name}", export=True)
        gm.recompile()
    return range_constraints(gm, mode, inputs)


# ---------------------------------------------------------------------------
# suggested fixes → spec
# ---------------------------------------------------------------------------

_FIX_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*=\s*(.+?)\s*$")
_DIM_CALL = re.compile(r"^Dim\(\s*['\"]([A-Za-z_][A-Za-z_0-9]*)['\"]\s*((?:,\s*(?:min|max)\s*=\s*-?\d+\s*)*)\)$")
_AFFINE = re.compile(r"^(?:(\d+)\s*\*\s*)?([A-Za-z_][A-Za-z_0-9]*)(?:\s*([+-])\s*(\d+))?$")


def parse_suggested_fixes(msg: str) -> dict[str, Any]:
    """The ``name = ...`` lines under ``Suggested fixes:``; stops at the first other line."""
    lines = msg.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Suggested fixes:")
    except StopIteration:
        raise ExportInputError("The message has no 'Suggested fixes:' section.",
                               fix="Pass the text of a ConstraintViolationError raised by graphcap.export.") from None
    fixes: dict[str, str] = {}
    for line in lines[start + 1:]:
        m = _FIX_LINE.match(line)
        if not line.startswith("  ") or m is None:
            break
        fixes[m.group(1)] = m.group(2)
    return fixes


def refine_dynamic_shapes_from_suggested_fixes(msg: Any, dynamic_shapes: Any) -> Any:
    """Apply the ``Suggested fixes:`` of a constraint-violation message to a spec.

    ``x = Dim('x', min=5, max=16)`` gives ``x`` a new range, ``x = 8`` makes it
    static, ``y = x`` makes ``y`` the same Dim as ``x``, ``y = 2*x + 1`` makes it
    derived from ``x``. Works on graphcap's and torch.export's Dim objects; the
    result uses graphcap's.
    """
    fixes = parse_suggested_fixes(str(msg))
    roots: dict[str, Dim] = {}

    def collect(d: Any) -> None:
        d = as_dim(d)
        if isinstance(d, DerivedDim):
            roots.setdefault(d.root.__name__, d.root)
        elif isinstance(d, Dim):
            roots.setdefault(d.__name__, d)

    def is_leaf(x: Any) -> bool:
        return not isinstance(x, (dict, list, tuple)) or x is None

    pytree.tree_map(lambda x: collect(x) if x is not None else None, dynamic_shapes, is_leaf=is_leaf)

    new: dict[str, Any] = {}

    def resolve(name: str) -> Any:
        if name in new:
            return new[name]
        text = fixes.get(name)
        if text is None:
            new[name] = roots.get(name)
            return new[name]
        if re.fullmatch(r"-?\d+", text):
            new[name] = int(text)
        elif (m := _DIM_CALL.match(text)) is not None:
            bounds = dict(re.findall(r"(min|max)\s*=\s*(-?\d+)", m.group(2)))
            new[name] = Dim(m.group(1), min=int(bounds["min"]) if "min" in bounds else None,
                            max=int(bounds["max"]) if "max" in bounds else None)
        elif (m := _AFFINE.match(text)) is not None:
            factor, other, sign, offset = m.groups()
            base = resolve(other) if other in fixes else roots.get(other)
            if base is None:
                base = Dim(other)
                roots[other] = base
            if isinstance(base, int):
                value = base * int(factor or 1) + (int(offset or 0) * (-1 if sign == "-" else 1))
                new[name] = value
            else:
                out = base
                if factor:
                    out = out * int(factor)
                if offset:
                    out = out + int(offset) if sign == "+" else out - int(offset)
                new[name] = out
        else:
            raise ExportInputError(f"Cannot read the suggested fix {name} = {text}.",
                                   fix="Apply this fix to the spec by hand.")
        return new[name]

    for name in fixes:
        resolve(name)

    def replace(x: Any) -> Any:
        d = as_dim(x)
        if isinstance(d, DerivedDim) and d.root.__name__ in new:
            root = new[d.root.__name__]
            if isinstance(root, int):
                return int(d.fn(root))
            return DerivedDim(root.root if isinstance(root, DerivedDim) else root,
                              (lambda f, g: (lambda r: f(g(r))))(d.fn, root.fn) if isinstance(root, DerivedDim)
                              else d.fn, d.__name__.replace(d.root.__name__, root.__name__)
                              if not isinstance(root, DerivedDim) else d.__name__)
        if isinstance(d, Dim) and not isinstance(d, DerivedDim) and d.__name__ in new:
            return new[d.__name__]
        return x

    return pytree.tree_map(replace, dynamic_shapes, is_leaf=is_leaf)


# ---------------------------------------------------------------------------
# data-dependent guards
# ---------------------------------------------------------------------------

_DD_EXPR = re.compile(r"data-dependent expression (.+?) \(unhinted")


def explain_data_dependent(e: Exception, program_name: str, where: Optional[str]) -> UnsupportedError:
    """The error for a branch on a value read from tensor data that tracing cannot decide.

    Names the condition (over the unbacked symbols ``u0``, ... that stand
    for the values read with ``.item()``, ``nonzero()``, ``tolist()``) and the
    two ways out: assert it with ``torch._check`` if it always holds, or keep
    both branches with ``torch.cond``.
    """
    m = _DD_EXPR.search(str(e))
    cond = m.group(1) if m else None
    what = (f"While tracing {program_name}, the program needs to know whether {cond} to go on, where "
            f"u0, u1, ... are values read from tensor data (.item(), .tolist(), nonzero(), sizes made "
            f"from data); export records shapes, not data, so it cannot decide this."
            if cond else
            f"While tracing {program_name}, the program branched on a value read from tensor data "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}).")
    check = f"torch._check({cond})" if cond else "torch._check(<condition>)"
    return UnsupportedError(
        what, where=where,
        fix=f"If the condition always holds for your data, state it before this line with {check} "
            f"(it becomes a runtime assert in the program); for a value used as a size, "
            f"torch._check_is_size(v) or torch._check(v >= 0). If both outcomes can happen, write the "
            f"branch with torch.cond(pred, true_fn, false_fn, operands) or torch.where.")
