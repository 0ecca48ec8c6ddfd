"""The pass manager verifies after every pass and names the one that broke the IR."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap.errors import VerificationError
from graphcap.ir_checks import INFERENCE_RULES, RULES, TRAINING_RULES, rules_for
from graphcap.passes import Pass, run_passes
from graphcap.passes.dce import dce_pass


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


def _ep():
    return graphcap.export(Small(), (torch.randn(2, 4),))


def _drop_a_val(ep):
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    del node.meta["val"]
    return ep


def test_broken_pass_is_named_with_the_passes_before_it():
    passes = [Pass("dce", dce_pass), Pass("noop", lambda ep: ep), Pass("drop_val", _drop_a_val)]
    with pytest.raises(VerificationError) as info:
        run_passes(_ep(), passes)
    text = str(info.value)
    assert "'drop_val'" in text and "every-node-has-val" in text
    assert "passes run before it: dce, noop" in text


def test_first_pass_breaking_says_none_ran_before():
    with pytest.raises(VerificationError, match="passes run before it: none"):
        run_passes(_ep(), [Pass("drop_val", _drop_a_val)])


def test_valid_passes_return_the_program():
    ep = _ep()
    assert run_passes(ep, [Pass("dce", dce_pass)]) is ep


def test_each_ir_level_gets_its_own_rules():
    ep = _ep()
    assert rules_for(ep) == RULES + TRAINING_RULES
    dep = ep.run_decompositions()
    assert rules_for(dep) == RULES + INFERENCE_RULES


def test_inference_verifier_flags_mutation_non_core_op_and_aliasing_outputs():
    dep = _ep().run_decompositions()
    graph = dep.graph
    relu = next(n for n in graph.nodes if n.target is torch.ops.aten.relu.default)
    relu.target = torch.ops.aten.relu_.default  # in place: mutable schema
    with pytest.raises(VerificationError, match="no-mutation"):
        dep.validate()
    relu.target = torch.ops.aten.relu.default
    addmm = next(n for n in graph.nodes if n.target is torch.ops.aten.addmm.default)
    addmm.target = torch.ops.aten.linear.default  # not core, and the default table breaks it down
    addmm.args = (addmm.args[1], addmm.args[0])
    with pytest.raises(VerificationError, match="core-or-kept-ops"):
        dep.validate()


def test_inference_verifier_flags_output_that_is_an_input():
    dep = _ep().run_decompositions()
    out = next(n for n in dep.graph.nodes if n.op == "output")
    x = next(n for n in dep.graph.nodes if n.op == "placeholder" and n.name == "x")
    relu = out.args[0][0]
    out.args = ((x,),)
    dep.graph_signature.output_specs[0].arg = type(dep.graph_signature.output_specs[0].arg)("x")
    graph_users = list(relu.users)
    assert not graph_users
    with pytest.raises(VerificationError, match="outputs-not-aliasing-inputs"):
        dep.validate()
