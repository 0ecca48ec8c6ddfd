"""torch's functionalization (``torch._subclasses.functional_tensor`` and its C helpers).

``run_decompositions`` functionalizes the program with torch's
FunctionalTensorMode and then asks each functional input whether the program
wrote to its data or its metadata: that decides the mutation outputs of the
inference IR.
"""
from __future__ import annotations

import torch
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

RELIES_ON = {
    "torch._subclasses.functional_tensor.FunctionalTensor": None,
    "torch._subclasses.functional_tensor.FunctionalTensorMode": None,
    "torch._subclasses.functional_tensor.FunctionalTensor#elem": None,
    "torch._sync": (),
    "torch._functionalize_has_metadata_mutation": (),
    "torch._functionalize_has_data_mutation": (),
}



def _sample_functional_tensor() -> FunctionalTensor:
    with FunctionalTensorMode():
        return FunctionalTensor.to_functional(torch.ones(2))


SAMPLES = {"torch._subclasses.functional_tensor.FunctionalTensor": _sample_functional_tensor}

__all__ = ["FunctionalTensor", "FunctionalTensorMode", "sync", "has_metadata_mutation", "has_data_mutation"]


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
