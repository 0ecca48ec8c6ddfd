"""The tree of module calls a flat program ran, read back from ``nn_module_stack``.

Every operator node of a program says which submodule calls it ran inside:
an ordered map from a call key (``L__self__n@1`` for the second call of
``self.n``) to ``(fqn, class)``. A *call scope* is one such call; the scopes
nest as the calls did, and each node belongs to the innermost call on its
stack. Nodes with no stack (placeholders, size reads, the output) belong to
the root call.

Only the call keys' ``@N`` suffix and the FQNs are read, so programs from
graphcap, from a file, or from torch (whose keys spell the path differently)
give the same tree.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch


@dataclasses.dataclass(eq=False)
class CallScope:
    """One module call: its FQN, which call of that module it was, and what ran inside it."""

    key: tuple[str, ...]  # the call keys from the root down to this call
    fqn: str
    index: int  # 0 for the module's first call, 1 for its second (``fqn@1``), ...
    class_name: str  # as the program records it: "pkg.mod.Block"
    parent: Optional["CallScope"] = None
    children: list["CallScope"] = dataclasses.field(default_factory=list)
    nodes: list[torch.fx.Node] = dataclasses.field(default_factory=list)  # directly inside, graph order

    @property
    def call_name(self) -> str:
        """``fqn`` for a first call, ``fqn@N`` for a later one (the call graph's names)."""
        return self.fqn if self.index == 0 else f"{self.fqn}@{self.index}"

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def members(self) -> set[torch.fx.Node]:
        """Every node that ran inside this call, its nested calls included."""
        out: set[torch.fx.Node] = set()
        for scope in self.walk():
            out.update(scope.nodes)
        return out


def call_index(key: str) -> int:
    """``L__self__n@2`` -> 2; a key without ``@N`` is a first call."""
    _, at, tail = key.rpartition("@")
    return int(tail) if at and tail.isdigit() else 0


def _class_path(cls: object) -> str:
    if isinstance(cls, str):
        return cls
    if isinstance(cls, type):
        return f"{cls.__module__}.{cls.__qualname__}"
    return str(cls)


def _path(node: torch.fx.Node) -> list[tuple[str, str, str]]:
    """(key, fqn, class) of every call on the node's stack below the root, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for key, entry in stack.items():
        if not isinstance(entry, tuple) or len(entry) != 2:
            continue
        fqn, cls = entry
        if fqn == "":
            continue  # the root's own entry
        out.append((key, fqn, _class_path(cls)))
    return out


def build_scopes(graph: torch.fx.Graph, root_class: str = "") -> CallScope:
    """The root call scope of ``graph`` with every call below it, each node in its innermost call."""
    root = CallScope(key=(), fqn="", index=0, class_name=root_class)
    by_key: dict[tuple[str, ...], CallScope] = {(): root}
    for node in graph.nodes:
        if node.op != "call_function":
            root.nodes.append(node)
            continue
        scope = root
        key: tuple[str, ...] = ()
        for call_key, fqn, cls in _path(node):
            if scope.fqn and not fqn.startswith(scope.fqn + "."):
                continue  # a module its caller does not hold (called through a closure): inline it
            key = key + (call_key,)
            found = by_key.get(key)
            if found is None:
                found = CallScope(key=key, fqn=fqn, index=call_index(call_key), class_name=cls, parent=scope)
                scope.children.append(found)
                by_key[key] = found
            scope = found
        scope.nodes.append(node)
    return root
