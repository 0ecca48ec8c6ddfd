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

Names are lower-case, as in torch. An input keeps the name of a Python
builtin (``input``, ``sum``, ``min``), as in torch: fx's code generator binds
such a placeholder under a fresh local (``input_1 = input``), so the printed
forward still runs. Names the generated code itself reads (``torch``,
``fx_pytree``, ``inf``..., see :func:`may_shadow`) and keywords are suffixed
(``torch_1``): a parameter named ``torch`` would break ``torch.ops...`` in
the body (torch.export keeps it and its ``module()`` fails). Placeholder names
are used whole as the stem of their suffixes (``x_foo_0`` collides into
``x_foo_0_1``); operator names are split at a trailing ``_<n>`` (``add_1`` is
the stem ``add``).
"""
from __future__ import annotations

import builtins
import keyword
import re
from collections import defaultdict
from typing import Sequence

import torch.fx

from ...pytree import sanitize_name
from ...torch_private.fx import rename_in_namespace

_SUFFIXED = re.compile(r"(.*)_(\d+)$")
# Names an operator node never takes: fx names nodes clear of keywords and builtins, and
# graphcap keeps it so (only a placeholder may take a builtin's name, see may_shadow).
_RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins))


def builtins_called_by_name(graph: torch.fx.Graph) -> frozenset[str]:
    """Builtins the graph calls (``call_function`` on ``getattr``, ``len``...): fx's code names
    them bare in the body, so a placeholder of that name would shadow them."""
    names = set()
    for node in graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__module__", None) == "builtins":
            names.add(getattr(node.target, "__name__", ""))
    return frozenset(names)


def may_shadow(name: str, graph: "torch.fx.Graph | None" = None) -> bool:
    """Whether a placeholder may be named ``name`` although it is a builtin's name.

    It may unless the generated code reads that name itself: fx's own globals
    (``torch``, ``fx_pytree``, ``pytree``, ``inf``, ``nan``, ``device``...) and
    builtins the graph calls by name. Keywords never."""
    from ...torch_private.naming_and_shapes import fx_codegen_global_names
    if keyword.iskeyword(name) or name in fx_codegen_global_names():
        return False
    return graph is None or name not in builtins_called_by_name(graph)


class NameAllocator:
    """Hands out unique names, counting suffixes per stem.

    ``shadowable`` are builtin names a wanted placeholder name may take whole
    (see :func:`may_shadow`)."""

    def __init__(self, shadowable: frozenset[str] = frozenset()) -> None:
        from ...torch_private.naming_and_shapes import fx_codegen_global_names
        self.taken: set[str] = set(_RESERVED - shadowable) | fx_codegen_global_names()
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


def builtin_name_allowed(name: str, graph: "torch.fx.Graph | None" = None) -> bool:
    """Whether ``name`` is a builtin's name a placeholder may take (fx would suffix it)."""
    return name in _RESERVED and may_shadow(name, graph)


def shadowable_names(wanted: Sequence[str], graph: torch.fx.Graph) -> frozenset[str]:
    """The builtin names among ``wanted`` that placeholders of ``graph`` may take whole."""
    return frozenset(n for n in wanted if builtin_name_allowed(n, graph))


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


def copy_placeholder_names(copy: torch.fx.GraphModule, original: torch.fx.GraphModule) -> None:
    """Give ``copy``'s placeholders the names of ``original``'s after a deepcopy.

    fx's copy re-creates every name through its namespace, which suffixes one
    named like a builtin (``input`` becomes ``input_1``), while the signature and
    module call graph still say ``input``.
    """
    pairs = zip(original.graph.find_nodes(op="placeholder"), copy.graph.find_nodes(op="placeholder"))
    renamed = False
    for old, new in pairs:
        if new.name != old.name:
            set_node_name(new, old.name)
            new.target = old.target
            renamed = True
    if renamed:
        copy.recompile()
