"""Rename a graph whose inputs are owed given names, by torch.export's rule.

Three places name a graph's inputs: a lifted program's take the names of the
user's arguments and of the state they hold (``p_``/``b_``/``c_`` + FQN, see
:mod:`.node_names`), a control-flow subgraph's take the names of the values bound
to them, and a decomposed program's take the names they had before. The owed
names are given whole, in the order given (an earlier one wins a clash); every
other node keeps its name unless it is taken, then moves to the next free
suffix of its stem (the counting of :class:`.node_names.NameAllocator`).
"""
from __future__ import annotations

from typing import Sequence

import torch.fx

from .node_names import NameAllocator, set_node_name, shadowable_names


def apply_owed_names(graph: torch.fx.Graph, owed: Sequence[tuple[torch.fx.Node, str]]) -> None:
    """An owed name that is a builtin's (an input named ``input``) is given whole too, as
    the program it comes from had it (see :func:`.node_names.may_shadow`)."""
    names = NameAllocator(shadowable_names([name for _, name in owed], graph))
    chosen: dict[torch.fx.Node, str] = {node: names.take(name, whole_stem=True) for node, name in owed}
    for node in graph.nodes:
        if node not in chosen:
            chosen[node] = names.take(node.name, whole_stem=node.op == "placeholder")
    for i, node in enumerate(chosen):  # two steps: a name may pass from one node to another
        set_node_name(node, f"_renaming_{i}")
    for node, name in chosen.items():
        set_node_name(node, name)
        if node.op == "placeholder":
            node.target = name
