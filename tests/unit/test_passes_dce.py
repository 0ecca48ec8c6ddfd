"""Dead-code elimination removes unused pure nodes and keeps side effects."""
from __future__ import annotations

import torch

import graphcap
from graphcap.passes.dce import dce_pass, eliminate_dead_code, has_side_effect

aten = torch.ops.aten


class Dead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        unused = x * 3  # noqa: F841  dead
        self.count.add_(1)  # a mutation, used by nothing in the graph but the output
        return x + 1


def _graph_with_dead_nodes():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    dead_mul = graph.call_function(aten.mul.Tensor, (x, 3))
    graph.call_function(aten.neg.default, (dead_mul,))
    graph.call_function(aten._assert_async.msg, (x, "must hold"))
    graph.call_function(aten.add_.Tensor, (x, 1))
    kept = graph.call_function(aten.add.Tensor, (x, 1))
    graph.output((kept,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_removes_dead_chains_keeps_asserts_and_mutations():
    gm = _graph_with_dead_nodes()
    assert eliminate_dead_code(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.mul.Tensor not in targets and aten.neg.default not in targets
    assert aten._assert_async.msg in targets
    assert aten.add_.Tensor in targets
    assert aten.add.Tensor in targets
    assert not eliminate_dead_code(gm)  # nothing left to remove


def test_side_effect_classification():
    gm = _graph_with_dead_nodes()
    by_target = {n.target: n for n in gm.graph.nodes if n.op == "call_function"}
    assert has_side_effect(by_target[aten._assert_async.msg])
    assert has_side_effect(by_target[aten.add_.Tensor])
    assert not has_side_effect(by_target[aten.mul.Tensor])


def test_dce_on_training_ir_keeps_buffer_mutation():
    x = torch.randn(3)
    ep = graphcap.export(Dead(), (x,))
    ep = dce_pass(ep)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert aten.add_.Tensor in targets
    ep.validate()
    runnable = ep.module()
    runnable(x)
    assert runnable.count.item() == 1


def test_run_decompositions_drops_dead_code():
    ep = graphcap.export(Dead(), (torch.randn(3),)).run_decompositions()
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert aten.mul.Tensor not in targets
    assert all(n.users or n.op == "output" for n in ep.graph.nodes if n.op != "placeholder")
