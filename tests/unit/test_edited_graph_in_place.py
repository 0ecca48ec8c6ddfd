"""A program whose graph the user edited in place (``ep.graph_module.graph``: a new operator
node, a second getitem of one result) is decomposed as torch.export decomposes it: the new
nodes get their metadata from the nodes they read before the pass, so the decomposed program
passes verification and computes the edited graph's numbers."""
import operator

import torch

import graphcap
from graphcap import Dim


class SplitRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        a, b = torch.split(self.lin(x).relu(), [1, 2], dim=1)
        return a * 2, b


def _double_relu_and_reread(ep):
    """Insert ``mul(relu, 2.0)`` after the relu (no metadata), and read the first split result
    through a second getitem node."""
    g = ep.graph_module.graph
    relu = next(n for n in g.nodes if n.target == torch.ops.aten.relu.default)
    with g.inserting_after(relu):
        doubled = g.call_function(torch.ops.aten.mul.Tensor, (relu, 2.0))
    relu.replace_all_uses_with(doubled)
    doubled.args = (relu, 2.0)
    first = next(n for n in g.nodes if n.target is operator.getitem and n.args[1] == 0)
    with g.inserting_after(first):
        again = g.call_function(operator.getitem, first.args)
    next(iter(first.users)).replace_input_with(first, again)
    ep.graph_module.recompile()


def _expected(m, x):
    a, b = torch.split(m.lin(x).relu() * 2, [1, 2], dim=1)
    return a * 2, b


def test_run_decompositions_of_a_graph_edited_in_place():
    m = SplitRelu()
    ep = graphcap.export(m, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b")},))
    _double_relu_and_reread(ep)
    decomposed = ep.run_decompositions()
    decomposed.validate()
    for n in (1, 4, 7):
        x = torch.randn(n, 3)
        torch.testing.assert_close(decomposed.module()(x), _expected(m, x))
    reference = torch.export.export(m, (torch.randn(4, 3),), dynamic_shapes=({0: torch.export.Dim("b")},))
    _double_relu_and_reread(reference)
    x = torch.randn(5, 3)
    torch.testing.assert_close(decomposed.module()(x), reference.run_decompositions().module()(x))


def test_new_nodes_take_the_metadata_of_what_they_read():
    ep = graphcap.export(SplitRelu(), (torch.randn(4, 3),))
    _double_relu_and_reread(ep)
    decomposed = ep.run_decompositions()
    muls = [n for n in decomposed.graph.nodes if n.target == torch.ops.aten.mul.Tensor]
    assert muls and all(n.meta.get("nn_module_stack") for n in muls)
    getitems = [n for n in decomposed.graph.nodes if n.target is operator.getitem]
    assert len({(n.args[0], n.args[1]) for n in getitems}) == len(getitems)  # duplicates merged
