"""``ep.validate()`` on hand-edited programs: graphcap refuses what torch's verifier refuses, with an
error that is torch's ``SpecViolationError`` and states the problem with torch's key phrase (what
code written against torch matches on), beside graphcap's rule name and node. Each edit is applied
to graphcap's program and to torch.export's, and torch's verifier is run on both."""
from __future__ import annotations

import operator

import pytest
import torch
from torch._export.verifier import SpecViolationError

import graphcap
from graphcap.signature import InputKind


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.offset = torch.arange(3.0)

    def forward(self, x):
        return self.lin(x) + self.scratch + self.offset


def _first(ep, target):
    return next(n for n in ep.graph.nodes if n.op == "call_function" and n.target == target)


def _extra_placeholder(ep):
    first = next(n for n in ep.graph.nodes if n.op == "placeholder")
    with ep.graph.inserting_before(first):
        p = ep.graph.placeholder("extra")
    p.meta["val"] = first.meta["val"]


def _drop_val(ep):
    del _first(ep, torch.ops.aten.add.Tensor).meta["val"]


def _lose_constant(ep):
    specs = ep.graph_signature.input_specs
    i = next(i for i, s in enumerate(specs) if s.kind == InputKind.CONSTANT_TENSOR)
    specs[i] = type(specs[i])(kind=InputKind.CONSTANT_TENSOR, arg=specs[i].arg, target="nowhere")


def _non_persistent_into_state(ep):
    ep.state_dict["scratch"] = ep.constants["scratch"]


def _call_module(ep):
    gm = ep.graph_module
    gm.add_module("act", torch.nn.ReLU())
    add = _first(ep, torch.ops.aten.add.Tensor)
    with ep.graph.inserting_after(add):
        call = ep.graph.call_module("act", (add,))
    call.meta["val"] = add.meta["val"]
    gm.recompile()


def _python_function(ep):
    _first(ep, torch.ops.aten.add.Tensor).target = torch.add


def _state_get_attr(ep):
    gm = ep.graph_module
    gm.register_buffer("stray", torch.ones(3))
    add = _first(ep, torch.ops.aten.add.Tensor)
    with ep.graph.inserting_before(add):
        attr = ep.graph.get_attr("stray")
    attr.meta["val"] = add.args[1].meta["val"]
    add.args = (add.args[0], attr)
    gm.recompile()


_EDITS = [
    (_extra_placeholder, r"Number of graph inputs \(\d+\)"),
    (_drop_val, r"is missing val field"),
    (_lose_constant, r"nowhere'? is not in the constants dictionary"),
    (_non_persistent_into_state, r"Non-persistent buffer '?scratch'? is in the state dict, it should not be"),
    (_call_module, r"call_module is not valid"),
    (_python_function, r"is not an allowed operator type"),
    (_state_get_attr, r"Invalid get_attr type"),
]


@pytest.mark.parametrize("edit,phrase", _EDITS, ids=[e.__name__.strip("_") for e, _ in _EDITS])
def test_edit_refused_as_torch_refuses_it(edit, phrase):
    x = torch.randn(2, 3)
    ours, theirs = graphcap.export(_Model(), (x,)), torch.export.export(_Model(), (x,))
    for ep in (ours, theirs):
        edit(ep)
        with pytest.raises(SpecViolationError, match=phrase):
            ep.validate()
        with pytest.raises(SpecViolationError, match=phrase):
            ep.verifiers[0]().check(ep)  # torch's verifier, on graphcap's program too


def test_inplace_operator_after_decomposition_is_not_functional():
    x = torch.randn(2, 3)
    for ep in (graphcap.export(_Model(), (x,)).run_decompositions(),
               torch.export.export(_Model(), (x,)).run_decompositions()):
        _first(ep, torch.ops.aten.add.Tensor).target = torch.ops.aten.add_.Tensor
        with pytest.raises(SpecViolationError, match=r"operator 'aten.add_.Tensor' is not functional"):
            ep.validate()


def test_untouched_and_harmless_edits_still_validate():
    x = torch.randn(2, 3)
    ep = graphcap.export(_Model(), (x,))
    ep.validate()
    _first(ep, torch.ops.aten.add.Tensor).target = operator.add  # allowed: a builtin torch also accepts
    ep.validate()
    assert ep.state_dict.keys().isdisjoint(ep.graph_signature.non_persistent_buffers)
