"""What a program's user inputs are, read from the program alone (no model needed).

``verify`` and ``graphcap run`` both generate inputs a program must accept.
They need, for every flat user input: its name, whether it is a tensor (dtype,
device, one size expression per dimension: an int or a sympy expression over
the program's symbols), a dynamic int (a symbol), or a Python value baked in at
export; for every symbol: its range and the size the example inputs gave it;
and the relations between input sizes the program asserts. This module reads
those from the placeholders, ``range_constraints``, the graph's
``_assert_scalar`` nodes and the (saved) example inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from .. import auto_flatten
from ..runtime.input_guards import forward_names, leaf_sources
from ..signature import InputKind, call_graph_of, call_spec_of
from ..torch_private.ops import schema_of
from ..torch_private.symbolic import int_oo


@dataclass
class TensorInput:
    name: str  # the forward's own name for the input: ``x``, ``ys[0]``, ``z['k']``
    dtype: torch.dtype
    device: torch.device
    dims: list[Any]  # int or sympy expression over the program's symbols
    example: Optional[torch.Tensor] = None
    index_bounds: list[Any] = field(default_factory=list)  # size expressions it indexes into
    # a one-element tensor whose value the program reads (``n.item()``): the range the program
    # checks that value to (``torch._check``), as (lower, upper or None); None when not read
    value_range: Optional[tuple[int, Optional[int]]] = None


@dataclass
class IntInput:
    """An int the dynamic_shapes spec made dynamic: a symbol with a range."""

    name: str
    expr: Any
    example: Optional[int] = None  # the example's value


@dataclass
class ConstantInput:
    """A Python value (or None) the program was specialized on."""

    name: str
    value: Any


@dataclass
class SymbolRange:
    lower: int
    upper: Optional[int]  # None: unbounded
    example: Optional[int]


class ProgramInputs:
    """The user inputs of one program, and the symbols their sizes are made of."""

    def __init__(self, ep, example_inputs: Optional[tuple] = None):
        self.in_spec = call_spec_of(ep)[0]
        if self.in_spec is None:
            raise ValueError("the program has no input structure (module_call_graph is empty)")
        root = call_graph_of(ep)[0].signature
        names = leaf_sources(self.in_spec, forward_names(getattr(root, "forward_arg_names", None), self.in_spec))
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        user_specs = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        example = example_inputs if example_inputs is not None else ep.example_inputs
        example_leaves = _example_leaves(example, self.in_spec, len(user_specs))
        self.leaves: list[Any] = []
        for i, (spec, name) in enumerate(zip(user_specs, names)):
            node = placeholders[spec.arg.name]
            val = node.meta.get("val")
            ex = example_leaves[i] if example_leaves is not None else None
            if isinstance(val, torch.Tensor):
                dims = [_expr(s) for s in val.shape]
                self.leaves.append(TensorInput(name, val.dtype, val.device, dims,
                                               ex if isinstance(ex, torch.Tensor) else None,
                                               _index_bounds(node), _read_value_range(node, ep.range_constraints)))
            elif isinstance(val, torch.SymInt) and not isinstance(_expr(val), int):
                self.leaves.append(IntInput(name, _expr(val), ex if isinstance(ex, int) and not isinstance(ex, bool)
                                            else None))
            elif isinstance(val, torch.SymInt):
                self.leaves.append(ConstantInput(name, _expr(val)))
            else:
                value = ex if example_leaves is not None else getattr(spec.arg, "value", val)
                self.leaves.append(ConstantInput(name, value))
        self.symbols = self._symbol_ranges(ep.range_constraints)
        self.expr_ranges = {e: _bounds(r) for e, r in ep.range_constraints.items() if not isinstance(e, sympy.Symbol)}
        self.relations = _input_relations(ep.graph, set(self.symbols))

    # -- symbols ---------------------------------------------------------------
    def _symbol_ranges(self, range_constraints: dict) -> dict[Any, SymbolRange]:
        """Every symbol an input size is made of, with its range and the example's value for it."""
        used: list[Any] = []
        for leaf in self.leaves:
            exprs = leaf.dims if isinstance(leaf, TensorInput) else [leaf.expr] if isinstance(leaf, IntInput) else []
            for e in exprs:
                if not isinstance(e, int):
                    used.extend(s for s in sorted(e.free_symbols, key=str) if s not in used)
        examples = self._example_values()
        out = {}
        ints = self.int_symbols()
        for sym in used:
            lower, upper = _bounds(range_constraints.get(sym), signed=sym in ints)
            # a size is never negative; an int input may be
            out[sym] = SymbolRange(lower if sym in ints else max(lower, 0), upper, examples.get(sym))
        return out

    def _example_values(self) -> dict[Any, int]:
        """The size each symbol had in the example inputs: read off a dimension that is the bare
        symbol, else solved from a derived one (``2*s`` of size 6 gives s = 3)."""
        values: dict[Any, int] = {}
        derived: list[tuple[Any, int]] = []
        for leaf in self.leaves:
            if isinstance(leaf, TensorInput) and leaf.example is not None and leaf.example.dim() == len(leaf.dims):
                pairs = zip(leaf.dims, leaf.example.shape)
            elif isinstance(leaf, IntInput) and isinstance(leaf.example, int):
                pairs = [(leaf.expr, leaf.example)]
            else:
                continue
            for expr, size in pairs:
                if isinstance(expr, sympy.Symbol):
                    values.setdefault(expr, int(size))
                elif not isinstance(expr, int):
                    derived.append((expr, int(size)))
        for expr, size in derived:
            free = [s for s in expr.free_symbols if s not in values]
            if len(free) == 1:
                solved = sympy.solve(sympy.Eq(expr.xreplace({k: sympy.Integer(v) for k, v in values.items()}), size),
                                     free[0])
                if len(solved) == 1 and solved[0].is_integer:
                    values[free[0]] = int(solved[0])
        return values

    def int_symbols(self) -> set:
        """The symbols that are int inputs themselves (not sizes): their values may be negative."""
        sized = {s for leaf in self.leaves if isinstance(leaf, TensorInput)
                 for e in leaf.dims if not isinstance(e, int) for s in e.free_symbols}
        return {leaf.expr for leaf in self.leaves
                if isinstance(leaf, IntInput) and isinstance(leaf.expr, sympy.Symbol)} - sized

    def symbol_label(self, sym: Any) -> str:
        """A symbol as the user knows it: the first input dimension that is exactly it
        (``input_ids.shape[1]``), else its name."""
        for leaf in self.leaves:
            if isinstance(leaf, TensorInput):
                for d, e in enumerate(leaf.dims):
                    if e == sym:
                        return f"{leaf.name}.shape[{d}]"
            elif isinstance(leaf, IntInput) and leaf.expr == sym:
                return leaf.name
        return str(sym)

    def admits(self, bindings: dict[Any, int]) -> bool:
        """Every size is >= 0 and inside its range, every asserted relation holds."""
        subs = {s: sympy.Integer(v) for s, v in bindings.items()}
        for sym, rng in self.symbols.items():
            v = bindings[sym]
            if v < rng.lower or (rng.upper is not None and v > rng.upper):
                return False
        for leaf in self.leaves:
            exprs = leaf.dims if isinstance(leaf, TensorInput) else [leaf.expr] if isinstance(leaf, IntInput) else []
            for e in exprs:
                if not isinstance(e, int):
                    size = evaluate(e, subs)
                    lo, hi = self.expr_ranges.get(e, (0, None))
                    if size is None or size < max(lo, 0) or (hi is not None and size > hi):
                        return False
        for relation in self.relations:
            if relation.xreplace(subs) is sympy.false:
                return False
        return True

    def shapes(self, bindings: dict[Any, int]) -> list[Optional[list[int]]]:
        """The concrete shape of every tensor input (None for other inputs) under ``bindings``."""
        subs = {s: sympy.Integer(v) for s, v in bindings.items()}
        return [[d if isinstance(d, int) else evaluate(d, subs) for d in leaf.dims]
                if isinstance(leaf, TensorInput) else None for leaf in self.leaves]


