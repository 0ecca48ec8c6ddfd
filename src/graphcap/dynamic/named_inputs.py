"""The example inputs keyed by argument name: the structure a dict ``dynamic_shapes`` spec mirrors.

Both the spec matcher (``spec``) and the spec builders (``dims``: ShapesCollection,
AdditionalInputs) need it, so it lives below both.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch


def combined_inputs(m: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The inputs as one dict ``{argument name: value}``, in signature order.

    This is the structure a dict spec is keyed by; ``*args`` appears as one
    tuple under its name and ``**kwargs`` as one dict.
    """
    fn = m.forward if isinstance(m, torch.nn.Module) else m
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        out = {f"args_{i}": a for i, a in enumerate(args)}
        out.update(kwargs)
        return out
    return dict(bound.arguments)
