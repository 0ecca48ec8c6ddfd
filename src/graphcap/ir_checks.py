"""The IR invariants of docs/architecture.md, as a table of rules.

Each rule is a function ``(ep) -> Iterator[(node_name, message)]`` listed in
``RULES`` with a short name. :func:`verify` runs them all and raises one
``VerificationError`` that lists every violation with its rule and node, so a
broken pass is found by name, not by a crash three steps later.

torch.export calls this check the verifier (``ep.verifiers``, ``ep.validate()``).
It reads the program alone; comparing a program's results with eager's is
:mod:`graphcap.verification` (``graphcap.verify``).
"""
from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Callable, Iterator

import torch
import torch.fx

from .errors import VerificationError
from .node_facts import aliased_input, subgraph_operands, writes_to_argument
from .signature import ConstantArgument, InputKind, OutputKind, call_graph_of
from .torch_private import pytree
from .torch_private.dispatch import set_grad_enabled
from .torch_private.fx import predispatch_functions
from .torch_private.ops import HigherOrderOperator, OpOverload, legacy_sym_sqrt

if TYPE_CHECKING:
    from .program import ExportedProgram

Violation = tuple[str, str]

# Python callables allowed as call_function targets besides ATen/custom operator
# overloads: tuple indexing, arithmetic on symbolic sizes, assertions. The
# serializer names them from this table (graphcap.serialize.encode).
ALLOWED_PY_TARGETS = {
    operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
    operator.mod, operator.pow, operator.neg, operator.eq, operator.ne, operator.lt, operator.le,
    operator.gt, operator.ge, operator.and_, operator.or_, operator.not_, operator.pos,
    torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite,
    torch.sym_sqrt, legacy_sym_sqrt() or torch.sym_sqrt,
    set_grad_enabled,
    operator.abs, operator.lshift, operator.rshift, operator.xor, operator.invert,
    math.ceil, math.floor, math.trunc,
    round,  # Python's round() on a symbolic size
}
ALLOWED_PY_TARGETS.add(torch.sym_sum)  # every supported torch (2.10 on) has it


def _predispatch_functions() -> set:
    """Python functions torch's pre-dispatch tracer records as calls of their own.

    ``torch.vmap`` / ``torch.func.jvp`` inside forward and autocast regions
    are recorded as calls that enter and leave the transform
    (``_vmap_increment_nesting``, ``_add_batch_dim``, ...) around the ATen
    operators of the body; the program runs them as they are.
    """
    from torch.fx.experimental import symbolic_shapes
    found = predispatch_functions()
    found |= {torch.autograd.grad_mode.set_grad_enabled}
    found.add(symbolic_shapes.cast_symbool_to_symint_guardless)  # every supported torch (2.10 on) has it
    return found


ALLOWED_PY_TARGETS |= _predispatch_functions()


def _placeholders(ep) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.op == "placeholder"]


def _output_values(ep) -> list:
    out = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    return list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]


def rule_inputs_match_signature(ep) -> Iterator[Violation]:
    phs = _placeholders(ep)
    specs = ep.graph_signature.input_specs
    if len(phs) != len(specs):
        # "Number of graph inputs": torch's key phrase for this, which code written against it matches
        yield ("<graph>", f"Number of graph inputs ({len(phs)}) differs from the input specs ({len(specs)}): "
                          f"{len(phs)} placeholders but {len(specs)} input specs")
    for node, spec in zip(phs, specs):
        name = spec.arg.name
        if name != node.name:
            yield (node.name, f"placeholder is described by input spec {name!r}: names must match, in order")


def rule_outputs_match_signature(ep) -> Iterator[Violation]:
    values = _output_values(ep)
    specs = ep.graph_signature.output_specs
    if len(values) != len(specs):
        yield ("output", f"Number of output nodes ({len(values)}) differs from the number of output "
                         f"specs in the graph signature ({len(specs)})")
    for value, spec in zip(values, specs):
        if isinstance(spec.arg, ConstantArgument):
            if isinstance(value, torch.fx.Node):
                yield (value.name, "output is a node but its spec says constant")
        elif not isinstance(value, torch.fx.Node) or value.name != spec.arg.name:
            yield ("output", f"output {value!r} is described by output spec {spec.arg.name!r}")


