"""The ``tensor_meta`` make_fx records on every node, computed once per distinct tensor layout.

For each node it records, the proxy-tensor tracer calls
``proxy_tensor._extract_tensor_metadata`` (``torch.fx.passes.shape_prop``'s):
shape, dtype, strides, and which memory format the tensor is contiguous in,
asked three times through the fake tensor's Python properties. On a warm
export of resnet18 that is a sixth of the time. For a tensor whose sizes and
strides are plain ints the answer depends only on (sizes, strides, dtype,
layout, requires_grad), and most nodes of a network repeat a few of those:
while graphcap traces, the tracer's reference is swapped for a version that
asks torch's function once per distinct key and hands out copies (a fresh
``qparams`` dict each, so no two nodes share a mutable value). Symbolic
sizes, quantized tensors and anything unusual go to torch's function as before.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.fx.experimental import proxy_tensor

RELIES_ON = {
    "torch.fx.experimental.proxy_tensor._extract_tensor_metadata": ("result", "include_contiguity"),
}

_MAX_ENTRIES = 4096
_cache: dict = {}


def _key(result):
    if not isinstance(result, torch.Tensor) or result.is_quantized:
        return None
    shape = tuple(result.shape)
    if not all(type(s) is int for s in shape):
        return None
    layout = result.layout
    if layout is not torch.strided:
        return None
    stride = tuple(result.stride())
    if not all(type(s) is int for s in stride):  # a static shape can still have symbolic strides (an expand)
        return None
    return shape, stride, result.dtype, layout, result.requires_grad


def _cached_extractor(original):
    def extract(result, include_contiguity: bool = True):
        key = _key(result) if include_contiguity else None
        if key is None:
            return original(result, include_contiguity)
        meta = _cache.get(key)
        if meta is None:
            if len(_cache) >= _MAX_ENTRIES:
                _cache.clear()
            meta = _cache[key] = original(result, include_contiguity)
        return meta._replace(qparams={})
    return extract


@contextlib.contextmanager
def tensor_metadata_cached() -> Iterator[None]:
    """While the block runs, make_fx's ``tensor_meta`` is computed once per distinct static layout."""
    original = proxy_tensor._extract_tensor_metadata
    proxy_tensor._extract_tensor_metadata = _cached_extractor(original)
    try:
        yield
    finally:
        proxy_tensor._extract_tensor_metadata = original
