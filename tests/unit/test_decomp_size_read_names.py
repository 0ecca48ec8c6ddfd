"""run_decompositions keeps the names of the program's reads of an input's size.

A size read (``aten.sym_size.int`` of an input) is no operator to decompose: the
decomposed program still reads the same size, and a user or a tool that found it by
name before decomposing (``sym_size_int_1``, or a name they gave it) finds it under
that name after. Sizes the decomposition newly reads get fresh names that clash with
none of the kept ones.
"""
from __future__ import annotations

import torch
from torch.export import Dim

import graphcap

aten = torch.ops.aten


def _size_reads(ep) -> dict[tuple[str, int], str]:
    return {(n.args[0].name, n.args[1]): n.name
            for n in ep.graph.find_nodes(op="call_function", target=aten.sym_size.int)}


class TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        b, t = x.shape[0], y.shape[1]
        return x.reshape(b, -1).sum(1) + y.new_zeros(b, t).sum(1) + t


def _program():
    dims = {"x": {0: Dim("b", min=2, max=64), 1: Dim("w", min=2, max=64)},
            "y": {0: Dim("b", min=2, max=64), 1: Dim("t", min=2, max=64)}}
    return graphcap.export(TwoInputs(), (torch.randn(4, 3), torch.randn(4, 5)), dynamic_shapes=dims)


def test_size_reads_keep_the_names_they_had():
    ep = _program()
    before = _size_reads(ep)
    assert before == {("x", 0): "sym_size_int_2", ("y", 1): "sym_size_int_4"}
    assert _size_reads(ep.run_decompositions()) == before


def test_names_a_user_gave_to_size_reads_survive_decomposition():
    ep = _program()
    reads = ep.graph.find_nodes(op="call_function", target=aten.sym_size.int)
    given = {}
    for i, node in enumerate(reads):
        node.name = f"size_{i}"
        given[(node.args[0].name, node.args[1])] = node.name
    ep.graph_module.recompile()
    decomposed = ep.run_decompositions()
    kept = {k: v for k, v in _size_reads(decomposed).items() if k in given}
    assert kept == {k: v for k, v in given.items() if k in kept} and kept
    names = [n.name for n in decomposed.graph.nodes]
    assert len(names) == len(set(names))
    x, y = torch.randn(7, 9), torch.randn(7, 3)
    torch.testing.assert_close(decomposed.module()(x, y), TwoInputs()(x, y))


def test_names_the_retrace_would_hand_out_the_other_way_round_are_each_kept():
    """The retrace names its size reads sym_size_int, sym_size_int_1 in the order it meets them;
    a program whose first read is named sym_size_int_1 and second sym_size_int keeps both."""
    ep = _program()
    first, second = ep.graph.find_nodes(op="call_function", target=aten.sym_size.int)
    first.name, second.name = "swap", "sym_size_int"
    first.name = "sym_size_int_1"
    ep.graph_module.recompile()
    assert _size_reads(ep) == {("x", 0): "sym_size_int_1", ("y", 1): "sym_size_int"}
    decomposed = ep.run_decompositions()
    assert _size_reads(decomposed) == {("x", 0): "sym_size_int_1", ("y", 1): "sym_size_int"}
    x, y = torch.randn(3, 2), torch.randn(3, 6)
    torch.testing.assert_close(decomposed.module()(x, y), TwoInputs()(x, y))
