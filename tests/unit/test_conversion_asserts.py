"""A traced ``Tensor.to`` keeps the meaning it was traced with: its input's
dtype/device/layout are asserted in the graph right before it, as torch.export
records it."""
from __future__ import annotations

import pytest
import torch

import graphcap

aten = torch.ops.aten


def _ops(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


class ToFloat(torch.nn.Module):
    def forward(self, x):
        return x.float() * 2


def test_to_is_preceded_by_an_assert_of_its_input_metadata():
    ep = graphcap.export(ToFloat(), (torch.tensor([1, 2], dtype=torch.int32),))
    assert _ops(ep) == [aten._assert_tensor_metadata.default, aten.to.dtype, aten.mul.Tensor]
    check = next(n for n in ep.graph.nodes if n.target is aten._assert_tensor_metadata.default)
    assert check.kwargs == {"dtype": torch.int32, "device": torch.device("cpu"), "layout": torch.strided}
    assert check.args[0].name == "x" and "stack_trace" in check.meta
    torch.testing.assert_close(ep.module()(torch.tensor([3, 4], dtype=torch.int32)), torch.tensor([6.0, 8.0]))


def test_the_assert_survives_decomposition_and_save_load(tmp_path):
    ep = graphcap.export(ToFloat(), (torch.tensor([1, 2], dtype=torch.int32),))
    decomposed = ep.run_decompositions({})
    assert _ops(decomposed)[0] is aten._assert_tensor_metadata.default
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    assert _ops(loaded)[0] is aten._assert_tensor_metadata.default
    torch.testing.assert_close(loaded.module()(torch.tensor([1, 5], dtype=torch.int32)), torch.tensor([2.0, 10.0]))


def test_the_assert_refuses_an_intermediate_of_another_dtype_when_run_directly():
    ep = graphcap.export(ToFloat(), (torch.tensor([1, 2], dtype=torch.int32),))
    with pytest.raises(RuntimeError, match="dtype mismatch"):
        ep.graph_module(torch.tensor([1.0]))  # bypassing module()'s input checks


def test_one_assert_per_conversion_and_none_without_conversions():
    class Two(torch.nn.Module):
        def forward(self, x):
            return x.to(torch.float64) + x.to(torch.float16).to(torch.float64)

    ep = graphcap.export(Two(), (torch.randn(3),))
    assert _ops(ep).count(aten._assert_tensor_metadata.default) == 3
    ep = graphcap.export(torch.nn.ReLU(), (torch.randn(3),))
    assert aten._assert_tensor_metadata.default not in _ops(ep)