def rule_state_present(ep) -> Iterator[Violation]:
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER and spec.target not in ep.state_dict:
            yield (spec.arg.name, f"parameter {spec.target!r} is not in the state dict")
        elif spec.kind == InputKind.PARAMETER and not isinstance(ep.state_dict[spec.target], torch.nn.Parameter):
            # module() registers it as a parameter, and consumers read it as one
            value = ep.state_dict[spec.target]
            yield (spec.arg.name, f"parameter {spec.target!r} in the state dict is a {type(value).__name__}, "
                                  f"not an instance of torch.nn.Parameter")
        if spec.kind == InputKind.BUFFER:
            store = ep.constants if spec.persistent is False else ep.state_dict
            if spec.target not in store:
                where = "constants" if spec.persistent is False else "state_dict"
                yield (spec.arg.name, f"buffer {spec.target!r} is not in the {where.replace('_', ' ')}"
                                      + (" dictionary" if where == "constants" else ""))
            elif spec.persistent is False and spec.target in ep.state_dict:
                # a non-persistent buffer is state the module does not save: module().state_dict() and
                # save would hand it out as if it were
                yield (spec.arg.name, f"Non-persistent buffer {spec.target!r} is in the state dict, it should not "
                                      f"be: it belongs in the constants")
        if spec.kind == InputKind.CONSTANT_TENSOR and spec.target not in ep.constants:
            yield (spec.arg.name, f"constant tensor {spec.target!r} is not in the constants dictionary")


def rule_state_is_real(ep) -> Iterator[Violation]:
    """No value of the trace is kept as state: a fake tensor of the program's own fake mode among
    the weights or constants is something the tracer failed to follow (it stands for data the
    program computes). Fake weights the user exports on purpose belong to the user's fake mode."""
    from .torch_private.fake import FakeTensor
    modes = {id(v.fake_mode) for n in _placeholders(ep) for v in [n.meta.get("val")] if isinstance(v, FakeTensor)}
    for store_name, store in (("state_dict", ep.state_dict), ("constants", ep.constants)):
        for name, value in store.items():
            if isinstance(value, FakeTensor) and id(value.fake_mode) in modes:
                yield (name, f"{store_name}[{name!r}] is a fake tensor of the trace; a value the program "
                             f"computes was taken for a constant")


def rule_mutation_targets(ep) -> Iterator[Violation]:
    sig = ep.graph_signature
    buffers = set(sig.buffers)
    user_inputs = {s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT}
    seen_user_output = False
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            seen_user_output = True
        elif seen_user_output:
            yield (spec.arg.name, f"{spec.kind.name} output listed after a user output")
        if spec.kind == OutputKind.BUFFER_MUTATION and spec.target not in buffers:
            yield (spec.arg.name, f"mutates {spec.target!r}, which is not a buffer input")
        if spec.kind == OutputKind.PARAMETER_MUTATION and spec.target not in sig.parameters:
            yield (spec.arg.name, f"mutates {spec.target!r}, which is not a parameter input")
        if spec.kind == OutputKind.USER_INPUT_MUTATION and spec.target not in user_inputs:
            yield (spec.arg.name, f"mutates {spec.target!r}, which is not a user input")


# Calls the pre-dispatch tracer records for a transform's bookkeeping inside forward
# (torch.vmap / torch.func.jvp: entering and leaving a level). Their results are transform
# levels, not values of the program, and the tracer keeps none (torch's neither).
_TRANSFORM_BOOKKEEPING = {f for f in _predispatch_functions()
                          if getattr(f, "__name__", "") not in ("set_grad_enabled", "_set_grad_enabled")}


def rule_every_node_has_val(ep) -> Iterator[Violation]:
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "call_function") and "val" not in node.meta \
                    and node.target not in _TRANSFORM_BOOKKEEPING:
                yield (node.name, "is missing val field: the node has no meta['val']")


def rule_operator_metadata(ep) -> Iterator[Violation]:
    for node in ep.graph.nodes:
        if node.op == "call_function":
            for key in ("nn_module_stack", "stack_trace", "source_fn_stack"):
                if key not in node.meta:
                    yield (node.name, f"has no meta[{key!r}]")


