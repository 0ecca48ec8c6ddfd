"""The IR invariants of DESIGN.md, as a table of rules.

Each rule is a function ``(ep) -> Iterator[(node_name, message)]`` listed in
``RULES`` with a short name. :func:`verify` runs them all and raises one
``VerificationError`` that lists every violation with its rule and node, so a
broken pass is found by name, not by a crash three steps later.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Callable, Iterator

import torch
import torch.fx

from .errors import VerificationError
from .signature import ConstantArgument, InputKind, OutputKind

if TYPE_CHECKING:
    from .program import ExportedProgram

Violation = tuple[str, str]

# Python callables allowed as call_function targets besides ATen/custom operator
# overloads: tuple indexing, arithmetic on symbolic sizes, assertions.
_ALLOWED_PY_TARGETS = {
    operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
    operator.mod, operator.pow, operator.neg, operator.eq, operator.ne, operator.lt, operator.le,
    operator.gt, operator.ge, operator.and_, operator.or_, operator.not_, operator.pos,
    torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite,
    torch.sym_sqrt, torch._sym_sqrt if hasattr(torch, "_sym_sqrt") else torch.sym_sqrt,
    torch._C._set_grad_enabled,
}


def _placeholders(ep) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.op == "placeholder"]


def _output_values(ep) -> list:
    out = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    return list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]


def rule_inputs_match_signature(ep) -> Iterator[Violation]:
    phs = _placeholders(ep)
    specs = ep.graph_signature.input_specs
    if len(phs) != len(specs):
        yield ("<graph>", f"{len(phs)} placeholders but {len(specs)} input specs")
    for node, spec in zip(phs, specs):
        name = spec.arg.name
        if name != node.name:
            yield (node.name, f"placeholder is described by input spec {name!r}: names must match, in order")


def rule_outputs_match_signature(ep) -> Iterator[Violation]:
    values = _output_values(ep)
    specs = ep.graph_signature.output_specs
    if len(values) != len(specs):
        yield ("output", f"{len(values)} outputs but {len(specs)} output specs")
    for value, spec in zip(values, specs):
        if isinstance(spec.arg, ConstantArgument):
            if isinstance(value, torch.fx.Node):
                yield (value.name, "output is a node but its spec says constant")
        elif not isinstance(value, torch.fx.Node) or value.name != spec.arg.name:
            yield ("output", f"output {value!r} is described by output spec {spec.arg.name!r}")


def rule_state_present(ep) -> Iterator[Violation]:
    for spec in ep.graph_signature.input_specs:
        if spec.kind is InputKind.PARAMETER and spec.target not in ep.state_dict:
            yield (spec.arg.name, f"parameter {spec.target!r} missing from state_dict")
        if spec.kind is InputKind.BUFFER:
            store = ep.constants if spec.persistent is False else ep.state_dict
            if spec.target not in store:
                where = "constants" if spec.persistent is False else "state_dict"
                yield (spec.arg.name, f"buffer {spec.target!r} missing from {where}")
        if spec.kind is InputKind.CONSTANT_TENSOR and spec.target not in ep.constants:
            yield (spec.arg.name, f"constant {spec.target!r} missing from constants")


def rule_mutation_targets(ep) -> Iterator[Violation]:
    sig = ep.graph_signature
    buffers = set(sig.buffers)
    user_inputs = {s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT}
    seen_user_output = False
    for spec in sig.output_specs:
        if spec.kind is OutputKind.USER_OUTPUT:
            seen_user_output = True
        elif seen_user_output:
            yield (spec.arg.name, f"{spec.kind.name} output listed after a user output")
        if spec.kind is OutputKind.BUFFER_MUTATION and spec.target not in buffers:
            yield (spec.arg.name, f"mutates {spec.target!r}, which is not a buffer input")
        if spec.kind is OutputKind.USER_INPUT_MUTATION and spec.target not in user_inputs:
            yield (spec.arg.name, f"mutates {spec.target!r}, which is not a user input")


def rule_every_node_has_val(ep) -> Iterator[Violation]:
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "call_function") and "val" not in node.meta:
                yield (node.name, "has no meta['val']")


def rule_operator_metadata(ep) -> Iterator[Violation]:
    for node in ep.graph.nodes:
        if node.op == "call_function":
            for key in ("nn_module_stack", "stack_trace", "source_fn_stack"):
                if key not in node.meta:
                    yield (node.name, f"has no meta[{key!r}]")


def rule_no_state_get_attr(ep) -> Iterator[Violation]:
    for node in ep.graph.nodes:
        if node.op == "get_attr":
            value = getattr(ep.graph_module, node.target, None)
            if not isinstance(value, torch.fx.GraphModule):
                yield (node.name, f"get_attr of {node.target!r}: state must be lifted to a placeholder")
        if node.op in ("call_module", "call_method"):
            yield (node.name, f"{node.op} nodes are not part of the IR; only call_function")


def rule_known_targets(ep) -> Iterator[Violation]:
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        t = node.target
        if isinstance(t, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)) or t in _ALLOWED_PY_TARGETS:
            continue
        yield (node.name, f"target {t!r} is neither an operator overload nor an allowed Python callable")


def rule_symbols_have_ranges(ep) -> Iterator[Violation]:
    known = {str(k) for k in ep.range_constraints}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        sizes = []
        if isinstance(val, torch.Tensor):
            sizes = list(val.shape)
        elif isinstance(val, torch.SymInt):
            sizes = [val]
        for s in sizes:
            if isinstance(s, torch.SymInt):
                for sym in s.node.expr.free_symbols:
                    if str(sym) not in known:
                        yield (node.name, f"symbol {sym} has no entry in range_constraints")


RULES: list[tuple[str, Callable[..., Iterator[Violation]]]] = [
    ("inputs-match-signature", rule_inputs_match_signature),
    ("outputs-match-signature", rule_outputs_match_signature),
    ("state-present", rule_state_present),
    ("mutation-targets", rule_mutation_targets),
    ("every-node-has-val", rule_every_node_has_val),
    ("operator-metadata", rule_operator_metadata),
    ("no-state-get-attr", rule_no_state_get_attr),
    ("known-targets", rule_known_targets),
    ("symbols-have-ranges", rule_symbols_have_ranges),
]


def violations(ep: "ExportedProgram", rules=None) -> list[tuple[str, str, str]]:
    found = []
    for rule_name, rule in rules or RULES:
        for node, message in rule(ep):
            found.append((rule_name, node, message))
    return found


def verify(ep: "ExportedProgram", rules=None) -> None:
    found = violations(ep, rules)
    if found:
        lines = "\n".join(f"  [{rule}] node {node}: {msg}" for rule, node, msg in found)
        raise VerificationError(
            f"The exported program breaks {len(found)} IR invariant(s):\n{lines}",
            where="ExportedProgram.graph",
            fix="This is a bug in graphcap or in a pass that edited the graph; the rule names the "
                "invariant (see graphcap/verifier.py) and the node the one that breaks it.")
