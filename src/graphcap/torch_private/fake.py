"""torch's fake tensors (``torch._subclasses.fake_tensor``).

graphcap runs the user's program on fake tensors: tensors with shapes, dtypes
and devices but no data, whose sizes may be ShapeEnv symbols. The classes live
in a private package; they are re-exported unchanged. Whether two tensors
(fake ones included) share a storage is read from the storage's private
identity.
"""
from __future__ import annotations

from typing import Any, Optional

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
    "torch._subclasses.fake_tensor.FakeTensorConverter#meta_converter": None,
    "torch._subclasses.meta_utils.MetaConverter#tensor_memo": None,
    "torch._subclasses.fake_tensor.FakeTensorMode#propagate_real_tensors": None,
    "torch._subclasses.fake_tensor.FakeTensorConverter.set_tensor_memo": ("self", "t", "v"),
    "torch._subclasses.fake_tensor.FakeTensorMode._cached_dispatch_impl": ("self", "func", "types", "args", "kwargs"),
    "torch._subclasses.fake_tensor.FakeTensorMode._dispatch_impl": ("self", "func", "types", "args", "kwargs"),
    "torch._ops.OpOverload#is_view": None,
    "torch.Tensor._is_view": None,
}

SAMPLES = {
    "torch._subclasses.fake_tensor.FakeTensor": lambda: FakeTensorMode().from_tensor(torch.ones(2)),
    "torch.UntypedStorage": lambda: torch.UntypedStorage(1),
}

__all__ = ["FakeTensor", "FakeTensorMode", "tracing_fake_mode", "unsupported_operator_error", "same_storage",
           "storage_key", "fake_from_meta", "fake_of_plain_leaf"]


def tracing_fake_mode(**options: Any) -> FakeTensorMode:
    """The fake mode graphcap traces with: torch's (``options`` go to its constructor), but views
    of symbolically sized tensors skip the operator cache.

    The fake mode caches each operator's output metadata by its arguments;
    outputs with symbolic sizes are cached in the export's own shape
    environment, so they are reused only within one export. Rebuilding a
    cached view from its entry (a new tensor, then ``set_`` onto the base's
    storage, both with symbolic sizes and strides) costs more symbolic
    arithmetic than the view's kernel does: with dynamic shapes, skipping the
    cache for those views alone makes exports 12-27% faster (resnet18,
    MobileNetV3, ViT, BERT, GPT-2; ``bench/RESULTS.md``). The results are the
    same either way: a cache hit is checked to equal what the kernel gives.
    Every other operator, and every view of a static tensor, uses the cache.

    The mode stays of torch's class (higher-order operators find their fake
    rules by the mode's exact type); the choice is this instance's
    ``_cached_dispatch_impl``.

    Relies on ``FakeTensorMode._cached_dispatch_impl`` and ``_dispatch_impl``
    (called with the same arguments) and ``OpOverload.is_view``.
    """
    mode = FakeTensorMode(**options)
    cached, uncached = mode._cached_dispatch_impl, mode._dispatch_impl

    def dispatch(func, types, args, kwargs):
        if getattr(func, "is_view", False) and _symbolic_tensor_among(args):
            return uncached(func, types, args, kwargs)
        return cached(func, types, args, kwargs)
    mode._cached_dispatch_impl = dispatch
    return mode


def _symbolic_tensor_among(args) -> bool:
    """Whether a tensor in ``args`` (a view's operands: tensors, ints, lists of ints) has a symbolic
    size, or an argument is a symbolic int."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if any(isinstance(d, torch.SymInt) for d in a.shape):
                return True
        elif isinstance(a, torch.SymInt):
            return True
        elif isinstance(a, (list, tuple)) and any(isinstance(d, torch.SymInt) for d in a):
            return True
    return False


def fake_from_meta(fake_mode: FakeTensorMode, meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A fake tensor of ``fake_mode`` over ``meta`` (a fresh meta tensor, sizes possibly symbolic) on ``device``.

    What the mode does itself once a meta kernel has run; building a tensor
    this way skips the operator dispatch (and its cache), which dominates
    loading a program of thousands of nodes.

    Relies on ``FakeTensorMode.fake_tensor_converter.from_meta_and_device``.
    """
    return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, device)


