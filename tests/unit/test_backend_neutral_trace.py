"""The training IR does not bake in the exporting machine's backend choices:
the trace runs with cuDNN/MKL-DNN/NNPACK off (as torch.export's does), and
the process's flags are put back afterwards, also when the trace fails."""
from __future__ import annotations

import pytest
import torch

import graphcap


def _flags():
    return (torch._C._get_cudnn_enabled(), torch._C._get_mkldnn_enabled())


def _call(ep, target):
    return next(n for n in ep.graph.nodes if n.op == "call_function" and n.target is target)


def test_norm_layers_record_cudnn_disabled_whatever_the_machine_says():
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.LayerNorm(4)).eval()
    x = torch.randn(3, 4)
    before = _flags()
    with torch.backends.cudnn.flags(enabled=True):
        ep = graphcap.export(model, (x,))
    assert _call(ep, torch.ops.aten.batch_norm.default).args[-1] is False
    assert _call(ep, torch.ops.aten.layer_norm.default).args[4:] == (1e-05, False)
    assert _flags() == before
    torch.testing.assert_close(ep.module()(x), model(x))


def test_flags_are_restored_when_the_trace_fails():
    class Bad(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    before = _flags()
    with pytest.raises(Exception, match="boom"):
        graphcap.export(Bad(), (torch.randn(2),))
    assert _flags() == before