def _graph_modules(ep) -> Iterator[torch.fx.GraphModule]:
    """The program's graph and every control-flow / region subgraph under it."""
    for gm in ep.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            yield gm


def rule_no_state_get_attr(ep) -> Iterator[Violation]:
    for gm in _graph_modules(ep):
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = getattr(gm, node.target, None)
                # a TreeSpec is structure, not state (flat_apply's function and argument specs)
                if not isinstance(value, (torch.fx.GraphModule, pytree.TreeSpec)):
                    yield (node.name, f"Invalid get_attr type {type(value).__name__} on target {node.target!r}: "
                                      f"state must be lifted to a placeholder")
            if node.op in ("call_module", "call_method"):
                yield (node.name, f"{node.op} is not valid: {node.op} nodes are not part of the IR; only "
                                  f"call_function")


def rule_subgraph_signatures(ep) -> Iterator[Violation]:
    """Each control-flow subgraph takes what its operator passes and returns what it promises."""
    for gm in _graph_modules(ep):
        for node in gm.graph.nodes:
            for attr, operands in subgraph_operands(node):
                sub = getattr(gm, attr.target, None) if isinstance(attr, torch.fx.Node) else None
                if not isinstance(sub, torch.fx.GraphModule):
                    yield (node.name, f"subgraph argument {attr!r} is not a get_attr of a graph module")
                    continue
                phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
                if len(phs) != len(operands):
                    yield (node.name, f"subgraph {attr.target} has {len(phs)} inputs but is passed "
                                      f"{len(operands)} operands")
                for ph, value in zip(phs, operands):
                    a = ph.meta.get("val")
                    b = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
                    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype:
                        yield (node.name, f"subgraph {attr.target} input {ph.name} is {a.dtype} but the "
                                          f"operand passed is {b.dtype}")
                promised = node.meta.get("val")
                out = next(n for n in reversed(sub.graph.nodes) if n.op == "output")
                returned = out.args[0] if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
                name = node.target.name()
                if name in ("cond", "wrap_with_set_grad_enabled", "wrap_with_autocast") \
                        and isinstance(promised, (tuple, list)):
                    if len(returned) != len(promised):
                        yield (node.name, f"subgraph {attr.target} returns {len(returned)} values but "
                                          f"the call promises {len(promised)}")
                    for r, p in zip(returned, promised):
                        rv = r.meta.get("val") if isinstance(r, torch.fx.Node) else r
                        if isinstance(rv, torch.Tensor) and isinstance(p, torch.Tensor) and rv.dtype != p.dtype:
                            yield (node.name, f"subgraph {attr.target} returns {rv.dtype} where the call "
                                              f"promises {p.dtype}")
                if name == "while_loop" and attr is node.args[1] and len(returned) != len(node.args[2]):
                    yield (node.name, f"loop body {attr.target} returns {len(returned)} values for "
                                      f"{len(node.args[2])} carried inputs")


def rule_known_targets(ep) -> Iterator[Violation]:
    for node in (n for gm in _graph_modules(ep) for n in gm.graph.nodes):
        if node.op != "call_function":
            continue
        t = node.target
        if isinstance(t, (OpOverload, HigherOrderOperator)) or t in ALLOWED_PY_TARGETS:
            continue
        yield (node.name, f"Operator {t!r} is not an allowed operator type: it is neither an operator "
                          f"overload nor an allowed Python callable")


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


def rule_call_graph_names_nodes(ep) -> Iterator[Violation]:
    """Every module_call_graph signature argument names a node of the graph (or is a constant):
    unflatten rebuilds preserved calls from those names."""
    names = {n.name for n in ep.graph.nodes}
    for entry in call_graph_of(ep) or []:
        sig = entry.signature
        for arg in [*sig.inputs, *sig.outputs] if sig is not None else []:
            if isinstance(arg, ConstantArgument) or not isinstance(getattr(arg, "name", None), str):
                continue
            if arg.name not in names:
                yield (arg.name, f"module call {entry.fqn or '<root>'!r} names {arg.name!r}, which is no "
                                 f"node of the graph")