def evaluate(expr: Any, subs: dict) -> Optional[int]:
    if isinstance(expr, int):
        return expr
    value = expr.xreplace(subs)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _expr(size: Any) -> Any:
    if isinstance(size, torch.SymInt):
        e = size.node.expr
        return int(e) if e.is_number else e
    return int(size)


def is_finite(bound: Any) -> bool:
    return bound is not None and bound not in (int_oo, -int_oo) and bool(getattr(bound, "is_finite", True)) \
        and bool(getattr(bound, "is_number", True))


def _bounds(rng: Any, signed: bool = False) -> tuple[int, Optional[int]]:
    """A range's ends as ints; an unbounded lower end reads as 0 (a size), or -8 for an int input
    (probed just below 0, as upper ends are probed just past the example)."""
    if rng is None:
        return 0, None
    lower = int(rng.lower) if is_finite(rng.lower) else (-8 if signed else 0)
    upper = int(rng.upper) if is_finite(rng.upper) else None
    return lower, upper


def _example_leaves(example: Any, in_spec: Any, count: int) -> Optional[list[Any]]:
    if example is None:
        return None
    try:
        args, kwargs = example
        leaves = auto_flatten.flatten_by_spec((tuple(args), dict(kwargs or {})), in_spec)
    except Exception:  # another structure: the example cannot inform the values
        return None
    return leaves if len(leaves) == count else None


