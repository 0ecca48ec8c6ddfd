"""Exporting a ``torch.fx.symbolic_trace`` graph module keeps the module path its
``call_module`` / ``call_method`` nodes record (symbolic_trace puts ``nn_module_stack``
there, not on ``call_function`` nodes), and a node whose source has no stack trace names no
frame of graphcap's own replay, as torch.export's program does."""
import os

import torch

import graphcap


class Sub(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x).relu()


class Top(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        return self.sub(x) * 2


def _paths(ep):
    return {n.target.__name__.split(".")[0]: [fqn for fqn, _ in (n.meta.get("nn_module_stack") or {}).values()]
            for n in ep.graph.nodes if n.op == "call_function"}


def test_symbolic_trace_module_paths_survive_export():
    traced = torch.fx.symbolic_trace(Top())
    x = torch.randn(4, 3)
    ep = graphcap.export(traced, (x,))
    paths = _paths(ep)
    assert paths["linear"][-2:] == ["sub", "sub.lin"]
    assert paths["relu"][-1:] == ["sub"]
    # torch's program has the same submodule calls; graphcap's also starts every stack at the
    # root, as any program's stacks do (test_graph_module_export_root_stack.py)
    reference = _paths(torch.export.export(traced, (x,)))
    for op in ("linear", "relu"):
        assert paths[op] == [""] + [p for p in reference[op] if p != ""]
    torch.testing.assert_close(ep.module()(x), traced(x))


def test_no_stack_trace_points_into_graphcap():
    traced = torch.fx.symbolic_trace(Top())
    ep = graphcap.export(traced, (torch.randn(4, 3),))
    for node in ep.graph.nodes:
        assert os.path.dirname(graphcap.__file__) not in (node.meta.get("stack_trace") or ""), node.name
