"""Exporting a make_fx or symbolic_trace graph: every operator's module stack starts at the root.

In any program, each operator's ``nn_module_stack`` names the exported module's own forward
first (``L__self__``), then the submodule calls around it. A graph from make_fx records no
stack and one from symbolic_trace records only submodule calls under their paths (``l``);
the program fills in the root and torch.export's keys (``L__self__l``), so tools that walk the
stacks (unflatten, partitioners grouping by module) read it as any other program.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import graphcap


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.inner(x).sigmoid()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
        self.block = Block()

    def forward(self, x):
        return self.block(self.l(x).relu()) + 1


def _graphs():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 3)
    return model, x, {"make_fx": make_fx(model)(x), "symbolic_trace": torch.fx.symbolic_trace(model)}


@pytest.mark.parametrize("kind", ["make_fx", "symbolic_trace"])
def test_every_operator_starts_at_the_root(kind):
    model, x, graphs = _graphs()
    gm = graphs[kind]
    ep = graphcap.export(gm, (x,))
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert calls
    for node in calls:
        stack = node.meta["nn_module_stack"]
        first_key, (first_path, first_cls) = next(iter(stack.items()))
        assert (first_key, first_path) == ("L__self__", "")
        assert first_cls.endswith(type(gm).__qualname__)
        assert all(key.startswith("L__self__") for key in stack)
    torch.testing.assert_close(ep.module()(x), model(x))


def test_symbolic_trace_submodule_calls_keep_their_paths_under_torch_keys():
    model, x, graphs = _graphs()
    ep = graphcap.export(graphs["symbolic_trace"], (x,))
    paths = {tuple(path for path, _ in n.meta["nn_module_stack"].values())
             for n in ep.graph.nodes if n.op == "call_function"}
    assert ("", "l") in paths and ("", "block", "block.inner") in paths
    keys = {k for n in ep.graph.nodes if n.op == "call_function" for k in n.meta["nn_module_stack"]}
    assert {"L__self__", "L__self__l", "L__self__block", "L__self__block.inner"} <= keys


def test_a_programs_module_exported_again_keeps_its_stacks():
    model, x, _ = _graphs()
    ep = graphcap.export(model, (x,))
    again = graphcap.export(ep.module(), (x,))
    before = [n.meta["nn_module_stack"] for n in ep.graph.nodes if n.op == "call_function"]
    after = [n.meta["nn_module_stack"] for n in again.graph.nodes if n.op == "call_function"]
    assert before == after