_READS = ("aten::item", "aten::_local_scalar_dense")


def _read_value_range(placeholder: torch.fx.Node, range_constraints: dict) -> Optional[tuple[int, Optional[int]]]:
    """The range of the value the program reads from this (one-element, integer) input with
    ``.item()``: the unbacked symbol's range. Only direct reads are followed."""
    val = placeholder.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dtype.is_complex \
            or val.dtype is torch.bool:
        return None
    for user in placeholder.users:
        if user.op != "call_function" or getattr(schema_of(user.target), "name", None) not in _READS:
            continue
        for sym in (user.meta.get("unbacked_bindings") or {}):
            rng = range_constraints.get(sym)
            if rng is None:
                return None
            lower = int(rng.lower) if is_finite(rng.lower) else None
            upper = int(rng.upper) if is_finite(rng.upper) else None
            if lower is None:  # unbounded below: probe around the example, as sizes are
                lower = -8 if upper is None else upper - 8
            return lower, upper
    return None


# operator -> (position of the tensor indexed, position of the dim or None for 0, position of the indices)
_INDEXING = {
    "aten::embedding": (0, None, 1),
    "aten::index_select": (0, 1, 2),
    "aten::gather": (0, 1, 2),
}


def _index_bounds(placeholder: torch.fx.Node) -> list[Any]:
    """The sizes an integer input is used to index into (an embedding's rows, a gathered dim):
    its generated values must stay below each. Only direct uses are followed."""
    bounds = []
    for user in placeholder.users:
        if user.op != "call_function":
            continue
        name = getattr(schema_of(user.target), "name", None)
        if name in _INDEXING:
            src_pos, dim_pos, idx_pos = _INDEXING[name]
            if len(user.args) > idx_pos and user.args[idx_pos] is placeholder:
                src = user.args[src_pos]
                dim = user.args[dim_pos] if dim_pos is not None else 0
                bounds.append(_size_of(src, dim))
        elif name == "aten::index" and len(user.args) > 1:
            for pos, idx in enumerate(user.args[1]):
                if idx is placeholder:
                    bounds.append(_size_of(user.args[0], pos))
    return [b for b in bounds if b is not None]


def _size_of(node: Any, dim: Any) -> Any:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(dim, int) or not -val.dim() <= dim < val.dim():
        return None
    return _expr(val.shape[dim])


def _input_relations(graph: torch.fx.Graph, symbols: set) -> list[Any]:
    """The relations over input sizes the program asserts at run time (``_assert_scalar``)."""
    out = []
    for node in graph.nodes:
        if node.op == "call_function" and getattr(schema_of(node.target), "name", "") \
                == "aten::_assert_scalar" and isinstance(node.args[0], torch.fx.Node):
            expr = getattr(getattr(node.args[0].meta.get("val"), "node", None), "expr", None)
            if expr is not None and expr.free_symbols and expr.free_symbols <= symbols:
                out.append(expr)
    return out
