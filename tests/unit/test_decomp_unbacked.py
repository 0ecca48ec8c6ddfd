"""run_decompositions keeps the invariants of programs with data-read values and None inputs."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import ir_checks


def _asserts(ep) -> int:
    return ep.graph_module.code.count("torch.ops.aten._assert_scalar.default")


def test_retraced_item_symbols_get_ranges_and_asserts_stay_once():
    class M(torch.nn.Module):
        def forward(self, x, y):
            n = y.item()
            torch._check(n >= 3)
            torch._check(n <= 6)
            return x[:n]

    ep = graphcap.export(M(), (torch.randn(10), torch.tensor(6)))
    dec = ep.run_decompositions()
    assert ir_checks.violations(dec) == []
    assert _asserts(ep) == _asserts(dec) == 2
    node = next(n for n in dec.graph.nodes if n.target is torch.ops.aten._local_scalar_dense.default)
    symbol = node.meta["val"].node.expr
    vr = {str(k): v for k, v in dec.range_constraints.items()}[str(symbol)]
    assert (int(vr.lower), int(vr.upper)) == (3, 6)
    torch.testing.assert_close(dec.module()(torch.arange(10.0), torch.tensor(4)), torch.arange(4.0))
    with pytest.raises(RuntimeError, match=r"Runtime assertion failed for expression u\d+ >= 3"):
        dec.module()(torch.randn(10), torch.tensor(2))


def test_data_dependent_output_size_after_decomposition():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.where.default(x > 0)

    ep = graphcap.export(M(), (torch.randn(2, 3),),
                         dynamic_shapes=({0: graphcap.Dim.AUTO, 1: graphcap.Dim.AUTO},))
    dec = ep.run_decompositions({})
    assert ir_checks.violations(dec) == []
    x = torch.tensor([[1.0, -1.0, 2.0], [-3.0, 4.0, 5.0], [0.0, 1.0, -1.0]])
    for got, want in zip(dec.module()(x), M()(x)):
        torch.testing.assert_close(got, want)


def test_none_input_keeps_its_value_after_decomposition():
    class M(torch.nn.Module):
        def forward(self, x, y=None):
            return x + 1 if y is None else x + y

    ep = graphcap.export(M(), (torch.randn(3),), {"y": None})
    dec = ep.run_decompositions()
    y = next(n for n in dec.graph.nodes if n.op == "placeholder" and n.name == "y")
    assert "val" in y.meta and y.meta["val"] is None
    assert ir_checks.violations(dec) == []


def test_a_symbol_without_a_range_is_still_reported():
    class M(torch.nn.Module):
        def forward(self, y):
            return torch.zeros(y.item())

    dec = graphcap.export(M(), (torch.tensor(3),)).run_decompositions()
    dec.range_constraints.clear()
    rules = {rule for rule, _, _ in ir_checks.violations(dec)}
    assert "symbols-have-ranges" in rules


def test_where_of_one_argument_leaves_torchs_fake_rules_as_they_were():
    # torch 2.10 / 2.11 lack a fake rule for aten.where.default; graphcap's own is there only while
    # a retrace runs (torch_private.fake.one_argument_where_decomposed)
    from torch._subclasses import fake_impls
    before = dict(fake_impls.op_implementations_dict)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.where.default(x > 0)

    dec = graphcap.export(M(), (torch.randn(4, 2),)).run_decompositions({})
    assert fake_impls.op_implementations_dict == before
    x = torch.tensor([[1.0, -1.0], [0.0, 2.0], [3.0, 3.0], [-1.0, 0.0]])
    for got, want in zip(dec.module()(x), M()(x)):
        torch.testing.assert_close(got, want)
