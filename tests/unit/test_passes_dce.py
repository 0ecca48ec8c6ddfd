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


def _graph_module_with_dead_subgraph_node():
    sub_graph = torch.fx.Graph()
    y = sub_graph.placeholder("y")
    sub_graph.call_function(aten.mul.Tensor, (y, 2))  # dead
    sub_graph.output((sub_graph.call_function(aten.add.Tensor, (y, 1)),))
    root = torch.nn.Module()
    root.sub = torch.fx.GraphModule(torch.nn.Module(), sub_graph)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(aten.neg.default, (x,))  # dead
    graph.output((graph.call_module("sub", (x,)),))
    return torch.fx.GraphModule(root, graph)


def test_code_left_to_the_caller_is_only_the_top_module():
    gm = _graph_module_with_dead_subgraph_node()
    top_code = gm.code
    assert eliminate_dead_code(gm, generate_code=False)
    assert "neg" not in str(gm.graph) and gm.code == top_code  # the caller regenerates the top module
    assert "mul" not in gm.sub.code  # a subgraph's code is regenerated at once
    gm.recompile()
    assert "neg" not in gm.code and torch.equal(gm(torch.ones(2))[0][0], torch.full((2,), 2.0))


class Attention(torch.nn.Module):
    def forward(self, q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def test_decomposed_program_module_is_plain_and_its_code_current():
    from torch.fx._lazy_graph_module import _LazyGraphModule
    q = torch.randn(1, 2, 4, 8)
    ep = graphcap.export(Attention(), (q,)).run_decompositions()
    gm = ep.graph_module
    assert type(gm).__name__ == "GraphModule" and not isinstance(gm, _LazyGraphModule)
    code = gm.code
    gm.recompile()
    assert gm.code == code  # generated from the final graph (dead nodes already gone)
    assert not eliminate_dead_code(gm)
    torch.testing.assert_close(ep.module()(q), Attention()(q))
