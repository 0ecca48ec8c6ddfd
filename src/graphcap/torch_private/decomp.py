"""torch's decomposition tables and reference implementations (``torch._decomp``, ``torch._refs``).

graphcap's decomposition table starts from torch's core-ATen table (the
post-autograd one) and leaves out what torch's own rule says must not be
decomposed; ``torch.tensor`` on symbolic values is traced through its
reference implementation, and legacy ``torch.distributed`` collectives through
their functional forms.
"""
from __future__ import annotations

from typing import Any, Callable

RELIES_ON = {
    "torch._decomp._should_decompose_because_unsafe_op": ("op",),
    "torch._decomp._core_aten_decompositions_post_autograd": (),
    "torch._refs.tensor": ("data",),
    "torch.distributed._functional_collectives._remap_traceable_collective": ("func", "args", "kwargs"),
}


def should_decompose_because_unsafe(op: Any) -> bool:
    """torch's rule for operators that must be decomposed even where a table keeps composites.

    Relies on ``torch._decomp._should_decompose_because_unsafe_op(op)``.
    """
    from torch._decomp import _should_decompose_because_unsafe_op
    return _should_decompose_because_unsafe_op(op)


def core_aten_decompositions_post_autograd() -> dict[Any, Callable[..., Any]]:
    """torch's table of decompositions into core ATen, the part that applies after autograd.

    Relies on ``torch._decomp._core_aten_decompositions_post_autograd()``.
    """
    from torch._decomp import _core_aten_decompositions_post_autograd
    return _core_aten_decompositions_post_autograd()


def tensor_from_symbolic_data(*args: Any, **kwargs: Any) -> Any:
    """``torch.tensor(...)`` built from traced operators, for data holding SymInts/SymFloats.

    Relies on ``torch._refs.tensor(data, *, dtype, device, ...)``.
    """
    import torch._refs
    return torch._refs.tensor(*args, **kwargs)


def traceable_collective_remapper() -> Callable[..., Any]:
    """torch.distributed's map ``(func, args, kwargs) -> (func, args, kwargs) | None`` from a legacy
    collective call to its traceable functional form (call only when ``torch.distributed.is_available()``).

    Relies on ``torch.distributed._functional_collectives._remap_traceable_collective``.
    """
    from torch.distributed._functional_collectives import _remap_traceable_collective
    return _remap_traceable_collective
