"""Inputs a program must refuse before computing, one way of being wrong each.

Built from the example sizes with one change: a size just below or above a
range's end, a dimension that shares its symbol with another given a different
size, a derived size of a form the expression cannot take (odd for ``2*s``), a
static dimension off by one, another dtype, another rank, another Python value
where one was baked in, one positional argument too many or too few. The
tensors are zero-stride views of one element: their sizes are what is checked,
so even a size past a range's end costs no memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import sympy
import torch

from .generate import as_call, make_inputs
from .signature_inputs import ConstantInput, IntInput, ProgramInputs, TensorInput, evaluate


@dataclass
class RefusalCase:
    label: str  # what is wrong with the input, in words
    build: Callable[[], tuple[tuple, dict]]
    # refused by a runtime assert in the graph (a value read from data, out of its checked range)
    # rather than by the input checks
    by_runtime_assert: bool = False


def _shaped_like(inputs: ProgramInputs, bindings: dict, changes: dict[tuple[int, int], int]) -> list[Any]:
    """The leaves at ``bindings`` as cheap expanded tensors, with (leaf, dim) -> size overrides."""
    subs = {s: sympy.Integer(v) for s, v in bindings.items()}
    leaves = []
    for i, (leaf, shape) in enumerate(zip(inputs.leaves, inputs.shapes(bindings))):
        if isinstance(leaf, TensorInput):
            shape = [changes.get((i, d), size) for d, size in enumerate(shape)]
            leaves.append(torch.zeros((), dtype=leaf.dtype, device=leaf.device).expand(shape))
        elif isinstance(leaf, IntInput):
            leaves.append(changes.get((i, -1), evaluate(leaf.expr, subs)))
        else:
            leaves.append(leaf.value)
    return leaves


def _at(inputs: ProgramInputs, bindings: dict, changes: Optional[dict] = None) -> Callable:
    return lambda: as_call(inputs, _shaped_like(inputs, bindings, changes or {}))


def refusal_cases(inputs: ProgramInputs, base: dict[Any, int]) -> list[RefusalCase]:
    """The wrong inputs to try, around the sizes ``base`` (a binding the program accepts)."""
    cases: list[RefusalCase] = []
    cases += _range_cases(inputs, base)
    cases += _relation_cases(inputs, base)
    cases += _asserted_relation_cases(inputs, base)
    cases += _static_dim_case(inputs, base)
    cases += _dtype_and_rank_cases(inputs, base)
    cases += _value_cases(inputs, base)
    cases += _read_value_cases(inputs, base)
    cases += _structure_cases(inputs, base)
    return cases


def _range_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    out = []
    ints = inputs.int_symbols()  # an int input below its range is a value to refuse, even below 0
    for sym, rng in inputs.symbols.items():
        if rng.lower >= 1 or sym in ints:
            out.append(RefusalCase(f"{inputs.symbol_label(sym)} = {rng.lower - 1}, "
                                   f"below its range [{rng.lower}, {_upper(rng)}]",
                                   _at(inputs, {**base, sym: rng.lower - 1})))
        if rng.upper is not None:
            out.append(RefusalCase(f"{inputs.symbol_label(sym)} = {rng.upper + 1}, "
                                   f"above its range [{rng.lower}, {rng.upper}]",
                                   _at(inputs, {**base, sym: rng.upper + 1})))
    return out


def _upper(rng) -> str:
    return "inf" if rng.upper is None else str(rng.upper)


def _relation_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    """A symbol shared by two dimensions given two sizes; a derived size off its form."""
    out, seen_symbol, seen_derived = [], {}, set()
    subs = {s: sympy.Integer(v) for s, v in base.items()}
    for i, leaf in enumerate(inputs.leaves):
        if not isinstance(leaf, TensorInput):
            continue
        for d, expr in enumerate(leaf.dims):
            if isinstance(expr, sympy.Symbol):
                if expr in seen_symbol and (expr, "equal") not in seen_derived:
                    seen_derived.add((expr, "equal"))
                    other = base[expr] + 1
                    out.append(RefusalCase(f"{leaf.name}.shape[{d}] = {other} while {seen_symbol[expr]} = "
                                           f"{base[expr]} (both are {expr})",
                                           _at(inputs, base, {(i, d): other})))
                seen_symbol.setdefault(expr, f"{leaf.name}.shape[{d}]")
            elif not isinstance(expr, int) and expr not in seen_derived:
                seen_derived.add(expr)
                size = evaluate(expr, subs)
                root = sorted(expr.free_symbols, key=str)[0]
                if size is not None and abs(expr.coeff(root)) > 1:
                    out.append(RefusalCase(f"{leaf.name}.shape[{d}] = {size + 1}, not of the form {expr}",
                                           _at(inputs, base, {(i, d): size + 1})))
    return out


def _asserted_relation_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    """Sizes inside every range that break a relation the program asserts (``b % 2 == 0``):
    the nearest such size above (or below) the example's, one case per relation."""
    out, seen = [], set()
    subs = {s: sympy.Integer(v) for s, v in base.items()}
    for relation in inputs.relations:
        if any(relation.xreplace({**subs, sym: sympy.Integer(v)}) is sympy.false for sym, v in seen):
            continue  # an earlier case already breaks this relation
        for sym in sorted(relation.free_symbols, key=str):
            rng = inputs.symbols.get(sym)
            if rng is None:
                continue
            for step in (1, -1, 2, -2, 3, -3):
                value = base[sym] + step
                if value < rng.lower or (rng.upper is not None and value > rng.upper):
                    continue
                if relation.xreplace({**subs, sym: sympy.Integer(value)}) is sympy.false:
                    seen.add((sym, value))
                    out.append(RefusalCase(f"{inputs.symbol_label(sym)} = {value}, breaking the asserted "
                                           f"{relation}", _at(inputs, {**base, sym: value})))
                    break
            else:
                continue
            break
    return out


