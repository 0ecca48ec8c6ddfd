"""Every node's ``tensor_meta`` is what torch's extractor computes for its value, cache or not."""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.export import Dim
from torch.fx.experimental import proxy_tensor
from torch.fx.passes.shape_prop import _extract_tensor_metadata

import graphcap
from graphcap.torch_private import tensor_meta


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x.contiguous(memory_format=torch.channels_last)).relu()
        z = y.mean((2, 3))
        return self.fc(z), y.transpose(1, 2), z.to(torch.int64)


def _metas(ep):
    return [(n.name, n.meta.get("tensor_meta")) for n in ep.graph.nodes]


def _check(export, monkeypatch):
    """The cached export's tensor_meta equals the one torch's extractor gives on every node."""
    cached = export()
    monkeypatch.setattr(tensor_meta, "_cached_extractor", lambda original: original)
    uncached = export()
    assert _metas(cached) == _metas(uncached)
    assert sum(1 for _, m in _metas(cached) if m is not None) > 5
    for node in cached.graph.nodes:  # and agrees with the value recorded (but for requires_grad)
        if isinstance(node.meta.get("val"), torch.Tensor):
            fresh = _extract_tensor_metadata(node.meta["val"])
            assert node.meta["tensor_meta"]._replace(requires_grad=fresh.requires_grad) == fresh, node
    return cached


def test_static_tensor_meta_matches_torch(monkeypatch):
    ep = _check(lambda: graphcap.export(Net(), (torch.randn(2, 3, 8, 8),)), monkeypatch)
    metas = [n.meta["tensor_meta"] for n in ep.graph.nodes if "tensor_meta" in n.meta]
    assert len({id(m.qparams) for m in metas}) == len(metas)  # no two nodes share a mutable dict


def test_dynamic_tensor_meta_matches_torch(monkeypatch):
    _check(lambda: graphcap.export(Net(), (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: Dim("b")},)),
           monkeypatch)


def test_tracer_reference_restored_after_export():
    before = proxy_tensor._extract_tensor_metadata
    graphcap.export(Net(), (torch.randn(2, 3, 8, 8),))
    assert proxy_tensor._extract_tensor_metadata is before


def test_a_static_shape_with_symbolic_strides_is_not_cached():
    """``p[:, :1]`` of a (1, s) tensor is (1, 1) with strides (s, 1): its metadata is not keyed by ints."""
    class FirstPosition(torch.nn.Module):
        def forward(self, x):
            positions = torch.arange(x.shape[1]).unsqueeze(0)
            return positions[:, :1] - 1 + x.sum()

    x = torch.randn(2, 7)
    ep = graphcap.export(FirstPosition(), (x,), dynamic_shapes={"x": {1: torch.export.Dim("s", min=2)}})
    y = torch.randn(2, 11)
    torch.testing.assert_close(ep.module()(y), FirstPosition()(y))
