"""torch's functionalization (``torch._subclasses.functional_tensor`` and its C helpers).

``run_decompositions`` functionalizes the program with torch's
FunctionalTensorMode and then asks each functional input whether the program
wrote to its data or its metadata: that decides the mutation outputs of the
inference IR.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

RELIES_ON = {
    "torch._subclasses.functional_tensor.FunctionalTensor": None,
    "torch._subclasses.functional_tensor.FunctionalTensorMode": None,
    "torch._subclasses.functional_tensor.FunctionalTensor#elem": None,
    "torch._sync": (),
    "torch._functionalize_has_metadata_mutation": (),
    "torch._functionalize_has_data_mutation": (),
    "torch._functorch.config.decompose_custom_triton_ops": None,
    "torch._library.triton.triton_ops_to_kernels": None,
}



def _sample_functional_tensor() -> FunctionalTensor:
    with FunctionalTensorMode():
        return FunctionalTensor.to_functional(torch.ones(2))


SAMPLES = {"torch._subclasses.functional_tensor.FunctionalTensor": _sample_functional_tensor}

__all__ = ["FunctionalTensor", "FunctionalTensorMode", "sync", "has_metadata_mutation", "has_data_mutation",
           "is_triton_op", "triton_ops_decomposed"]


def sync(tensor: FunctionalTensor) -> None:
    """Apply the pending updates of a functional tensor to its value.

    Relies on ``torch._sync(t)`` (C).
    """
    torch._sync(tensor)


def has_metadata_mutation(inner: torch.Tensor) -> bool:
    """Whether the program changed the metadata (sizes, strides) of the functional wrapper's tensor.

    Relies on ``torch._functionalize_has_metadata_mutation(t)`` (C), given ``FunctionalTensor.elem``.
    """
    return torch._functionalize_has_metadata_mutation(inner)


def has_data_mutation(inner: torch.Tensor) -> bool:
    """Whether the program wrote to the data of the functional wrapper's tensor.

    Relies on ``torch._functionalize_has_data_mutation(t)`` (C), given ``FunctionalTensor.elem``.
    """
    return torch._functionalize_has_data_mutation(inner)


def is_triton_op(op: object) -> bool:
    """Whether ``op`` is an operator defined with ``torch.library.triton_op``.

    Such an operator decomposes into its implementation (the triton kernels it
    wraps) under functionalization unless told otherwise. Relies on the registry
    ``torch._library.triton.triton_ops_to_kernels`` (operator name -> kernels),
    which ``triton_op`` fills for every operator it defines.
    """
    from torch._library.triton import triton_ops_to_kernels

    from .ops import OpOverload
    return isinstance(op, OpOverload) and op.name() in triton_ops_to_kernels


@contextlib.contextmanager
def triton_ops_decomposed(enabled: bool) -> Iterator[None]:
    """Within the block, functionalization decomposes ``triton_op`` operators (``enabled``) or keeps them.

    Relies on the flag ``torch._functorch.config.decompose_custom_triton_ops``,
    which each ``triton_op``'s functionalization rule reads; restored after.
    """
    import torch._functorch.config as functorch_config
    old = functorch_config.decompose_custom_triton_ops
    functorch_config.decompose_custom_triton_ops = enabled
    try:
        yield
    finally:
        functorch_config.decompose_custom_triton_ops = old
