"""``ep.validate()`` after a user (or a pass) edited the program's graph in place with ``graph.call_function``:
a new operator node has no source line or module stack of its own, which torch.export's verifier does
not ask for; graphcap's validate gives it those of the node it reads and accepts the program, as
torch's does. What torch refuses (a node without ``val``) stays refused, and a program graphcap's
own stages build is still checked as it was built."""
from __future__ import annotations

import pytest
import torch
from torch._export.verifier import SpecViolationError

import graphcap
from graphcap import ir_checks


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu() + x


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block()

    def forward(self, x):
        return self.block(x) * 2


def _insert_after(ep, target, new_target, copy_val=True):
    node = next(n for n in ep.graph.nodes if n.target == target)
    with ep.graph.inserting_after(node):
        new = ep.graph.call_function(new_target, (node,))
    if copy_val:
        new.meta["val"] = node.meta["val"]
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)
    ep.graph_module.recompile()
    return node, new


@pytest.mark.parametrize("exporter", [graphcap.export, torch.export.export], ids=["graphcap", "torch"])
def test_inserted_node_validates_and_runs(exporter):
    x = torch.randn(3, 4)
    model = _Outer()
    ep = exporter(model, (x,))
    relu, neg = _insert_after(ep, torch.ops.aten.relu.default, torch.ops.aten.neg.default)
    ep.validate()
    if exporter is graphcap.export:
        # the new node reads relu inside block: it is placed there, at relu's line
        assert neg.meta["nn_module_stack"] == relu.meta["nn_module_stack"]
        assert neg.meta["stack_trace"] == relu.meta["stack_trace"]
        assert ir_checks.violations(ep) == []
    expected = -model.block.lin(x).relu() + x
    assert torch.allclose(ep.module()(x), expected * 2)


def test_decomposed_program_edit_then_validate_and_rebuild():
    x = torch.randn(3, 4)
    model = _Outer()
    ep = graphcap.export(model, (x,)).run_decompositions()
    _insert_after(ep, torch.ops.aten.relu.default, torch.ops.aten.exp.default)
    ep.validate()
    again = ep._update(ep.graph_module, ep.graph_signature)
    expected = (model.block.lin(x).relu().exp() + x) * 2
    assert torch.allclose(again.module()(x), expected)
    assert torch.allclose(ep.module()(x), expected)


def test_node_without_val_still_refused_as_torch_refuses_it():
    x = torch.randn(3, 4)
    for ep in (graphcap.export(_Outer(), (x,)), torch.export.export(_Outer(), (x,))):
        _insert_after(ep, torch.ops.aten.relu.default, torch.ops.aten.neg.default, copy_val=False)
        with pytest.raises(SpecViolationError, match="missing val field"):
            ep.validate()


def test_construction_still_names_a_node_without_source_metadata():
    ep = graphcap.export(_Outer(), (torch.randn(3, 4),))
    relu = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.relu.default)
    del relu.meta["nn_module_stack"]
    with pytest.raises(graphcap.VerificationError, match=r"\[operator-metadata\] node relu"):
        graphcap.ExportedProgram(ep.graph_module, ep.graph_signature, ep.state_dict, ep.range_constraints,
                                 ep.module_call_graph, constants=ep.constants)
