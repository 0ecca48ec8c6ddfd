"""Inputs, outputs and the calling convention (the audit of 2026-11-27, docs/torch-suite.md):
inputs that are one tensor or share memory, the strict front end's results, how ``module()``
binds a call to the exported arguments and how it words a refusal."""
from __future__ import annotations

import pytest
import torch

import graphcap
from conftest import assert_same_outputs, save_load

MODES = [pytest.param(False, id="non-strict"), pytest.param(True, id="strict")]


class Product(torch.nn.Module):
    def forward(self, a, b):
        return a * b + b


class NestedSame(torch.nn.Module):
    def forward(self, xs, d, *, k):
        return xs[0] - xs[1] * d["w"] + k


@pytest.mark.parametrize("strict", MODES)
def test_one_tensor_passed_twice_is_two_inputs_of_the_program(strict):
    t = torch.randn(3)
    ep = graphcap.export(Product(), (t, t), strict=strict)
    a, b = torch.randn(3), torch.randn(3)
    for program in (ep, ep.run_decompositions(), save_load(ep)):
        assert_same_outputs(Product()(a, b), program.module()(a, b))
        assert_same_outputs(Product()(t, t), program.module()(t, t))
    mul = next(n for n in ep.graph.nodes if n.op == "call_function" and "mul" in str(n.target))
    assert [x.name for x in mul.args] == ["a", "b"]


@pytest.mark.parametrize("strict", MODES)
def test_one_tensor_in_three_places_of_nested_inputs_and_a_keyword(strict):
    t = torch.randn(2, 3)
    ep = graphcap.export(NestedSame(), ([t, t], {"w": t}), {"k": t}, strict=strict)
    args = ([torch.randn(2, 3), torch.randn(2, 3)], {"w": torch.randn(2, 3)})
    k = torch.randn(2, 3)
    assert_same_outputs(NestedSame()(*args, k=k), ep.module()(*args, k=k))
    assert len(ep.graph_signature.user_inputs) == 4


def test_one_tensor_twice_with_a_dynamic_dim():
    t = torch.randn(4)
    b = graphcap.Dim("b", min=2, max=16)
    ep = graphcap.export(Product(), (t, t), dynamic_shapes=({0: b}, {0: b}))
    x, y = torch.randn(7), torch.randn(7)
    assert_same_outputs(Product()(x, y), ep.module()(x, y))


class WriteFirst(torch.nn.Module):
    def forward(self, a, b):
        a.add_(1)
        return a + b


@pytest.mark.parametrize("strict", MODES)
def test_a_written_input_sharing_memory_with_another_is_refused_by_the_decomposed_program(strict):
    t = torch.randn(4)
    ep = graphcap.export(WriteFirst(), (t, t), strict=strict)
    # the training IR writes in place, as eager does: aliased inputs give eager's numbers
    x = torch.randn(4)
    want_x = x.clone()
    want = WriteFirst()(want_x, want_x)
    got = ep.module()(x, x)
    assert_same_outputs(want, got)
    assert torch.equal(x, want_x)
    decomposed = ep.run_decompositions().module()
    y = torch.randn(5)
    for a, b, base in ((x, x, x), (y[:4], y[1:], y), (y[1:], y[:4], y)):
        before = base.clone()
        with pytest.raises(graphcap.RuntimeInputError, match=r"Input at \*args\[0\] shares memory") as info:
            decomposed(a, b)
        assert "*args[1]" in str(info.value) and "clone()" in str(info.value)
        assert torch.equal(base, before)  # refused before computing
    # separate tensors, and disjoint parts of one tensor, are accepted
    a, b = torch.randn(4), torch.randn(4)
    assert_same_outputs(WriteFirst()(a.clone(), b), decomposed(a, b))
    whole = torch.randn(8)
    want_whole = whole.clone()
    want = WriteFirst()(want_whole[:4], want_whole[4:])
    assert_same_outputs(want, decomposed(whole[:4], whole[4:]))
    assert torch.equal(whole, want_whole)


def test_an_input_read_only_may_share_memory_with_anything():
    class ReadTwo(torch.nn.Module):
        def forward(self, a, b):
            return a.sin() + b

    x = torch.randn(5)
    ep = graphcap.export(ReadTwo(), (x, x)).run_decompositions()
    assert_same_outputs(ReadTwo()(x, x[::1]), ep.module()(x, x[::1]))
