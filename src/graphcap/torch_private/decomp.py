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
    # before torch 2.14 (no _remap_traceable_collective): the legacy -> functional table, and the
    # reduce-op names the functional forms take
    "torch.distributed._functional_collectives.traceable_collective_remaps": None,
    "torch.distributed._functional_collectives.REDUCE_OP_TO_STR": None,
}

SINCE = {"torch.distributed._functional_collectives._remap_traceable_collective": "2.14"}


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

    Relies on ``torch.distributed._functional_collectives._remap_traceable_collective`` (torch 2.14
    on); before it, on that module's ``traceable_collective_remaps`` table (see :func:`_remap_by_table`).
    """
    import torch.distributed._functional_collectives as collectives
    remap = getattr(collectives, "_remap_traceable_collective", None)
    return remap if remap is not None else _remap_by_table


def _remap_by_table(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``(functional form, (), arguments by name)`` for a legacy collective in torch's table, else None.

    The functional forms take the legacy call's arguments by the same names, except a reduction
    (``op``), which they take by its name ("sum", ...) rather than as a ``ReduceOp``."""
    import inspect

    import torch.distributed._functional_collectives as collectives
    functional = collectives.traceable_collective_remaps.get(func)
    if functional is None:
        return None
    named = dict(inspect.signature(func).bind(*args, **(kwargs or {})).arguments)
    reduction = named.get("op")
    if reduction is not None and not isinstance(reduction, str):
        named["op"] = collectives.REDUCE_OP_TO_STR[reduction]
    return functional, (), named
