"""``range_constraints`` of the program, and relations of ``Dim.AUTO`` dims as runtime asserts."""
from __future__ import annotations

from typing import Any, Optional

import sympy
import torch

from ..torch_private.naming_and_shapes import raised_by_copy_overlap_check
from ..torch_private.shapes import count_deferred_assert, deferred_asserts, guards, symbol_ranges
from ..torch_private.symbolic import ValueRanges, bound_sympy, int_oo
from .guard_words import DimNamer, implied_by, where_text
from .symbols import SymbolicInputs


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
        vr = symbol_ranges(env).get(sym, ValueRanges(-int_oo, int_oo))
        root = inputs.by_symbol().get(sym) if inputs is not None else None
        if root is not None and root.hint is None:  # the check passed: the declared range holds
            vr = inputs.narrowed_by_hints.get(sym, root.declared)
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

    from ..torch_private.shapes import CapturedTraceback
    env = mode.shape_env
    by_sym = inputs.by_symbol()
    ranges = {s: symbol_ranges(env).get(s, r.declared) for s, r in by_sym.items()}
    seen = set()
    for guard in guards(env):
        if raised_by_copy_overlap_check(getattr(guard.sloc, "framework_loc", None)):
            continue  # copy_'s own self-overlap check (see there)
        g = env.simplify(guard.expr)
        syms = g.free_symbols
        if len(syms) < 2 or not syms <= set(by_sym) or any(by_sym[s].hint is None for s in syms):
            continue  # one dim (a range) or a declared Dim (check_guards decides)
        if g in seen or implied_by(g, ranges):
            continue
        seen.add(g)
        message = f"the program needs {DimNamer(inputs.roots)(g)}{where_text(guard.sloc)}"
        deferred_asserts(env).setdefault(None, []).append(
            RuntimeAssert(g, message, CapturedTraceback.extract(skip=1)))
        count_deferred_assert(env)
