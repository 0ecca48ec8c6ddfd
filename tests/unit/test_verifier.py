"""The verifier names the rule and the node that break an invariant."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import ir_checks


def _program():
    return graphcap.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))


def test_clean_program_has_no_violations():
    assert ir_checks.violations(_program()) == []


def test_missing_val_is_reported_with_rule_and_node():
    ep = _program()
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    del node.meta["val"]
    with pytest.raises(graphcap.VerificationError, match=rf"\[every-node-has-val\] node {node.name}"):
        ep.validate()


def test_signature_mismatch_is_reported():
    ep = _program()
    ep.graph_signature.input_specs.pop(0)
    rules = {r for r, _, _ in ir_checks.violations(ep)}
    assert "inputs-match-signature" in rules


def test_get_attr_of_state_is_reported():
    ep = _program()
    gm = ep.graph_module
    gm.register_buffer("stray", torch.ones(1))
    first = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_before(first):
        n = gm.graph.get_attr("stray")
    n.meta["val"] = None
    rules = {r for r, _, _ in ir_checks.violations(ep)}
    assert "no-state-get-attr" in rules


def test_missing_state_and_bad_mutation_target():
    ep = _program()
    ep.state_dict.pop("weight")
    ep.graph_signature.output_specs.insert(0, graphcap.OutputSpec(
        graphcap.OutputKind.BUFFER_MUTATION, graphcap.TensorArgument("linear"), "nope"))
    rules = {r for r, _, _ in ir_checks.violations(ep)}
    assert {"state-present", "mutation-targets"} <= rules


def test_unknown_target_is_reported():
    ep = _program()
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = print
    assert "known-targets" in {r for r, _, _ in ir_checks.violations(ep)}
