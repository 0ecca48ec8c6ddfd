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
- bools: random masks, half true.

An unbounded range is probed up to twice its example size (at least 8): a
program is checked where it will run, not at sizes no machine holds.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
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
    edges: list[SizePlan] = [SizePlan("example sizes" if syms else "static sizes", base)]
    if syms:
        edges.append(SizePlan("lower ends", {s: inputs.symbols[s].lower for s in syms}))
        edges.append(SizePlan("upper ends", {s: probe_upper(inputs.symbols[s]) for s in syms}))
        for s in syms:
            rng = inputs.symbols[s]
            for value, why in ((rng.lower, "lower end"), (probe_upper(rng), "upper end"), (0, "0"), (1, "1")):
                name = inputs.symbol_label(s)
                edges.append(SizePlan(f"{name} = {value} ({why})" if why[0] not in "01" else f"{name} = {value}",
                                      {**base, s: value}))
    plans, seen = [], set()
    for plan in edges:
        key = tuple(sorted((str(k), v) for k, v in plan.bindings.items()))
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


def make_inputs(inputs: ProgramInputs, bindings: dict[Any, int], seed: int) -> tuple[tuple, dict]:
    """Fresh (args, kwargs) with the program's structure, the sizes of ``bindings`` and random values."""
    gen = torch.Generator().manual_seed(seed)
    subs = {s: sympy.Integer(v) for s, v in bindings.items()}
    leaves = []
    for leaf, shape in zip(inputs.leaves, inputs.shapes(bindings)):
        if isinstance(leaf, TensorInput):
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
