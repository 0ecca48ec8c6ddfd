"""torch's fake tensors (``torch._subclasses.fake_tensor``).

graphcap runs the user's program on fake tensors: tensors with shapes, dtypes
and devices but no data, whose sizes may be ShapeEnv symbols. The classes live
in a private package; they are re-exported unchanged. Whether two tensors
(fake ones included) share a storage is read from the storage's private
identity.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

RELIES_ON = {
    "torch._subclasses.fake_tensor.FakeTensor": None,
    "torch._subclasses.fake_tensor.FakeTensorMode": None,
    "torch._subclasses.fake_tensor.FakeTensor#fake_mode": None,
    "torch._subclasses.fake_tensor.UnsupportedOperatorException": None,
    "torch.UntypedStorage#_cdata": None,
    "torch._subclasses.fake_tensor.FakeTensorConverter.from_meta_and_device": ("self", "fake_mode", "t", "device"),
    "torch._subclasses.fake_tensor.FakeTensorMode#fake_tensor_converter": None,
}

SAMPLES = {
    "torch._subclasses.fake_tensor.FakeTensor": lambda: FakeTensorMode().from_tensor(torch.ones(2)),
    "torch.UntypedStorage": lambda: torch.UntypedStorage(1),
}

__all__ = ["FakeTensor", "FakeTensorMode", "unsupported_operator_error", "same_storage", "fake_from_meta"]


def fake_from_meta(fake_mode: FakeTensorMode, meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A fake tensor of ``fake_mode`` over ``meta`` (a fresh meta tensor, sizes possibly symbolic) on ``device``.

    What the mode does itself once a meta kernel has run; building a tensor
    this way skips the operator dispatch (and its cache), which dominates
    loading a program of thousands of nodes.

    Relies on ``FakeTensorMode.fake_tensor_converter.from_meta_and_device``.
    """
    return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, device)


def unsupported_operator_error() -> type:
    """The exception a fake tensor raises for an operator it has no fake kernel for (``.func`` is the operator).

    Relies on ``torch._subclasses.fake_tensor.UnsupportedOperatorException``.
    """
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    return UnsupportedOperatorException


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors (fake ones included) share one storage.

    Relies on ``UntypedStorage._cdata`` (the storage's identity).
    """
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except Exception:  # a tensor without storage (sparse, nested, ...): not an alias we can tell
        return False
