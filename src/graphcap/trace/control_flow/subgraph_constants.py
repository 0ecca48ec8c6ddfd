"""Hoist tensor constants out of control-flow subgraphs into operands of the operator.

Tensors a branch closes over, and tensor constants it makes
(``torch.tensor([1., 2.])`` inside a body), are constants of the subgraph;
they are hoisted to the enclosing graph and passed in as extra operands — a
closed-over value as the node that made it, a constant as a lifted ``c_...``
input (:func:`hoist_constants`).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ...errors import UnsupportedError
from ...node_facts import hop_name, subgraph_operands
from .closures import closure_source, forget_recording
from .hops import EXTRA_OPERANDS_AT, subgraph_module


def _tensor_constants(sub: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in sub.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(sub, n.target, None), torch.Tensor)]


def _append_placeholder(sub: torch.fx.GraphModule, name: str, val: Any) -> torch.fx.Node:
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    where = (sub.graph.inserting_after(placeholders[-1]) if placeholders
             else sub.graph.inserting_before(next(iter(sub.graph.nodes))))
    with where:
        ph = sub.graph.placeholder(name)
    ph.meta["val"] = val
    return ph


def hoist_constants(gm: torch.fx.GraphModule, fake_mode) -> None:
    """Move tensor constants out of control-flow subgraphs into ``gm``, innermost first.

    A tensor a branch closed over (made by the enclosing graph, or one of its
    inputs) is passed as that value; any other constant becomes a ``get_attr``
    of ``gm``. Either is an extra operand of the operator, and every subgraph
    of that operator gets a matching placeholder at the end of its inputs (the
    operators bind them last).
    """
    _hoist_constants(gm, fake_mode)
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            forget_recording(sub.graph)


# operators whose subgraphs each take their closed-over values in an argument of their own:
# operator -> [(the argument holding the subgraph, as a path of positions; the argument its extra
# operands go to)]. flex_attention calls score_mod(score, b, h, q_idx, kv_idx, *score_mod_other_buffers)
# and mask_mod(b, h, q_idx, kv_idx, *mask_mod_other_buffers); its block mask tuple ends with mask_mod.
_OWN_OPERAND_SLOTS = {"flex_attention": [((3,), 7), ((4, -1), 8)]}


def _at_path(args: Any, path: tuple[int, ...]) -> Any:
    for i in path:
        if not isinstance(args, (tuple, list)) or not args or i >= len(args) or i < -len(args):
            return None
        args = args[i]
    return args


def _groups(gm: torch.fx.GraphModule, node: torch.fx.Node) -> list[tuple[list, Any]]:
    """The subgraphs of ``node`` that share one argument for their extra operands, with that
    argument's position (None: the operator has none)."""
    slots = _OWN_OPERAND_SLOTS.get(hop_name(node) or "")
    if slots is not None:
        groups = []
        for path, at in slots:
            sub = subgraph_module(gm, _at_path(node.args, path))
            if sub is not None and len(node.args) > at:
                groups.append(([sub], at))
        return groups
    pairs = [subgraph_module(gm, attr) for attr, _ in subgraph_operands(node)]
    subs = [sub for i, sub in enumerate(pairs) if sub is not None and all(sub is not other for other in pairs[:i])]
    return [(subs, EXTRA_OPERANDS_AT.get(hop_name(node)))] if subs else []


def _hoist_constants(gm: torch.fx.GraphModule, fake_mode) -> None:
    for node in list(gm.graph.nodes):
        for subs, at in _groups(gm, node):
            for sub in subs:
                _hoist_constants(sub, fake_mode)
            _hoist_group(gm, node, subs, at, fake_mode)


def _hoist_group(gm: torch.fx.GraphModule, node: torch.fx.Node, subs: list, at: Any, fake_mode) -> None:
    """Hoist the constants of ``subs`` (the subgraphs of ``node`` that take extra operands in
    argument ``at``) into ``gm``, appended to that argument."""
    found: dict[int, torch.Tensor] = {}
    for sub in subs:
        for c in _tensor_constants(sub):
            value = getattr(sub, c.target)
            found.setdefault(id(value), value)
    if not found:
        return
    if at is None:
        raise UnsupportedError(
            f"A tensor constant is created inside the body of {hop_name(node)}, which graphcap "
            "cannot pass in as an operand.",
            where=f"graph node {node.name}",
            fix="Create the tensor outside the region (or register it as a buffer) and use it there.")
    new_operands = []
    for i, value in enumerate(found.values()):
        source = closure_source(gm.graph, value)
        if source is not None:  # a tensor the enclosing graph made (or took in), closed over
            new_operands.append(source)
            val = source.meta.get("val", value)
        else:
            name = f"_cf_constant_{len([a for a in dir(gm) if a.startswith('_cf_constant_')])}"
            setattr(gm, name, value)
            with gm.graph.inserting_before(node):
                new_operands.append(gm.graph.get_attr(name))
            val = fake_mode.from_tensor(value, static_shapes=True)
        for sub in subs:
            ph = _append_placeholder(sub, f"constant_{i}", val)
            for c in _tensor_constants(sub):
                if getattr(sub, c.target) is value:
                    c.replace_all_uses_with(ph)
                    sub.graph.erase_node(c)
    for sub in subs:
        used = {n.target for n in sub.graph.nodes if n.op == "get_attr"}
        # a closed-over parameter is a Parameter attribute of the branch (``_param_constant0``):
        # left behind, the program would hold a fake tensor the user never sees
        held = [*(t for t, v in vars(sub).items() if isinstance(v, torch.Tensor)),
                *(t for t, _ in sub.named_buffers(recurse=False)),
                *(t for t, _ in sub.named_parameters(recurse=False))]
        for target in [t for t in held if t not in used]:
            delattr(sub, target)
    args = list(node.args)
    args[at] = type(args[at])([*args[at], *new_operands])
    node.args = tuple(args)
    if hop_name(node) == "cond":
        _order_cond_operands(node, subs, len(args[at]) - len(new_operands))


def _placeholders(sub: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in sub.graph.nodes if n.op == "placeholder"]


def _order_cond_operands(node: torch.fx.Node, branches: list, given: int) -> None:
    """Order a cond's operands as torch's capture orders them: values both branches close
    over, the operands the user gave, then values only the true branch, then only the false
    branch closes over (each subgraph's placeholders follow)."""
    if len(branches) != 2:
        return
    operands = list(node.args[3])
    used = [[bool(ph.users) for ph in _placeholders(sub)] for sub in branches]
    extra = range(given, len(operands))
    shared = [i for i in extra if used[0][i] and used[1][i]]
    true_only = [i for i in extra if used[0][i] and not used[1][i]]
    false_only = [i for i in extra if used[1][i] and not used[0][i]]
    unused = [i for i in extra if not used[0][i] and not used[1][i]]
    order = [*shared, *range(given), *true_only, *false_only, *unused]
    if order == list(range(len(operands))):
        return
    for sub in branches:
        placeholders = _placeholders(sub)
        anchor = next(n for n in sub.graph.nodes if n.op != "placeholder")
        for i in order:
            anchor.prepend(placeholders[i])
    args = list(node.args)
    args[3] = type(node.args[3])(operands[i] for i in order)
    node.args = tuple(args)
