"""The verifier accepts the constructs torch.export's IR allows, and still fires on real violations."""
from __future__ import annotations

import operator

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from graphcap import ir_checks


def _rules(ep) -> set[str]:
    return {rule for rule, _, _ in ir_checks.violations(ep)}


def test_symint_arithmetic_shifts_and_sym_functions_are_captured_and_verified():
    class M(torch.nn.Module):
        def forward(self, x):
            n = x.shape[0]
            size = (n << 1) + (n >> 1) + n // 3 + n % 3 + abs(-n)
            return x.new_zeros(size), torch.sym_max(n, 2), torch.sym_min(n, 3), n ** 2

    ep = graphcap.export(M(), (torch.randn(8),), dynamic_shapes=({0: graphcap.Dim("n")},))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert {operator.lshift, operator.rshift, torch.sym_max, torch.sym_min, operator.pow} <= targets
    assert ir_checks.violations(ep) == []
    for size in (5, 6, 11):
        x = torch.randn(size)
        got, want = ep.module()(x), M()(x)
        assert got[0].shape == want[0].shape and tuple(got[1:]) == tuple(want[1:])


def test_vmap_inside_forward_is_recorded_as_predispatch_calls():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.vmap(lambda a, b: (a * b + 1).sum(dim=0))(x, y).sum(dim=0)

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    ep = graphcap.export(M(), (x, y))
    names = {getattr(n.target, "__name__", "") for n in ep.graph.nodes if n.op == "call_function"}
    assert {"_vmap_increment_nesting", "_add_batch_dim", "_remove_batch_dim"} <= names
    # the tracer's unused detach of batched tensors is not left behind
    assert torch.ops.aten.detach.default not in {n.target for n in ep.graph.nodes}
    torch.testing.assert_close(ep.module()(x, y), M()(x, y))


def test_treespec_get_attr_is_accepted_but_tensor_get_attr_is_not():
    ep = graphcap.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    gm = ep.graph_module
    first = next(n for n in gm.graph.nodes if n.op == "call_function")
    gm.spec0 = pytree.tree_flatten((1, 2))[1]
    with gm.graph.inserting_before(first):
        spec_node = gm.graph.get_attr("spec0")
    spec_node.meta["val"] = None
    assert "no-state-get-attr" not in _rules(ep)
    gm.register_buffer("stray", torch.ones(1))
    with gm.graph.inserting_before(first):
        gm.graph.get_attr("stray").meta["val"] = None
    assert "no-state-get-attr" in _rules(ep)


def test_a_fake_tensor_among_the_constants_is_reported():
    ep = graphcap.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    fake = next(n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder")
    ep.constants["escaped"] = fake
    with pytest.raises(graphcap.VerificationError, match=r"\[state-is-real\] node escaped"):
        ep.validate()


def test_python_callables_outside_the_allowed_set_still_fail():
    ep = graphcap.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = operator.setitem
    assert "known-targets" in _rules(ep)