def _static_dim_case(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    for i, leaf in enumerate(inputs.leaves):
        if isinstance(leaf, TensorInput):
            for d, expr in enumerate(leaf.dims):
                if isinstance(expr, int):
                    return [RefusalCase(f"{leaf.name}.shape[{d}] = {expr + 1}, static {expr} in the program",
                                        _at(inputs, base, {(i, d): expr + 1}))]
    return []


def _other_dtype(dtype: torch.dtype) -> torch.dtype:
    """A dtype the program must refuse in place of ``dtype`` (a narrower int for an int:
    a wider one may be accepted on purpose, see ``input_checks``)."""
    if dtype is torch.float32:
        return torch.float64
    if dtype.is_floating_point or dtype.is_complex or dtype is torch.bool:
        return torch.float32 if dtype is not torch.float32 else torch.float64
    return torch.int32 if dtype is torch.int64 else torch.float32


def _dtype_and_rank_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    for i, leaf in enumerate(inputs.leaves):
        if isinstance(leaf, TensorInput):
            def wrong_dtype(i=i, leaf=leaf):
                leaves = _shaped_like(inputs, base, {})
                leaves[i] = leaves[i].to(_other_dtype(leaf.dtype))
                return as_call(inputs, leaves)

            def extra_dim(i=i):
                leaves = _shaped_like(inputs, base, {})
                leaves[i] = leaves[i].unsqueeze(0)
                return as_call(inputs, leaves)
            return [RefusalCase(f"{leaf.name} of dtype {_other_dtype(leaf.dtype)} (the program takes {leaf.dtype})",
                                wrong_dtype),
                    RefusalCase(f"{leaf.name} with {len(leaf.dims) + 1} dimensions (the program takes "
                                f"{len(leaf.dims)})", extra_dim)]
    return []


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_other"
    return None


def _value_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    for i, leaf in enumerate(inputs.leaves):
        if isinstance(leaf, ConstantInput) and isinstance(leaf.value, (bool, int, float, str)):
            other = _changed(leaf.value)

            def wrong_value(i=i, other=other):
                leaves = _shaped_like(inputs, base, {})
                leaves[i] = other
                return as_call(inputs, leaves)
            return [RefusalCase(f"{leaf.name} = {other!r} (the program was specialized on {leaf.value!r})",
                                wrong_value)]
    return []


def _read_value_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    """A value the program reads from an input (``n.item()``) just outside the range it checks it
    to: the program's runtime assert must refuse it."""
    out = []
    for i, leaf in enumerate(inputs.leaves):
        if not isinstance(leaf, TensorInput) or leaf.value_range is None:
            continue
        lower, upper = leaf.value_range
        info = torch.iinfo(leaf.dtype)
        outside = [(lower - 1, f"below the range [{lower}, {_upper_text(upper)}] its value is checked to")]
        if upper is not None:
            outside.append((upper + 1, f"above the range [{lower}, {upper}] its value is checked to"))
        for value, why in outside:
            if info.min <= value <= info.max:
                out.append(RefusalCase(f"{leaf.name} holding {value}, {why}",
                                       (lambda v=value, k=i: make_inputs(inputs, base, 0, {k: v})), True))
    return out


def _upper_text(upper: Optional[int]) -> str:
    return "inf" if upper is None else str(upper)


def _structure_cases(inputs: ProgramInputs, base: dict) -> list[RefusalCase]:
    def one_more():
        args, kwargs = make_inputs(inputs, base, seed=0)
        return (*args, torch.zeros(1)), kwargs

    def one_fewer():
        args, kwargs = make_inputs(inputs, base, seed=0)
        return args[:-1], kwargs
    out = [RefusalCase("one positional argument too many", one_more)]
    if inputs.in_spec.num_leaves and _positional_count(inputs) > 0:
        out.append(RefusalCase("one positional argument too few", one_fewer))
    return out


def _positional_count(inputs: ProgramInputs) -> int:
    spec = inputs.in_spec
    if spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple:
        return spec.child(0).num_children
    return 0
