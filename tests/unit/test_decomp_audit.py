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
from conftest import TORCH_LINE

aten = torch.ops.aten
# torch 2.10 to 2.12 decompose aten.lstm.input with h_n / c_n one dim too many: there the retrace
# keeps oneDNN on and an LSTM stays its CPU kernel (eager's values, not core ATen)
LSTM_DECOMPOSES = TORCH_LINE >= (2, 13)


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
    torch.testing.assert_close(ep.module()(x), model(x))  # shapes included, on every torch line
    if kind == "LSTM" and not LSTM_DECOMPOSES:
        return
    assert not any("mkldnn" in op for op in _ops(ep)), _ops(ep)
    assert _non_core(ep) == set()
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
    assert _non_core(ep) == set() or not LSTM_DECOMPOSES
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


class _ReturnsViewsOfWrittenState(nn.Module):
    """Returns views of a buffer and of an input that forward writes in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.ones(4, 3))

    def forward(self, x):
        self.buf.add_(x.sum())
        x.mul_(2)
        return self.buf[1:], self.buf.t(), self.buf.diagonal(), x[0], x.view(-1), x.sum()


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _ReturnsViewsOfWrittenState()

    def forward(self, x):
        return self.inner(x)


@pytest.mark.parametrize("dynamic", [False, True])
def test_views_of_written_state_returned_keep_their_source_after_decomposition(dynamic):
    # functionalization makes such a view again from the written value when the output is taken,
    # outside any replayed node: the node had no stack trace and the decomposed program failed
    # graphcap's own verifier ("slice_2: has no meta['stack_trace']")
    model = _Outer()
    spec = ({0: torch.export.Dim("n", min=1, max=8)},) if dynamic else None
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(4, 3),), dynamic_shapes=spec).run_decompositions()
    ep.validate()
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is not torch.ops.aten.sym_size.int:
            assert node.meta.get("stack_trace"), node
            paths = [path for path, _ in node.meta.get("nn_module_stack", {}).values()]
            assert "inner" in paths, node
    sig = ep.graph_signature
    assert list(sig.buffers_to_mutate.values()) == ["inner.buf"]
    assert list(sig.user_inputs_to_mutate.values()) == ["x"]
    sizes = (4, 1, 8) if dynamic else (4,)
    program, eager = ep.module(), copy.deepcopy(model)
    for n in sizes:
        x = torch.randn(n, 3) if dynamic else torch.randn(4, 3)
        x_eager, x_program = x.clone(), x.clone()
        torch.testing.assert_close(program(x_program), eager(x_eager))
        torch.testing.assert_close(x_program, x_eager)
        torch.testing.assert_close(program.inner.buf, eager.inner.buf)


def test_views_of_written_state_survive_decomposing_twice_and_a_re_export():
    model = _ReturnsViewsOfWrittenState()
    x = torch.randn(4, 3)
    ep = graphcap.export(copy.deepcopy(model), (x.clone(),)).run_decompositions().run_decompositions()
    again = graphcap.export(ep.module(), (x.clone(),)).run_decompositions()
    again.validate()
    eager = copy.deepcopy(model)
    xe, xp = x.clone(), x.clone()
    torch.testing.assert_close(again.module()(xp), eager(xe))
    torch.testing.assert_close(xp, xe)


def _table_keeping_norms(kind: str):
    table = graphcap.default_decompositions() if kind == "graphcap" else torch.export.default_decompositions()
    del table[aten.instance_norm.default]
    return table


@pytest.mark.parametrize("table_kind", ["graphcap", "torch"])
@pytest.mark.parametrize("dims", [1, 2])
def test_instance_norm_without_running_stats_can_be_kept_whole(table_kind, dims):
    # its running statistics are None: it writes nothing, yet graphcap's verifier took it for a
    # writing operator and refused the program torch.export gives
    model = getattr(nn, f"InstanceNorm{dims}d")(3, affine=True).train()
    x = torch.randn(2, 3, *([5] * dims))
    spec = ({0: torch.export.Dim("b"), 2: torch.export.Dim("h", min=2, max=16)},)
    ep = graphcap.export(model, (x,), dynamic_shapes=spec).run_decompositions(_table_keeping_norms(table_kind))
    ep.validate()
    assert "aten::instance_norm" in _ops(ep)
    for shape in ((2, 3, *([5] * dims)), (1, 3, 2, *([5] * (dims - 1))), (4, 3, 16, *([5] * (dims - 1)))):
        y = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(y), model(y))


def test_instance_norm_updating_running_stats_is_broken_down_even_when_the_table_keeps_it():
    # kept whole, it would write its running statistics in place where no signature says so
    # (torch.export's program does that; a runtime that does not write inputs loses the update):
    # graphcap breaks this call down, and the update is a BUFFER_MUTATION output
    model = nn.InstanceNorm1d(3, track_running_stats=True, momentum=0.3).train()
    x = torch.randn(2, 3, 6)
    ep = graphcap.export(copy.deepcopy(model), (x,)).run_decompositions(_table_keeping_norms("graphcap"))
    ep.validate()
    assert "aten::instance_norm" not in _ops(ep)
    assert sorted(ep.graph_signature.buffers_to_mutate.values()) == ["running_mean", "running_var"]
    program, eager = ep.module(), copy.deepcopy(model)
    for _ in range(2):
        y = torch.randn(2, 3, 6)
        torch.testing.assert_close(program(y), eager(y))
        torch.testing.assert_close(program.running_mean, eager.running_mean)
        torch.testing.assert_close(program.running_var, eager.running_var)


def test_a_kept_norm_writes_only_where_it_is_called_to_write():
    # the same operator, kept, called once in a way that writes (train stats) and once not:
    # the program stays functional and matches eager
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = nn.InstanceNorm1d(3)
            self.tracked = nn.InstanceNorm1d(3, track_running_stats=True)

        def forward(self, x):
            return self.plain(x) + self.tracked(x)

    model = Two().train()
    x = torch.randn(2, 3, 4)
    ep = graphcap.export(copy.deepcopy(model), (x,)).run_decompositions(_table_keeping_norms("graphcap"))
    ep.validate()
    program, eager = ep.module(), copy.deepcopy(model)
    torch.testing.assert_close(program(x), eager(x))
    torch.testing.assert_close(program.tracked.running_mean, eager.tracked.running_mean)


class _LinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.ln = nn.LayerNorm(4)

    def forward(self, x):
        return nn.functional.gelu(self.ln(self.lin(x)))


def _composite_tables():
    implied = graphcap.default_decompositions()
    return {
        # an implied entry (a composite broken down by its own kernel) copied into a plain dict: it
        # was op.decompose, which, installed as the composite's kernel, called itself forever
        "one entry in a plain dict": {aten.linear.default: implied[aten.linear.default]},
        "materialized table": implied.materialize(),
        "entry set again": _set_again(graphcap.default_decompositions(), aten.layer_norm.default),
        "python composite kernel (lstm) copied": {aten.linear.default: implied[aten.linear.default],
                                                  aten.lstm.input: implied[aten.lstm.input]},
    }


def _set_again(table, op):
    table[op] = table[op]
    return table


@pytest.mark.parametrize("name", list(_composite_tables()))
def test_the_tables_own_composite_entries_work_copied_elsewhere(name):
    torch.manual_seed(0)
    model = _LinearGelu()
    table = _composite_tables()[name]
    spec = ({0: torch.export.Dim("b")},)
    ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=spec).run_decompositions(table)
    ep.validate()
    assert "aten::linear" not in _ops(ep)
    for b in (3, 1, 0, 6):
        x = torch.randn(b, 4)
        torch.testing.assert_close(ep.module()(x), model(x))
    # the same table object gives torch.export's decomposition the same operators
    reference = torch.export.export(model, (torch.randn(3, 4),), dynamic_shapes=spec).run_decompositions(
        _composite_tables()[name])
    assert _ops(ep) == _ops(reference)


def test_graphcap_tables_work_in_torch_export_run_decompositions():
    # a user who switched the import keeps torch programs around: graphcap's table (its entries
    # installed by torch as composite kernels) must not send torch's retrace into a recursion
    torch.manual_seed(0)
    model = _LinearGelu()
    x = torch.randn(2, 4)
    for table in (graphcap.default_decompositions(), graphcap.default_decompositions().materialize()):
        ep = torch.export.export(model, (x,)).run_decompositions(table)
        assert "aten::linear" not in _ops(ep) and "aten::layer_norm" not in _ops(ep)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_an_entry_is_the_composite_kernel_and_computes_the_operator():
    table = graphcap.default_decompositions()
    x, w, b = torch.randn(2, 4), torch.randn(3, 4), torch.randn(3)
    torch.testing.assert_close(table[aten.linear.default](x, w, b), nn.functional.linear(x, w, b))
    # lstm's entry is torch's composite kernel run one layer at a time where eager drops out between
    # layers (torch's kernel skips that dropout); without dropout it is that kernel's result
    lstm = nn.LSTM(4, 3, num_layers=2, batch_first=True)
    h = (torch.zeros(2, 2, 3), torch.zeros(2, 2, 3))
    seq = torch.randn(2, 5, 4)
    got = table[aten.lstm.input](seq, list(h), list(lstm._flat_weights), True, 2, 0.0, False, False, True)
    want, (h_n, c_n) = lstm(seq, h)
    for g, w in zip(got, (want, h_n, c_n)):
        torch.testing.assert_close(g, w)


def test_item_kept_whole_after_torch_export_decomposed_something():
    """torch.export's run_decompositions removes aten.item's fake rule when it is done (it patches
    the rules of the composites it keeps, then removes each); graphcap's retrace that keeps item
    whole puts the rule back for itself and leaves the registry as it found it."""
    from torch._subclasses import fake_impls

    class Sine(torch.nn.Module):
        def forward(self, x):
            return x.sin()

    class ReadsAValue(torch.nn.Module):
        def forward(self, x, n):
            k = n.item()
            torch._check(k >= 1)
            return torch.zeros(k).sum() + x.sum()

    torch.export.export(Sine(), (torch.randn(2),)).run_decompositions()
    had_rule = torch.ops.aten.item.default in fake_impls.op_implementations_dict
    ep = graphcap.export(ReadsAValue(), (torch.randn(3), torch.tensor(2)))
    for table in ({}, None):
        decomposed = ep.run_decompositions(table)
        for k in (1, 4):
            x = torch.randn(3)
            torch.testing.assert_close(decomposed.module()(x, torch.tensor(k)), ReadsAValue()(x, torch.tensor(k)))
    assert (torch.ops.aten.item.default in fake_impls.op_implementations_dict) == had_rule