RULES: list[tuple[str, Callable[..., Iterator[Violation]]]] = [
    ("inputs-match-signature", rule_inputs_match_signature),
    ("outputs-match-signature", rule_outputs_match_signature),
    ("state-present", rule_state_present),
    ("state-is-real", rule_state_is_real),
    ("mutation-targets", rule_mutation_targets),
    ("every-node-has-val", rule_every_node_has_val),
    ("operator-metadata", rule_operator_metadata),
    ("no-state-get-attr", rule_no_state_get_attr),
    ("known-targets", rule_known_targets),
    ("subgraph-signatures", rule_subgraph_signatures),
    ("symbols-have-ranges", rule_symbols_have_ranges),
    ("call-graph-names-nodes", rule_call_graph_names_nodes),
]


# -- inference IR (what run_decompositions returns) ---------------------------
# A program is in the inference IR when its graph module says so
# (``gm.meta["graphcap_ir"]["level"] == "inference"``, set by the decomposition
# pass together with the non-core operators its table keeps).

def _inference_meta(ep) -> dict:
    return ep.graph_module.meta.get("graphcap_ir") or {}


def _all_nodes(ep) -> Iterator[torch.fx.Node]:
    """Nodes of the graph and of its control-flow subgraphs."""
    for gm in _graph_modules(ep):
        yield from gm.graph.nodes


def rule_core_or_kept_ops(ep) -> Iterator[Violation]:
    kept = _inference_meta(ep).get("kept", frozenset())
    for node in _all_nodes(ep):
        op = node.target
        if node.op == "call_function" and isinstance(op, OpOverload) \
                and torch.Tag.core not in op.tags and op.name() not in kept:
            yield (node.name, f"{op} is not a core ATen operator (torch.Tag.core) and the decomposition "
                              f"table does not keep it")


def rule_no_mutation(ep) -> Iterator[Violation]:
    for node in _all_nodes(ep):
        if node.op == "call_function" and writes_to_argument(node):
            yield (node.name, f"operator '{node.target}' is not functional: it writes to an argument, and the "
                              f"inference IR is functional")


def rule_outputs_not_aliasing_inputs(ep) -> Iterator[Violation]:
    for value in _output_values(ep):
        base = aliased_input(value)
        if base is not None:
            yield (value.name, f"output is (a view of) input {base.name}; inference-IR outputs own their storage")


INFERENCE_RULES: list[tuple[str, Callable[..., Iterator[Violation]]]] = [
    ("core-or-kept-ops", rule_core_or_kept_ops),
    ("no-mutation", rule_no_mutation),
    ("outputs-not-aliasing-inputs", rule_outputs_not_aliasing_inputs),
]


# -- training IR (what export returns) ----------------------------------------
# Writes to buffers and inputs are in-place operators of the graph, as in
# torch's training IR; an output that hands back the placeholder it claims to
# update says nothing the graph does not (and misleads torch's unflatten).

def rule_writes_in_graph(ep) -> Iterator[Violation]:
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    sig = ep.graph_signature
    written = sig.written_input_positions()
    for spec in sig.output_specs:
        position = written.get((spec.kind, spec.target))
        name = None if position is None else sig.input_specs[position].arg.name
        if name is not None and getattr(spec.arg, "name", None) == name and name in placeholders:
            yield (name, f"{spec.kind.name} output is the input {name} itself; in the training IR the "
                         f"write is an operator of the graph and has no output")


TRAINING_RULES: list[tuple[str, Callable[..., Iterator[Violation]]]] = [
    ("writes-in-graph", rule_writes_in_graph),
]


def is_inference_ir(ep) -> bool:
    return _inference_meta(ep).get("level") == "inference"


def rules_for(ep) -> list[tuple[str, Callable[..., Iterator[Violation]]]]:
    """The rules a program must keep: the common ones, plus those of the IR level it claims."""
    return RULES + INFERENCE_RULES if is_inference_ir(ep) else RULES + TRAINING_RULES


def violations(ep: "ExportedProgram", rules=None) -> list[tuple[str, str, str]]:
    found = []
    for rule_name, rule in rules or rules_for(ep):
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
                "invariant (see graphcap/ir_checks.py) and the node the one that breaks it.")
