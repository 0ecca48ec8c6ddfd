"""Names of the nodes of a lifted graph, chosen as torch.export chooses them.

Users read these names (printed programs, ``graph_signature``) and write code
against them, so the rules are torch's:

* user inputs are named first, from the argument name and pytree path, so a
  user's ``p_param`` argument keeps that name;
* then parameters, buffers and constants get ``p_`` / ``b_`` / ``c_`` plus
  their FQN (dots as underscores); a name already taken gets the next free
  ``_<n>`` suffix (``p_param_1``);
* last, every operator node keeps its name unless a placeholder took it, in
  which case it moves on to the next free suffix of its stem (``mul`` →
  ``mul_1``; ``mul_1`` → ``mul_2`` when that is taken too).

Names are lower-case, as in torch. Unlike torch, a name Python reserves
(``input``, ``sum``) is suffixed as fx would suffix it (``input_1``). Placeholder names are used whole as the
stem of their suffixes (``x_foo_0`` collides into ``x_foo_0_1``); operator
names are split at a trailing ``_<n>`` (``add_1`` is the stem ``add``).
"""
from __future__ import annotations

import builtins
import keyword
import re
from collections import defaultdict
from typing import Sequence

import torch.fx

from ..pytree import sanitize_name
from ..torch_private.fx import rename_in_namespace

_SUFFIXED = re.compile(r"(.*)_(\d+)$")
# Names generated code cannot bind: fx gives them a suffix (``input`` → ``input_1``), and so
# does graphcap, so that every program reloads and retraces under the names it printed.
_RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins))


class NameAllocator:
    """Hands out unique names, counting suffixes per stem."""

    def __init__(self) -> None:
        self.taken: set[str] = set(_RESERVED)
        self._highest: dict[str, int] = defaultdict(int)

    def take(self, wanted: str, *, whole_stem: bool) -> str:
        stem = wanted
        match = _SUFFIXED.match(wanted)
        if match and not whole_stem:
            stem = match.group(1)
        name = wanted
        if name in self.taken:
            name = f"{stem}_{self._highest[stem] + 1}"
            while name in self.taken:  # a name chosen outside the counting (rare)
                self._highest[stem] += 1
                name = f"{stem}_{self._highest[stem] + 1}"
        match = _SUFFIXED.match(name)
        if match:
            prefix, n = match.group(1), int(match.group(2))
            self._highest[prefix] = max(self._highest[prefix], n)
        self.taken.add(name)
        return name


def graph_name(text: str) -> str:
    """A valid, lower-case node name for an FQN or input path."""
    return sanitize_name(text.replace(".", "_")).lower()


def assign_names(graph: torch.fx.Graph, placeholder_names: Sequence[str],
                 user_positions: Sequence[int]) -> None:
    """Rename every node of ``graph``.

    ``placeholder_names`` are the wanted names of the placeholders, in graph
    order; ``user_positions`` are the indices of the user inputs among them,
    which are served first.
    """
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    names = NameAllocator()
    chosen: dict[torch.fx.Node, str] = {}
    user = set(user_positions)
    for i in user_positions:
        chosen[placeholders[i]] = names.take(graph_name(placeholder_names[i]), whole_stem=True)
    for i, (node, wanted) in enumerate(zip(placeholders, placeholder_names)):
        if i not in user:
            chosen[node] = names.take(graph_name(wanted), whole_stem=True)
    for node in graph.nodes:
        if node.op != "placeholder":
            chosen[node] = names.take(node.name, whole_stem=False)
    for node, name in chosen.items():
        set_node_name(node, name)
        if node.op == "placeholder":
            node.target = name


def set_node_name(node: torch.fx.Node, name: str) -> None:
    """Give ``node`` exactly ``name`` and keep the graph's namespace aware of it.

    fx's own rename picks a fresh name when the wanted one was ever used, so a
    whole-graph renaming that swaps names sets them directly; registering the
    name keeps nodes created later from reusing it.
    """
    if node.name == name:
        return
    node.name = name
    rename_in_namespace(node, name)
