"""run_decompositions against torch.export and eager: the defects the decomposition audit found.

Each test states a behaviour (bench/probes/decomp_audit.py holds the probes; docs/torch-suite.md
the audit table) and checks it against eager, with torch.export as the reference where its
program is the contract.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import graphcap

aten = torch.ops.aten


def _ops(ep) -> set[str]:
    return {n.target.name() for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op == "call_function" and hasattr(n.target, "name")}


def _non_core(ep) -> set[str]:
    return {n.target.name() for n in ep.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and torch.Tag.core not in n.target.tags}


class _Recurrent(nn.Module):
    def __init__(self, kind: str, **kw):
        super().__init__()
        self.rnn = getattr(nn, kind)(4, 3, **kw)

    def forward(self, x):
        return self.rnn(x)


@pytest.mark.parametrize("kind,kw", [
    ("LSTM", {"batch_first": True}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("GRU", {}),
    ("RNN", {"nonlinearity": "relu"}),
])
def test_recurrent_layers_decompose_to_core_aten_not_to_a_cpu_backend_kernel(kind, kw):
    # the default table broke an LSTM down into aten.mkldnn_rnn_layer (a oneDNN CPU kernel, no
    # core ATen operator), because the retrace ran with oneDNN on: torch.export's retrace (like
    # graphcap's export) switches the backends off, so the program says what is computed
    torch.manual_seed(0)
    model = _Recurrent(kind, **kw).eval()
    x = torch.randn(2, 5, 4)
    flags = torch._C._get_mkldnn_enabled()
    ep = graphcap.export(model, (x,)).run_decompositions()
    assert torch._C._get_mkldnn_enabled() == flags  # put back
    assert not any("mkldnn" in op for op in _ops(ep)), _ops(ep)
    assert _non_core(ep) == set()
    torch.testing.assert_close(ep.module()(x), model(x))
    reference = torch.export.export(model, (x,)).run_decompositions()
    assert _ops(ep) <= _ops(reference) | {"aten::mm", "aten::clone"}  # mm: a matmul folded under no_grad


def test_lstm_kept_by_the_table_stays_whole_and_runs():
    torch.manual_seed(0)
    model = _Recurrent("LSTM", batch_first=True).eval()
    x = torch.randn(1, 3, 4)
    table = graphcap.default_decompositions()
    del table[aten.lstm.input]
    ep = graphcap.export(model, (x,)).run_decompositions(table)
    assert "aten::lstm.input" in _ops(ep) and not any("mkldnn" in op for op in _ops(ep))
    torch.testing.assert_close(ep.module()(x), model(x))


def test_lstm_with_a_dynamic_batch_decomposes_to_core_aten_over_its_range():
    torch.manual_seed(0)
    model = _Recurrent("LSTM", batch_first=True).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    ep = graphcap.export(model, (torch.randn(2, 5, 4),), dynamic_shapes=({0: batch},)).run_decompositions()
    assert _non_core(ep) == set()
    for b in (1, 2, 8):
        x = torch.randn(b, 5, 4)
        torch.testing.assert_close(ep.module()(x), model(x))
    with pytest.raises(Exception, match="9"):
        ep.module()(torch.randn(9, 5, 4))


def test_the_retrace_leaves_the_backend_flags_as_they_were_after_a_failure():
    class M(nn.Module):
        def forward(self, x):
            return x.relu()

    def broken(x):
        raise ValueError("broken decomposition")

    ep = graphcap.export(M(), (torch.randn(3),))
    table = graphcap.default_decompositions()
    table[aten.relu.default] = broken
    with torch.backends.mkldnn.flags(enabled=True):
        with pytest.raises(graphcap.GraphcapError, match="broken decomposition"):
            ep.run_decompositions(table)
        assert torch._C._get_mkldnn_enabled()
    model = copy.deepcopy(M())
    torch.testing.assert_close(ep.run_decompositions().module()(torch.ones(3)), model(torch.ones(3)))
