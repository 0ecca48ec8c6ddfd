"""Input sets a program must accept: sizes across its dynamic ranges, values per dtype.

Shared by :func:`graphcap.verify` and ``graphcap run``. Sizes come first, as a
binding of every symbol (:func:`size_plans`): the example's sizes, every range's
ends, 0 and 1 where a range allows them, then random sizes; each binding is
kept only if every derived size is inside its range and every relation the
program asserts holds, so equal dims stay equal and ``2*s`` stays even. Values
come second (:func:`make_inputs`), per dtype:

- floats: uniform between the example's smallest and largest value (so an input
  that is never negative stays so), standard normal without an example;
- integers: drawn from the example's own values (ids stay valid ids, class labels
  stay labels), kept below every size the input indexes into in the graph
  (an embedding's rows, a gathered dimension); ``[0, 8)`` without an example;
- bools: random masks, half true;
- a one-element integer input whose value the program reads (``n.item()``,
  checked with ``torch._check`` to a range): the range's ends and middle as
  edge cases, random values across the range otherwise (the refusal checks
  try just outside it).

An unbounded range is probed up to twice its example size (at least 8): a
program is checked where it will run, not at sizes no machine holds.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from .. import auto_flatten
from .signature_inputs import ConstantInput, IntInput, ProgramInputs, TensorInput, evaluate

DEFAULT_MAX_ELEMENTS = 1 << 24  # per input set; larger sets are skipped, and say so


@dataclass
class SizePlan:
    label: str  # why these sizes: "example", "lower end", "s0 = 0", "random"
    bindings: dict[Any, int]
    # leaf index -> the value of a one-element input the program reads with .item() (its range's
    # ends and middle); leaves not listed draw their value across that range (or from the example)
    values: dict[int, int] = field(default_factory=dict)


def probe_upper(rng) -> int:
    """The largest size tried for a symbol: its upper end, or twice its example size when unbounded."""
    if rng.upper is not None:
        return rng.upper
    return max(rng.lower + 1, 2 * (rng.example or 0), 8)


def _example_binding(inputs: ProgramInputs) -> dict[Any, int]:
    out = {}
    for sym, rng in inputs.symbols.items():
        ex = rng.example
        if ex is None or ex < rng.lower or (rng.upper is not None and ex > rng.upper):
            ex = min(max(rng.lower, 2), probe_upper(rng))
        out[sym] = ex
    return out


def size_plans(inputs: ProgramInputs, samples: int, seed: int = 0) -> list[SizePlan]:
    """The size bindings to try, edge cases first, then ``samples`` random ones.

    Edge bindings that coincide are tried once; random ones are kept even when
    their sizes repeat (their values differ). A binding the program cannot take
    (a derived size out of range, an asserted relation broken) is dropped; a
    random one is redrawn up to 50 times.
    """
    base = _example_binding(inputs)
    syms = list(inputs.symbols)
    example_values = {i: v for i, leaf in enumerate(inputs.leaves)
                      if isinstance(leaf, TensorInput) and leaf.value_range is not None
                      and (v := _example_value(leaf)) is not None}
    edges: list[SizePlan] = [SizePlan("example sizes" if syms else "static sizes", base, example_values)]
    if syms:
        edges.append(SizePlan("lower ends", {s: inputs.symbols[s].lower for s in syms}))
        edges.append(SizePlan("upper ends", {s: probe_upper(inputs.symbols[s]) for s in syms}))
        for s in syms:
            rng = inputs.symbols[s]
            for value, why in ((rng.lower, "lower end"), (probe_upper(rng), "upper end"), (0, "0"), (1, "1")):
                name = inputs.symbol_label(s)
                edges.append(SizePlan(f"{name} = {value} ({why})" if why[0] not in "01" else f"{name} = {value}",
                                      {**base, s: value}))
    edges += _value_plans(inputs, base)
    plans, seen = [], set()
    for plan in edges:
        key = (tuple(sorted((str(k), v) for k, v in plan.bindings.items())), tuple(sorted(plan.values.items())))
        if key in seen or not inputs.admits(plan.bindings):
            continue
        seen.add(key)
        plans.append(plan)
    rand = random.Random(seed)
    for i in range(samples):
        for _ in range(50):
            binding = {s: rand.randint(inputs.symbols[s].lower, probe_upper(inputs.symbols[s])) for s in syms}
            if inputs.admits(binding):
                plans.append(SizePlan(f"random #{i + 1}", binding))
                break
    return plans


def probe_value_upper(value_range: tuple[int, Optional[int]], example: Optional[int]) -> int:
    """The largest value tried for a value read from data: its range's upper end, or past the
    example (at least 8 above the lower end) when unbounded."""
    lower, upper = value_range
    if upper is not None:
        return upper
    return max(lower + 8, 2 * (example or 0))


def _example_value(leaf: TensorInput) -> Optional[int]:
    ex = leaf.example
    if ex is None or ex.numel() != 1 or ex.dtype.is_floating_point or ex.dtype.is_complex:
        return None
    return int(ex.reshape(-1)[0])


def _value_plans(inputs: ProgramInputs, base: dict[Any, int]) -> list[SizePlan]:
    """For each input whose value the program reads (``n.item()`` checked to a range): the
    example sizes with that value at its range's lower end, upper end and middle."""
    plans = []
    for i, leaf in enumerate(inputs.leaves):
        if not isinstance(leaf, TensorInput) or leaf.value_range is None:
            continue
        lower, upper = leaf.value_range[0], probe_value_upper(leaf.value_range, _example_value(leaf))
        for value, why in ((lower, "lower end"), (upper, "upper end"), ((lower + upper) // 2, "inside")):
            plans.append(SizePlan(f"{leaf.name} holding {value} ({why} of the range its value is checked to)",
                                  dict(base), {i: value}))
    return plans


def make_inputs(inputs: ProgramInputs, bindings: dict[Any, int], seed: int,
                values: Optional[dict[int, int]] = None) -> tuple[tuple, dict]:
    """Fresh (args, kwargs) with the program's structure, the sizes of ``bindings`` and random values
    (``values``: leaf index -> the value of a one-element input read with .item())."""
    gen = torch.Generator().manual_seed(seed)
    subs = {s: sympy.Integer(v) for s, v in bindings.items()}
    leaves = []
    for i, (leaf, shape) in enumerate(zip(inputs.leaves, inputs.shapes(bindings))):
        if isinstance(leaf, TensorInput) and values and i in values:
            leaves.append(torch.full(shape, values[i], dtype=leaf.dtype).to(leaf.device))
        elif isinstance(leaf, TensorInput) and leaf.value_range is not None:
            lower = leaf.value_range[0]
            upper = probe_value_upper(leaf.value_range, _example_value(leaf))
            leaves.append(torch.randint(lower, upper + 1, shape, generator=gen, dtype=torch.int64)
                          .to(leaf.dtype).to(leaf.device))
        elif isinstance(leaf, TensorInput):
            leaves.append(_tensor(leaf, shape, subs, gen))
        elif isinstance(leaf, IntInput):
            leaves.append(evaluate(leaf.expr, subs))
        else:
            leaves.append(leaf.value)
    return as_call(inputs, leaves)


def as_call(inputs: ProgramInputs, leaves: list[Any]) -> tuple[tuple, dict]:
    args, kwargs = auto_flatten.unflatten(leaves, inputs.in_spec)
    return tuple(args), dict(kwargs)


def element_count(inputs: ProgramInputs, bindings: dict[Any, int]) -> int:
    total = 0
    for shape in inputs.shapes(bindings):
        if shape is not None:
            n = 1
            for d in shape:
                n *= max(d or 0, 0)
            total += n
    return total


def _tensor(leaf: TensorInput, shape: list[int], subs: dict, gen: torch.Generator) -> torch.Tensor:
    dtype, example = leaf.dtype, leaf.example
    has_values = example is not None and example.numel() > 0 and example.dtype == dtype
    if dtype is torch.bool:
        out = torch.rand(shape, generator=gen) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        out = _floats(shape, dtype, example if has_values else None, gen)
    else:
        out = _integers(leaf, shape, subs, gen, example if has_values else None)
    return out.to(leaf.device)


def _floats(shape: list[int], dtype: torch.dtype, example: Optional[torch.Tensor], gen) -> torch.Tensor:
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    if example is not None:
        finite = example.detach().float().cpu()
        finite = finite[torch.isfinite(finite)]
        if finite.numel() > 0:
            lo, hi = float(finite.min()), float(finite.max())
            if hi > lo:
                return (torch.rand(shape, generator=gen) * (hi - lo) + lo).to(dtype)
            return torch.full(shape, lo).to(dtype)
    return torch.randn(shape, generator=gen).to(dtype)


def _integers(leaf: TensorInput, shape: list[int], subs: dict, gen, example: Optional[torch.Tensor]) -> torch.Tensor:
    bound = None
    for b in leaf.index_bounds:
        size = evaluate(b, subs)
        if size is not None:
            bound = size if bound is None else min(bound, size)
    if example is not None:
        pool = example.detach().reshape(-1).cpu()
        if bound is not None:
            pool = pool[(pool >= 0) & (pool < bound)]
        if pool.numel() > 0:
            picks = torch.randint(0, pool.numel(), shape, generator=gen)
            return pool[picks].to(leaf.dtype)
    high = max(bound, 1) if bound is not None else 8
    if leaf.dtype == torch.uint8 or not leaf.dtype.is_signed:
        high = min(high, 256)
    return torch.randint(0, high, shape, generator=gen, dtype=torch.int64).to(leaf.dtype)


__all__ = ["SizePlan", "size_plans", "make_inputs", "as_call", "probe_upper", "element_count",
           "ConstantInput", "IntInput", "TensorInput", "ProgramInputs"]