def fake_of_plain_leaf(fake_mode: FakeTensorMode, t: torch.Tensor) -> Optional[torch.Tensor]:
    """The fake copy ``fake_mode.from_tensor(t, static_shapes=True)`` gives, built directly; None
    when ``fake_mode`` propagates real tensors beside the fake ones (draft export), which only
    ``from_tensor`` sets up.

    Also None when ``t`` is not a plain leaf (:func:`_plain_leaf`). The caller
    checks that ``t`` shares its storage with no other tensor of the trace: a
    parameter or buffer as modules hold them. ``from_tensor`` describes every
    tensor in full (views, subclasses, storage aliasing) before building it, a
    tenth of a warm export of resnet18; this builds the meta tensor, wraps it,
    and records it in the converter's memo, so that meeting ``t`` again gives
    this fake tensor.

    Relies on ``FakeTensorMode.propagate_real_tensors``,
    ``FakeTensorConverter.from_meta_and_device``, ``set_tensor_memo``,
    ``Tensor._is_view`` and the ``_is_buffer`` marker of ``nn.Buffer``.
    """
    if fake_mode.propagate_real_tensors or not _plain_leaf(t):
        return None
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    fake = fake_from_meta(fake_mode, meta, t.device)
    if t.requires_grad:
        fake.requires_grad_(True)
    if type(t) is torch.nn.Parameter:
        fake._is_param = True  # isinstance(fake, nn.Parameter) holds, as for from_tensor's copy
    fake_mode.fake_tensor_converter.set_tensor_memo(t, fake)
    return fake


def _plain_leaf(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dense strided tensor that owns its storage from offset 0, with nothing
    ``from_tensor`` would treat specially (subclass, view, autograd history, conjugate or
    negative bit, a storage resized to nothing, an ``nn.Buffer`` marker)."""
    return (type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout is torch.strided
            and t.is_leaf and not t._is_view() and t.storage_offset() == 0
            and not (t.is_quantized or t.is_mkldnn or t.is_conj() or t.is_neg() or t.is_nested)
            and t.device.type not in ("lazy", "xla")
            and storage_key(t) is not None
            and (t.untyped_storage().nbytes() > 0 or t.numel() == 0)
            and not hasattr(t, "_is_buffer"))


def unsupported_operator_error() -> type:
    """The exception a fake tensor raises for an operator it has no fake kernel for (``.func`` is the operator).

    Relies on ``torch._subclasses.fake_tensor.UnsupportedOperatorException``.
    """
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    return UnsupportedOperatorException


def storage_key(t: torch.Tensor) -> Optional[int]:
    """The identity of ``t``'s storage (fake and meta tensors included); None without one.

    Relies on ``UntypedStorage._cdata``.
    """
    try:
        return t.untyped_storage()._cdata
    except Exception:  # a tensor without storage (sparse, nested, ...): not an alias we can tell
        return None


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors (fake ones included) share one storage."""
    key = storage_key(a)
    return key is not None and key == storage_key(b)


def converter_memo(fake_mode: Any) -> Any:
    """The memo through which ``fake_mode`` keeps each fake tensor it converted from a real one
    (``FakeTensorMode.fake_tensor_converter.meta_converter.tensor_memo``), or None."""
    converter = getattr(fake_mode, "fake_tensor_converter", None)
    return getattr(getattr(converter, "meta_converter", None), "tensor_memo", None)


def _sample_converter() -> Any:
    return FakeTensorMode().fake_tensor_converter


SAMPLES.update({
    "torch._subclasses.fake_tensor.FakeTensorConverter": _sample_converter,
    "torch._subclasses.meta_utils.MetaConverter": lambda: _sample_converter().meta_converter,
})
