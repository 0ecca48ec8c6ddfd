"""Facts about single graph nodes that several stages need.

The tracer, the passes and the verifier all ask the same questions of a
node: which subgraphs does this control-flow call run and with which
operands, does this operator write to an argument, is this value an input
(or a view of one). The verifier must answer them exactly as the stages it
checks do, without importing those stages (they sit above it: a stage builds
a program, the program is verified). So the answers live here, below every
stage, and this module imports nothing of graphcap but the torch adapter.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
import torch.fx

from .torch_private.ops import is_higher_order_operator, schema_of

aten = torch.ops.aten


# -- control-flow calls ---------------------------------------------------------

def hop_name(node: torch.fx.Node) -> Optional[str]:
    """The name of the control-flow operator ``node`` calls (``"cond"``, ``"map_impl"``, ...), else None."""
    if node.op == "call_function" and is_higher_order_operator(node.target):
        return node.target.name()
    return None


def subgraph_operands(node: torch.fx.Node) -> list[tuple[torch.fx.Node, list[Any]]]:
    """For a control-flow node: each subgraph (its ``get_attr`` node) with the
    values bound to that subgraph's placeholders, in order. Empty for other nodes."""
    name, a = hop_name(node), node.args
    if name == "cond":
        return [(a[1], list(a[3])), (a[2], list(a[3]))]
    if name == "map_impl":
        return [(a[0], [*a[1], *a[2]])]
    if name == "while_loop":
        return [(a[0], [*a[2], *a[3]]), (a[1], [*a[2], *a[3]])]
    if name == "scan":
        return [(a[0], [*a[1], *a[2], *a[3]])]
    if name == "wrap_with_set_grad_enabled":
        return [(a[1], list(a[2:]))]
    if name == "wrap_with_autocast":
        return [(a[4], list(a[5:]))]
    return []



# Control-flow operators that take their subgraphs' operands as sequences. An export traces them
# as tuples; torch's load gives them back as lists. A file holds the traced tuple (the same file
# whether the program was exported or loaded), load hands a list over, as torch's does.
# (flex_attention is not among them: it adds its buffer tuples together.)
OPERAND_SEQUENCE_CALLS = frozenset({"cond", "while_loop", "scan", "map_impl"})


def operand_sequences_as(container: type, node_target: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of a call of ``node_target`` with each sequence of nodes made a
    ``container`` (list or tuple) when the target is one of :data:`OPERAND_SEQUENCE_CALLS`."""
    if not (is_higher_order_operator(node_target) and node_target.name() in OPERAND_SEQUENCE_CALLS):
        return args, kwargs

    def convert(v: Any) -> Any:
        is_sequence = isinstance(v, (list, tuple)) and all(isinstance(x, torch.fx.Node) for x in v)
        return container(v) if is_sequence else v
    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}

# -- writes -----------------------------------------------------------------------

# Composite operators whose schema hides an in-place update: op → (flag index,
# indices of the arguments updated when the flag argument is True).
_HIDDEN_MUTATIONS = {
    aten.batch_norm.default: (5, (3, 4)),
    aten.instance_norm.default: (5, (3, 4)),
    aten._batch_norm_impl_index.default: (5, (3, 4)),
}


def written_arguments(node: torch.fx.Node) -> list[object]:
    """The arguments an operator node writes in place: those its schema marks ``Tensor(a!)``,
    plus the hidden updates of a few composites (``batch_norm`` in training mode)."""
    target = node.target
    written: list[object] = []
    schema = schema_of(target)
    if schema is not None:
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
                written.append(value)
    return written + _hidden_writes(node)


def _hidden_writes(node: torch.fx.Node) -> list[object]:
    """The arguments ``node`` writes that its operator's schema does not mark as written (the
    running statistics of a training-mode ``batch_norm`` / ``instance_norm``)."""
    hidden = _HIDDEN_MUTATIONS.get(node.target)
    if hidden is None:
        return []
    flag, indices = hidden
    if len(node.args) <= flag or node.args[flag] is not True:
        return []
    # only statistics that are given: InstanceNorm / BatchNorm without running stats pass None
    return [node.args[i] for i in indices if i < len(node.args) and node.args[i] is not None]


def hidden_write(node: torch.fx.Node) -> bool:
    """Whether ``node`` writes an argument its operator's schema does not mark as written."""
    return bool(_hidden_writes(node))


def writes_to_argument(node: torch.fx.Node) -> bool:
    """Whether an operator node updates one of its arguments (schema says so, or a hidden update)."""
    schema = schema_of(node.target)
    return (schema is not None and schema.is_mutable) or bool(written_arguments(node))


# -- aliasing ---------------------------------------------------------------------

def is_view_op(target: object) -> bool:
    """Does the operator return a view of its first input (schema ``Tensor(a) -> Tensor(a)``)?"""
    schema = schema_of(target)
    if schema is None or not schema.returns:
        return False
    ret = schema.returns[0].alias_info
    return ret is not None and not ret.is_write


def aliased_input(value: object) -> Optional[torch.fx.Node]:
    """The placeholder ``value`` is, or is a view of (through view operators); else None."""
    node = value
    while isinstance(node, torch.fx.Node):
        if node.op == "placeholder":
            return node
        if node.op == "call_function" and is_view_op(node.target) and node.args:
            node = node.args[0]
            continue
        if node.op == "call_function" and node.target is operator.getitem:
            base = node.args[0]
            if isinstance(base, torch.fx.Node) and is_view_op(base.target):
                node = base.args[0]
                continue
        return None
    return None
