"""torch's sympy layer (``torch.utils._sympy``): infinity, value ranges, printing.

graphcap's symbolic shapes are torch's ShapeEnv expressions, so it reads and
writes them with torch's own sympy helpers: the integer infinity ``int_oo``
that ShapeEnv uses for unbounded ranges, ``ValueRanges`` and ``bound_sympy``
for the range of an expression, torch's integer functions (``FloorDiv``,
``PythonMod``) when rebuilding saved expressions, its Python printer for
guard text, and its solver (a branch's condition read as a bound on one symbol). All live in a
private package; they are re-exported unchanged.
"""
from __future__ import annotations

from torch.utils._sympy import functions as _functions
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRangeError, ValueRanges, bound_sympy

# torch's integer sympy functions, as a namespace (the serializer looks them up by name).
functions = _functions

RELIES_ON = {
    "torch.utils._sympy.numbers.int_oo": None,
    "torch.utils._sympy.value_ranges.ValueRanges": None,
    "torch.utils._sympy.value_ranges.ValueRangeError": None,
    "torch.utils._sympy.value_ranges.bound_sympy": ("expr", "ranges"),
    "torch.utils._sympy.functions": None,
    "torch.utils._sympy.functions.FloorDiv": None,
    "torch.utils._sympy.functions.PythonMod": None,
    "torch.utils._sympy.printers.PythonPrinter": None,
    "torch.utils._sympy.solve.try_solve": ("expr", "thing"),
    "sympy.Symbol#_assumptions_orig": None,
}


def _sample_symbol():
    import sympy
    return sympy.Symbol("s", integer=True)


SAMPLES = {"sympy.Symbol": _sample_symbol}

__all__ = ["int_oo", "ValueRanges", "ValueRangeError", "bound_sympy", "functions", "python_source",
           "symbol_assumptions", "solve_relation"]


def python_source(expr) -> str:
    """``expr`` as Python source, the way torch prints guards (``x.size()[0]``-free, ``//`` for FloorDiv).

    Relies on ``torch.utils._sympy.printers.PythonPrinter().doprint(expr)``.
    """
    from torch.utils._sympy.printers import PythonPrinter
    return PythonPrinter().doprint(expr)


def symbol_assumptions(symbol) -> dict | None:
    """The assumptions a sympy Symbol was created with (``integer=True``, ``positive=True``...), or None.

    Not torch's: relies on sympy's field ``Symbol._assumptions_orig`` (sympy has no
    public accessor for the creation-time assumptions; ``assumptions0`` adds derived ones).
    """
    return getattr(symbol, "_assumptions_orig", None)


def solve_relation(relation, symbol):
    """``relation`` rewritten with ``symbol`` alone on the left, or None
    (``torch.utils._sympy.solve.try_solve(expr, thing)``, which returns (relation, right side))."""
    from torch.utils._sympy.solve import try_solve
    return try_solve(relation, symbol)
