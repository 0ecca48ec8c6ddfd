"""Multi-method programs audit (2026-11-27 late morning): ``export_methods`` on real use.

The probe is ``bench/probes/multi_method_audit.py``; these are the defects it found, tested from the
behaviour with cases beyond the probe.
"""
from __future__ import annotations

import importlib.util
import io

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap

NEEDS_TORCHAO = pytest.mark.skipif(importlib.util.find_spec("torchao") is None,
                                   reason="torchao not installed (the consumers extra, torch 2.14 line)")


def _round_trip(progs):
    buf = io.BytesIO()
    graphcap.save(progs, buf)
    buf.seek(0)
    return graphcap.load(buf)


class PairWeights(torch.nn.Module):
    """Two methods over a weight that is a tensor subclass wrapping inner tensors (as torchao's
    quantized weights are), one of them writing a buffer the other reads."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)), requires_grad=False)
        self.register_buffer("acc", torch.zeros(4))
        self.register_buffer("pair_buf", TwoTensor(torch.ones(4), torch.full((4,), 2.0)))

    def encode(self, x):
        y = x @ self.w
        self.acc.add_(y.sum(0).a if isinstance(y.sum(0), TwoTensor) else y.sum(0))
        return y

    def project(self, x):
        return x @ self.w + self.pair_buf + self.acc


def test_subclass_weights_load_shared_by_every_method():
    """Loading checks that the methods' tensors under one FQN are one value before sharing them; a
    wrapper subclass has no storage of its own, and the check failed with "Attempted to access the
    data pointer on an invalid python storage" (torchao int8 weights: the file would not load)."""
    model = PairWeights()
    x = torch.randn(2, 4)
    progs = graphcap.export_methods(model, {"encode": (x,), "project": (x,)})
    loaded = _round_trip(progs)
    for fqn in ("w", "pair_buf"):
        held = {id(ep.state_dict[fqn]) for ep in loaded.values()}
        assert len(held) == 1, f"{fqn} is not one tensor after load"
        assert type(loaded["encode"].state_dict[fqn]) is TwoTensor
    eager = PairWeights()
    m = loaded.module()
    for method in ("encode", "project", "encode", "project"):
        torch.testing.assert_close(getattr(m, method)(x), getattr(eager, method)(x))


def test_subclass_tensors_that_differ_are_not_taken_for_one():
    """The same comparison refuses two subclass tensors whose inner values differ (a damaged file)."""
    from graphcap.multi_method import _same_value
    a = TwoTensor(torch.ones(3), torch.zeros(3))
    assert _same_value(a, TwoTensor(torch.ones(3), torch.zeros(3)))
    assert not _same_value(a, TwoTensor(torch.ones(3), torch.ones(3)))
    assert not _same_value(a, torch.ones(3))
    assert not _same_value(a, TwoTensor(torch.ones(2), torch.zeros(2)))


@NEEDS_TORCHAO
def test_torchao_int8_weight_only_model_with_two_methods_round_trips():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    class Quant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.l1 = torch.nn.Linear(16, 32)
            self.l2 = torch.nn.Linear(32, 16)
            self.register_buffer("acc", torch.zeros(16))

        def encode(self, x):
            y = self.l2(torch.relu(self.l1(x)))
            self.acc.add_(y.sum(0))
            return y

        def project(self, x):
            return self.l1(x) + self.acc.sum()

    def make():
        m = Quant()
        quantize_(m, Int8WeightOnlyConfig())
        return m

    x = torch.randn(2, 16)
    loaded = _round_trip(graphcap.export_methods(make(), {"encode": (x,), "project": (x,)}))
    assert loaded["encode"].state_dict["l1.weight"] is loaded["project"].state_dict["l1.weight"]
    eager, m = make(), loaded.module()
    with torch.no_grad():
        for method in ("project", "encode", "project"):
            torch.testing.assert_close(getattr(m, method)(x), getattr(eager, method)(x))
