"""Nodes inside control-flow subgraphs carry the same metadata as top-level
ones: the torch function the user called (``torch_fn``) and a
``source_fn_stack`` of names, never of operator objects."""
from __future__ import annotations

import torch

import graphcap


class Sub(torch.nn.Module):
    def forward(self, x):
        return x.cos()


class CondMethods(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.subm = Sub()

    def bar(self, x):
        return x.sin()

    def forward(self, x):
        return torch.cond(x.sum() <= 2, self.subm.forward, self.bar, [x])


def _branch_nodes(ep):
    for name in ("true_graph_0", "false_graph_0"):
        yield from (n for n in getattr(ep.graph_module, name).graph.nodes if n.op == "call_function")


def test_branch_nodes_keep_torch_fn_and_a_plain_source_fn_stack(tmp_path):
    ep = graphcap.export(CondMethods(), (torch.randn(1, 3, 3, 3),))
    nodes = {n.name: n for n in _branch_nodes(ep)}
    assert nodes["cos"].meta["torch_fn"] == ("cos_1", "method_descriptor.cos")
    assert nodes["sin"].meta["torch_fn"] == ("sin_1", "method_descriptor.sin")
    for node in nodes.values():
        stack = node.meta["source_fn_stack"]
        assert stack and all(isinstance(a, str) and isinstance(b, str) for a, b in stack)
        assert "stack_trace" in node.meta and "nn_module_stack" in node.meta
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = {n.name: n for n in _branch_nodes(graphcap.load(tmp_path / "p.pt2"))}
    assert loaded["cos"].meta["source_fn_stack"] == nodes["cos"].meta["source_fn_stack"]
    assert loaded["cos"].meta["torch_fn"] == ("cos_1", "method_descriptor.cos")
