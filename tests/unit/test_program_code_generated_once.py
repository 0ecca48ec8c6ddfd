"""The program's Python code is generated once per export (torch_private.fx.graph_module_with_code_deferred).

Lifting builds the program's module with its code deferred; the passes after it (runtime
asserts, conversion asserts) edit the graph and recompile, which only marks the code stale;
``generate_code`` makes it a plain ``GraphModule`` and generates the code once, from the final
graph. The program must be the one the eager construction gives: the same graph, code,
metadata, class, and a module that behaves as a plain graph module (copies, pickles, runs).
"""
from __future__ import annotations

import copy
import pickle

import torch
from torch import nn

import graphcap
from block_reuse_compare import program_facts
from graphcap.torch_private import fx as fx_private


class Converting(nn.Module):
    """A runtime assert (a data-dependent size) and a conversion assert (``.to``)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[1])
        h = self.proj(x).to(torch.float64)
        return h[:, :k].sum(-1).to(torch.float32)


def _export():
    torch.manual_seed(0)
    model = Converting().eval()
    args = (torch.randn(2, 6, 8), torch.tensor(3))
    return model, args, graphcap.export(model, args, dynamic_shapes=({1: graphcap.Dim("s", min=2, max=32)}, None))


def _eager_graph_module(root, graph, class_name="GraphModule"):
    return torch.fx.GraphModule(root, graph, class_name=class_name)


def _code_generations(monkeypatch) -> list:
    made = []
    original = torch.fx.Graph.python_code

    def counting(self, *a, **k):
        made.append(len(self.nodes))
        return original(self, *a, **k)
    monkeypatch.setattr(torch.fx.Graph, "python_code", counting)
    return made


def test_code_generated_once_gives_the_eager_program(monkeypatch):
    with monkeypatch.context() as m:
        eager_made = _code_generations(m)
        m.setattr(fx_private, "graph_module_with_code_deferred", _eager_graph_module)
        _, _, eager = _export()
    with monkeypatch.context() as m:
        deferred_made = _code_generations(m)
        model, args, deferred = _export()
    # (sizes of the graphs whose code was generated: eagerly, one per pass that grew the graph)
    assert len(deferred_made) == 1 and len(eager_made) >= 3, (deferred_made, eager_made)
    assert deferred_made[0] == eager_made[-1]
    assert program_facts(deferred) == program_facts(eager)
    gm = deferred.graph_module
    assert gm.code == eager.graph_module.code
    assert "_assert_scalar" in gm.code and "_assert_tensor_metadata" in gm.code  # the passes' nodes are in it
    assert type(gm).__mro__[1] is torch.fx.GraphModule and type(gm).__name__ == type(eager.graph_module).__name__
    assert gm.print_readable(print_output=False) == eager.graph_module.print_readable(print_output=False)
    torch.testing.assert_close(deferred.module()(*args), model(*args))
    assert copy.deepcopy(gm).code == gm.code
    assert _pickled(gm) == _pickled(eager.graph_module)  # the same outcome, whatever it is


def _pickled(gm) -> str:
    try:
        return pickle.loads(pickle.dumps(gm)).code
    except Exception as e:
        return type(e).__name__


def test_a_plain_graph_module_is_left_as_it_is():
    gm = torch.fx.symbolic_trace(nn.Linear(2, 2))
    cls, code = type(gm), gm.code
    fx_private.generate_code(gm)
    assert type(gm) is cls and gm.code == code


def test_deferred_code_is_generated_when_first_used():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    traced = torch.fx.symbolic_trace(seq)
    gm = fx_private.graph_module_with_code_deferred(traced, traced.graph)
    node = next(n for n in gm.graph.nodes if n.op == "call_module" and n.target == "1")
    with gm.graph.inserting_after(node):
        extra = gm.graph.call_function(torch.neg, (node,))
    node.replace_all_uses_with(extra, delete_user_cb=lambda u: u is not extra)
    gm.recompile()
    x = torch.randn(3, 2)
    torch.testing.assert_close(gm(x), -torch.relu(seq[0](x)))
    fx_private.generate_code(gm)
    assert "torch.neg" in gm.code
    torch.testing.assert_close(gm(x), -torch.relu(seq[0](x)))
