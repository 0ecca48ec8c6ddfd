"""Runtime-assert nodes named as torch.export names them, in every program.

A runtime assert is a node the assert step inserts after recording, so fx names
it as it names an inserted overload: ``_assert_scalar_default``,
``_assert_scalar_default_1``... (torch.export's programs read so before and after
``run_decompositions``). Its message ends with the node it checks, ``... on node
'ge_1'``, and that must stay the name of the condition the assert reads: a
program renamed after the message was written (a decomposition's retrace, whose
nodes count afresh) would otherwise point the reader at a node it does not have.
"""
from __future__ import annotations

import torch
import torch.fx

from .node_names import NameAllocator, set_node_name

# the asserts the assert step inserts, and the stem fx gives an inserted call of each
_INSERTED_STEMS = {
    torch.ops.aten._assert_scalar.default: "_assert_scalar_default",
    torch.ops.aten.sym_constrain_range_for_size.default: "sym_constrain_range_for_size_default",
}
_ON_NODE = " on node '"


def name_runtime_asserts(gm: torch.fx.GraphModule) -> bool:
    """Give ``gm``'s runtime asserts (subgraphs' too) their inserted names and make each message
    name the condition node it reads. Returns whether a graph changed (its code is then stale)."""
    changed = False
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            changed |= _name_in(sub.graph)
    return changed


def _name_in(graph: torch.fx.Graph) -> bool:
    asserts = [n for n in graph.nodes if n.op == "call_function" and n.target in _INSERTED_STEMS]
    if not asserts:
        return False
    changed = False
    for node in asserts:
        changed |= _point_message_at_condition(node)
    wrong = [n for n in asserts if not _has_stem(n.name, _INSERTED_STEMS[n.target])]
    if not wrong:
        return changed
    names = NameAllocator()
    for node in graph.nodes:
        if node not in wrong:
            names.take(node.name, whole_stem=True)
    for node in wrong:  # in graph order, so the suffixes count down the program
        set_node_name(node, names.take(_INSERTED_STEMS[node.target], whole_stem=False))
    return True


def _has_stem(name: str, stem: str) -> bool:
    return name == stem or (name.startswith(stem + "_") and name[len(stem) + 1:].isdigit())


def _point_message_at_condition(node: torch.fx.Node) -> bool:
    if len(node.args) < 2 or not isinstance(node.args[0], torch.fx.Node) or not isinstance(node.args[1], str):
        return False
    message, condition = node.args[1], node.args[0].name
    at = message.rfind(_ON_NODE)
    if at < 0 or not message.endswith("'") or message[at + len(_ON_NODE):-1] == condition:
        return False
    node.args = (node.args[0], f"{message[:at + len(_ON_NODE)]}{condition}'", *node.args[2:])
    return True
