"""``graphcap export --infer-shapes --sample-input 'x=2x8 mask=2x3'``: samples built from sizes given on the
command line.

Each ``--sample-input`` is one sample: space-separated ``NAME=SHAPE[:DTYPE]``
items, NAME a parameter of the model's ``forward`` that the factory's example
fills with a tensor (or an int: ``n=5``), SHAPE as ``graphcap run --input``
reads it (``2x8``, ``2,8``, ``scalar``). A named tensor is random data of that
shape with the example's dtype (or DTYPE); the parameters a sample does not
name keep the example's values.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from .errors import UsageError
from .factory import Factory
from .inputs import parse_dtype, parse_shape

_SYNTAX = ("Write --sample-input 'NAME=SHAPE[:DTYPE] NAME=SHAPE ...' (one option per sample, items separated by "
           "spaces, NAME a parameter of the model's forward), e.g. --sample-input 'x=2x3x224x224'")


def _bound(built: Factory) -> inspect.BoundArguments:
    """The factory's example bound to the forward's parameter names."""
    target = getattr(built.model, "forward", built.model)
    try:
        bound = inspect.signature(target).bind(*built.args, **built.kwargs)
    except (TypeError, ValueError) as e:
        raise UsageError(f"The example inputs of {built.where} cannot be named by the model's parameters ({e}).",
                         where=built.where, fix="Use --samples FILE.py:SAMPLES, which gives whole inputs.") from None
    return bound


def _random_like(example: torch.Tensor, shape: list[int], dtype: torch.dtype, generator: torch.Generator):
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    # ints (token ids, indices): inside the example's own values, so embeddings and gathers stay in range
    low = int(example.min()) if example.numel() else 0
    high = int(example.max()) + 1 if example.numel() else 2
    return torch.randint(low, max(high, low + 1), shape, generator=generator, dtype=dtype)


def samples_from_sizes(built: Factory, texts: list[str], seed: int = 0) -> list[tuple[tuple, dict]]:
    """One ``(args, kwargs)`` sample per ``--sample-input`` text."""
    bound = _bound(built)
    names = list(bound.arguments)
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for text in texts:
        where = f"--sample-input {text!r}"
        items = text.split()
        if not items:
            raise UsageError("An empty --sample-input.", where=where, fix=_SYNTAX)
        values = dict(bound.arguments)
        seen = set()
        for item in items:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise UsageError(f"{item!r} is not NAME=SHAPE.", where=where, fix=_SYNTAX)
            if name in seen:
                raise UsageError(f"{name} is given twice in one sample.", where=where,
                                 fix="Name each input once per --sample-input; each option is one sample.")
            seen.add(name)
            example = values.get(name) if name in bound.arguments else None
            if isinstance(example, torch.Tensor):
                shape_text, _, dtype_text = value.partition(":")
                dtype = parse_dtype(dtype_text, where) if dtype_text else example.dtype
                values[name] = _random_like(example, parse_shape(shape_text, where), dtype, generator)
            elif isinstance(example, int) and not isinstance(example, bool):
                try:
                    values[name] = int(value)
                except ValueError:
                    raise UsageError(f"{name} is an int input; {value!r} is not an int.", where=where,
                                     fix=f"e.g. {name}=5") from None
            else:
                described = "; ".join(f"{n} ({_kind(bound.arguments[n])})" for n in names)
                raise UsageError(f"The model has no tensor or int parameter named {name!r} in the example.",
                                 where=where, fix=f"Its example's parameters are: {described}. Name a tensor one "
                                                  "(nested inputs need --samples FILE.py:SAMPLES).")
        samples.append(_as_example_is_called(built, bound, values))
    return samples


def _as_example_is_called(built: Factory, bound: inspect.BoundArguments, values: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` in the example's own structure (what it passed by keyword stays keyword),
    so the samples and the example are the same inputs to the spec."""
    variadic = any(p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
                   for p in bound.signature.parameters.values())
    if variadic:
        call = inspect.BoundArguments(bound.signature, values)
        return tuple(call.args), dict(call.kwargs)
    positional = [n for n in values if n not in built.kwargs]
    return tuple(values[n] for n in positional), {k: values[k] for k in built.kwargs}


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    return type(value).__name__
