"""Every verifier rule can fail: for each, a program that breaks it, and the rule names it.

A rule that can never fire checks nothing (metadata used to be filled with defaults
before the verifier ran, so ``every-node-has-val`` and ``operator-metadata`` could
not fire on an exported program). The breakers below start from a valid program
and break one invariant each; a rule added to the verifier without a breaker here
fails ``test_every_rule_has_a_breaker``.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import graphcap
from graphcap import ir_checks
from graphcap.signature import InputKind, OutputKind


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        return self.lin(x).relu() + self.count


def _exported(dynamic: bool = False):
    dims = ({0: graphcap.Dim("b", min=2, max=8)},) if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(Small(), (torch.randn(4, 3),), dynamic_shapes=dims)


def _decomposed():
    return _exported().run_decompositions()


def _with_cond():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
    return graphcap.export(M(), (torch.randn(3),))


def _op_node(ep, target=None):
    return next(n for n in ep.graph.nodes if n.op == "call_function"
                and (target is None or n.target is target))


def break_inputs_match_signature(ep):
    ep.graph_signature.input_specs.pop(0)


def break_outputs_match_signature(ep):
    ep.graph_signature.output_specs.pop()


def break_state_present(ep):
    ep.state_dict.pop("lin.weight")


def break_state_is_real(ep):
    fake = next(n for n in ep.graph.nodes if n.op == "placeholder").meta["val"]
    ep.constants["stray"] = fake


def break_mutation_targets(ep):
    ep.graph_signature.output_specs.insert(0, graphcap.OutputSpec(
        OutputKind.BUFFER_MUTATION, graphcap.TensorArgument("relu"), "not_a_buffer"))


def break_every_node_has_val(ep):
    del _op_node(ep).meta["val"]


def break_operator_metadata(ep):
    del _op_node(ep, torch.ops.aten.relu.default).meta["stack_trace"]


def break_no_state_get_attr(ep):
    gm = ep.graph_module
    gm.register_buffer("stray", torch.ones(1))
    with gm.graph.inserting_before(_op_node(ep)):
        gm.graph.get_attr("stray").meta["val"] = None


def break_known_targets(ep):
    _op_node(ep, torch.ops.aten.relu.default).target = print


def break_subgraph_signatures(ep):
    sub = ep.graph_module.true_graph_0
    with sub.graph.inserting_before(next(iter(sub.graph.nodes))):
        sub.graph.placeholder("extra")


def break_symbols_have_ranges(ep):
    ep.range_constraints.clear()


def break_call_graph_names_nodes(ep):
    # the root entry lists no values (as torch.export's): name a value that is no node there
    ep.module_call_graph[0].signature.outputs.append(graphcap.TensorArgument("no_such_node"))


def break_core_or_kept_ops(ep):
    _op_node(ep, torch.ops.aten.relu.default).target = torch.ops.aten.hardswish.default


def break_no_mutation(ep):
    _op_node(ep, torch.ops.aten.relu.default).target = torch.ops.aten.relu_.default


def break_outputs_not_aliasing_inputs(ep):
    out = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    user_input = next(s.arg.name for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT)
    placeholder = next(n for n in ep.graph.nodes if n.name == user_input)
    values = list(out.args[0])
    spec = ep.graph_signature.output_specs[-1]
    values[-1] = placeholder
    spec.arg.name = placeholder.name
    out.args = (tuple(values),)


def break_writes_in_graph(ep):
    """The training IR writes a buffer with an in-place operator; an output handing back the
    buffer's own placeholder as its new value says nothing the graph does."""
    spec = next(s for s in ep.graph_signature.input_specs if s.kind is InputKind.BUFFER)
    placeholder = next(n for n in ep.graph.nodes if n.name == spec.arg.name)
    out = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    out.args = ((placeholder, *out.args[0]),)
    ep.graph_signature.output_specs.insert(0, graphcap.OutputSpec(
        OutputKind.BUFFER_MUTATION, graphcap.TensorArgument(placeholder.name), spec.target))


# rule name -> (program maker, breaker)
BREAKERS = {
    "inputs-match-signature": (_exported, break_inputs_match_signature),
    "outputs-match-signature": (_exported, break_outputs_match_signature),
    "state-present": (_exported, break_state_present),
    "state-is-real": (_exported, break_state_is_real),
    "mutation-targets": (_exported, break_mutation_targets),
    "every-node-has-val": (_exported, break_every_node_has_val),
    "operator-metadata": (_exported, break_operator_metadata),
    "no-state-get-attr": (_exported, break_no_state_get_attr),
    "known-targets": (_exported, break_known_targets),
    "subgraph-signatures": (_with_cond, break_subgraph_signatures),
    "symbols-have-ranges": (lambda: _exported(dynamic=True), break_symbols_have_ranges),
    "call-graph-names-nodes": (_exported, break_call_graph_names_nodes),
    "core-or-kept-ops": (_decomposed, break_core_or_kept_ops),
    "no-mutation": (_decomposed, break_no_mutation),
    "outputs-not-aliasing-inputs": (_decomposed, break_outputs_not_aliasing_inputs),
    "writes-in-graph": (_exported, break_writes_in_graph),
}


def test_every_rule_has_a_breaker():
    names = {name for name, _ in ir_checks.RULES + ir_checks.INFERENCE_RULES + ir_checks.TRAINING_RULES}
    assert names == set(BREAKERS), f"rules without a breaker: {names - set(BREAKERS)}"


@pytest.mark.parametrize("rule", sorted(BREAKERS))
def test_the_rule_fires_on_a_program_breaking_it(rule):
    make, breaker = BREAKERS[rule]
    ep = make()
    assert ir_checks.violations(ep) == [], "the starting program must be valid"
    breaker(ep)
    fired = {name for name, _, _ in ir_checks.violations(ep)}
    assert rule in fired, f"{rule} did not fire (fired: {fired})"
    with pytest.raises(graphcap.VerificationError, match=rf"\[{rule}\]"):
        ir_checks.verify(ep)
