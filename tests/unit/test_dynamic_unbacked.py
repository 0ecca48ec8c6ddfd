"""Data-dependent values: unbacked symbols, torch._check hints, runtime asserts
in the graph, and the error for a branch on data that cannot be decided."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim


class ZerosOfItem(torch.nn.Module):
    def forward(self, x):
        a = x.item()
        torch._check(a >= 0)
        torch._check(a <= 5)
        return torch.zeros((a, 5))


def _asserts(ep):
    return [n for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]


def test_item_becomes_an_unbacked_symbol_bounded_by_checks():
    ep = graphcap.export(ZerosOfItem(), (torch.tensor(4),))
    assert {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()} == {"u0": (0, 5)}
    assert len(_asserts(ep)) == 2
    assert ep.module()(torch.tensor(2)).shape == (2, 5)
    with pytest.raises(RuntimeError, match="u0 <= 5"):
        ep.module()(torch.tensor(7))
    with pytest.raises(RuntimeError, match="u0 >= 0"):
        ep.module()(torch.tensor(-1))


def test_check_is_size_and_tolist():
    class Grid(torch.nn.Module):
        def forward(self, sizes):
            a, b = sizes.tolist()
            torch._check_is_size(a)
            torch._check(b >= 1)
            torch._check(b <= 4)
            return torch.ones(a, b)

    class Take(torch.nn.Module):
        def forward(self, n, x):
            k = n.item()
            torch._check_is_size(k)
            torch._check(k <= x.shape[0])
            return x.narrow(0, 0, k) * 2

    ep = graphcap.export(Grid(), (torch.tensor([2, 3]),))
    assert ep.module()(torch.tensor([5, 1])).shape == (5, 1)
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        ep.module()(torch.tensor([5, 6]))

    x = torch.randn(6, 3)
    ep = graphcap.export(Take(), (torch.tensor(4), x), dynamic_shapes=(None, {0: Dim("n", max=32)}))
    torch.testing.assert_close(ep.module()(torch.tensor(2), x), x[:2] * 2)
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        ep.module()(torch.tensor(9), x)


def test_nonzero_shape_is_unbacked_with_a_range():
    class NZ(torch.nn.Module):
        def forward(self, x):
            return x.nonzero()

    ep = graphcap.export(NZ(), (torch.tensor([0, 1, 2, 0]),))
    ep.validate()  # every symbol in a shape has a range
    (sym, vr), = ep.range_constraints.items()
    assert str(sym).startswith("u") and int(vr.lower) == 0
    out = ep.module()(torch.tensor([3, 0, 1, 1]))
    torch.testing.assert_close(out, torch.tensor([[0], [2], [3]]))


def test_constrain_as_value_decides_the_branch():
    class Value(torch.nn.Module):
        def forward(self, x, y):
            a = x.item()
            torch._check(a >= 0)
            torch._check(a <= 5)
            if a < 6:
                return y.sin()
            return y.cos()

    y = torch.randn(5, 5)
    ep = graphcap.export(Value(), (torch.tensor(4), y))
    torch.testing.assert_close(ep.module()(torch.tensor(1), y), y.sin())
    with pytest.raises(RuntimeError, match="u0 <= 5"):
        ep.module()(torch.tensor(8), y)


def test_undecidable_data_branch_names_the_line_and_the_fix():
    class Data(torch.nn.Module):
        def forward(self, x):
            if x.sum().item() > 0:
                return x + 1
            return x - 1

    with pytest.raises(graphcap.UnsupportedError) as info:
        graphcap.export(Data(), (torch.tensor([0, 1, 2]),))
    msg = str(info.value)
    assert "whether x.sum().item() > 0" in msg  # the condition as the user wrote it
    assert "if x.sum().item() > 0" in msg  # the user's source line
    # the fix names the value read on the line (reading it again gives a new value), never u0
    fix = info.value.fix
    assert "value = x.sum().item()" in fix and "torch._check(value > 0)" in fix and "torch.cond" in fix


def test_size_arithmetic_and_symint_outputs_are_recorded():
    class Sizes(torch.nn.Module):
        def forward(self, x):
            n = x.shape[0] * 2 + 1
            return x.new_zeros(n), x.shape[1] + 1

    ep = graphcap.export(Sizes(), (torch.randn(3, 2),), dynamic_shapes=({0: Dim("a"), 1: Dim("b")},))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.sym_size.int in targets
    out, width = ep.module()(torch.randn(5, 7))
    assert out.shape == (11,) and width == 8
