"""Find in-place operators that need no functionalization machinery.

``relu_(a)`` on a tensor ``a`` that the graph itself just computed — fresh
storage, never viewed, not an input — is the same as ``a = relu(a)``: nothing
else can observe the write. torchvision models are full of these
(``ReLU(inplace=True)``). Replaying them out of place lets the decomposition
pass skip the functionalization engine entirely when a program has no other
mutation, which saves about a third of its time.

:func:`plan` returns, for each such node, the out-of-place operator to run
instead, and says whether anything that does need functionalization is left.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.fx

from ..node_facts import is_view_op, writes_to_argument
from ..torch_private.ops import OpOverload, overload_name, schema_of


@dataclass
class InplacePlan:
    replace: dict[torch.fx.Node, OpOverload] = field(default_factory=dict)
    needs_functionalization: bool = False
    identity: set[torch.fx.Node] = field(default_factory=set)  # in-place nodes that write nothing


def functional_variant(op: object) -> Optional[OpOverload]:
    """``aten.add_.Tensor`` → ``aten.add.Tensor``, when the op writes only its first argument."""
    if not isinstance(op, OpOverload):
        return None
    schema = schema_of(op)
    name = schema.name.split("::")[-1]
    if not name.endswith("_") or name.endswith("__") or not schema.arguments:
        return None
    writes = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if len(writes) != 1 or writes[0] is not schema.arguments[0]:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None) if op.namespace == "aten" else None
    overload = getattr(packet, overload_name(op), None) if packet is not None else None
    if not isinstance(overload, OpOverload) or schema_of(overload).is_mutable:
        return None
    return overload


def _fresh(node: object, replaced: dict) -> bool:
    """Does ``node`` own its storage (computed by an operator that returns new tensors)?"""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node in replaced:
        return True
    if node.target is operator.getitem:
        return _fresh_producer(node.args[0])
    return _fresh_producer(node)


def _fresh_producer(node: object) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    schema = schema_of(node.target)
    if schema is None or schema.is_mutable:
        return False
    return all(r.alias_info is None for r in schema.returns)


def _viewed(base: torch.fx.Node, inplace_on: dict) -> bool:
    """Is ``base`` (or an in-place result standing for it) ever the input of a view operator?"""
    todo, seen = [base], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for user in node.users:
            if is_view_op(user.target):
                return True
            if user in inplace_on.get(node, ()):
                todo.append(user)
    return False


def _dropout_off(node: torch.fx.Node) -> bool:
    """``aten.dropout_(x, p, train=False)`` (``nn.Dropout(inplace=True)`` in eval mode): writes
    nothing, returns ``x`` (EfficientNet's classifier, on a ``flatten`` view). Replayed as ``x``
    it leaves nothing to functionalize, so the whole retrace skips that engine."""
    if node.target is not torch.ops.aten.dropout_.default:
        return False
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return train is False


def plan(gm: torch.fx.GraphModule, has_declared_mutations: bool, has_symbols: bool = False) -> InplacePlan:
    """What to replay out of place (or as its input) in ``gm``, and whether functionalization is
    still needed. With ``has_symbols``, an eval-mode dropout is left to functionalization: in a
    program with symbols the functionalized retrace names nodes otherwise than the plain one (its
    wrapping of symbolic inputs makes size nodes that take names: ``mul_22`` where the plain
    retrace has ``mul``), and a program decomposes to what it did before this rule."""
    result = InplacePlan(needs_functionalization=has_declared_mutations)
    inplace_on: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and functional_variant(node.target) is not None and node.args \
                and isinstance(node.args[0], torch.fx.Node):
            inplace_on.setdefault(node.args[0], []).append(node)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if not has_symbols and _dropout_off(node):
            result.identity.add(node)
            continue
        variant = functional_variant(node.target)
        if variant is not None and _fresh(node.args[0], result.replace) \
                and not _viewed(node.args[0], inplace_on):
            result.replace[node] = variant
            inplace_on.setdefault(node, [])
            continue
        if writes_to_argument(node):
            result.needs_functionalization = True
    return result


def has_mutation(gm: torch.fx.GraphModule) -> bool:
    """Does a traced graph still write anywhere, its control-flow and region subgraphs included
    (so it must be traced again, functionalized)?"""
    return any(node.op == "call_function" and writes_to_argument(node)
               for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule) for node in sub.graph.nodes)
