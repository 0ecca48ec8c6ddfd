"""Node names as torch.export gives them, where users read them.

Names are what a user sees of a program: the parameters of the printed
``forward``, the ``arg`` of every input spec, the variables of the code.
torch.export's rule, which graphcap follows so both print alike:

* graph inputs get exactly the name they are owed — the argument name
  (``div`` for ``forward(self, x, y, div)``), ``p_<fqn>``, ``b_<fqn>``,
  ``c_<name>`` — even when the recorder already gave that name to an
  operator node (``torch.div`` records a node called ``div``);
* every other node keeps the name the recorder gave it unless that name is
  taken; a taken ``<base>_<n>`` becomes ``<base>_<m>`` with ``m`` one past the
  highest suffix of ``base`` seen so far in graph order (so ``mul`` after an
  input ``mul_1`` becomes ``mul_2``);
* placeholders of a control-flow subgraph take the names of the values bound
  to them in the enclosing graph, and the subgraph's other nodes move aside
  by the same rule.

Input names themselves are kept whole: an input called ``mul_1`` is never
read as ``mul`` with suffix 1, but it does raise the next free suffix of
``mul``.
"""
from __future__ import annotations

import re
from typing import Iterable

import torch
import torch.fx

_SUFFIXED = re.compile(r"(.*)_(\d+)")


class NameAllocator:
    """Hands out names without collisions, suffixing the way torch.export does."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self._highest: dict[str, int] = {}

    def _note(self, name: str) -> None:
        self.used.add(name)
        match = _SUFFIXED.fullmatch(name)
        if match:
            base, n = match.group(1), int(match.group(2))
            self._highest[base] = max(self._highest.get(base, 0), n)

    def claim(self, name: str, keep_whole: bool = False) -> str:
        """``name`` if it is free, else the next free suffixed form of it."""
        match = None if keep_whole else _SUFFIXED.fullmatch(name)
        base = match.group(1) if match else name
        while name in self.used:
            name = f"{base}_{self._highest.get(base, 0) + 1}"
            self._highest[base] = self._highest.get(base, 0) + 1
        self._note(name)
        return name


def set_exact_name(node: torch.fx.Node, name: str) -> None:
    """Give ``node`` exactly ``name`` (fx's own rename would suffix a name it saw once)."""
    if node.name == name:
        return
    node.name = name
    node.graph._graph_namespace._rename_object(node, name)
    if node.op == "placeholder":
        node.target = name


def _assign(graph: torch.fx.Graph, inputs: Iterable[tuple[torch.fx.Node, str]]) -> None:
    """Inputs first (their names are owed), then every other node in graph order."""
    allocator = NameAllocator()
    final: dict[torch.fx.Node, str] = {}
    for node, name in inputs:
        final[node] = allocator.claim(name, keep_whole=True)
    for node in graph.nodes:
        if node not in final:
            final[node] = allocator.claim(node.name)
    # two steps, so that a name moving from one node to another never meets itself
    for i, node in enumerate(final):
        if node.name != final[node]:
            set_exact_name(node, f"__graphcap_renaming_{i}")
    for node, name in final.items():
        set_exact_name(node, name)


def name_inputs(graph: torch.fx.Graph, names: list[tuple[torch.fx.Node, str]]) -> None:
    """Name the given placeholders exactly; move other nodes' names aside as needed.

    ``names`` is in priority order (torch names user inputs before state),
    which decides who keeps a name two inputs both ask for.
    """
    _assign(graph, names)


def name_subgraph_inputs(sub: torch.fx.GraphModule, operands: list[object]) -> None:
    """Name ``sub``'s placeholders after the enclosing values bound to them."""
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    owed: list[tuple[torch.fx.Node, str]] = []
    for ph, value in zip(placeholders, operands):
        if isinstance(value, torch.fx.Node):
            owed.append((ph, value.name))
    _assign(sub.graph, owed)

