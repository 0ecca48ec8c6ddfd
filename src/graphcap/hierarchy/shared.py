"""Submodules the model shared under several names, made one module again.

A program records each call under the name it was made through (``self.a``
and ``self.b`` for one module held twice) and lists the state under every
name, but does not say that the names held one object. Two rebuilt modules
are taken to be one when nothing can tell them apart: the same class, the
very same tensors under the same relative names (and some), the same
children by the same rule, and the same code (or no call at all). The later
name then holds the earlier module, as in the eager model, so a replacement
or a state change through one name is seen through the other.
"""
from __future__ import annotations

from typing import Optional

import torch

from .build import same_computation
from .modules import SubmoduleGraph
from .preserved import PreservedModule


def _children(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return dict(module.named_children())


def _state(module: torch.nn.Module, memo: dict[int, dict[str, int]]) -> dict[str, int]:
    """Relative name -> tensor id of everything ``module`` holds, children included (memoized)."""
    found = memo.get(id(module))
    if found is None:
        found = {name: id(t) for name, t in module.named_parameters(recurse=False, remove_duplicate=False)}
        found.update({name: id(t) for name, t in module.named_buffers(recurse=False, remove_duplicate=False)})
        for child_name, child in _children(module).items():
            found.update({f"{child_name}.{k}": v for k, v in _state(child, memo).items()})
        memo[id(module)] = found
    return found


def _same_module(a: SubmoduleGraph, b: SubmoduleGraph) -> bool:
    if type(a) is not type(b) or a._class_name != b._class_name or isinstance(a, PreservedModule):
        return False
    if a.graph is not None and b.graph is not None and not same_computation(a.graph, b.graph):
        return False
    children_a, children_b = _children(a), _children(b)
    return set(children_a) == set(children_b) and all(
        isinstance(ca, SubmoduleGraph) and isinstance(children_b[n], SubmoduleGraph) and _same_module(ca, children_b[n])
        for n, ca in children_a.items())


def merge_shared(root: torch.nn.Module, modules: dict[str, SubmoduleGraph]) -> None:
    """Point every later name of a shared module at its first module (see the module docstring)."""
    first_by_state: dict[tuple, str] = {}
    memo: dict[int, dict[str, int]] = {}
    for fqn, module in list(modules.items()):
        if not fqn or module is not modules.get(fqn):
            continue
        state = _state(module, memo)
        if not state:
            continue
        key = tuple(sorted(state.items()))
        earlier: Optional[str] = first_by_state.get(key)
        if earlier is None:
            first_by_state[key] = fqn
            continue
        keep = modules[earlier]
        if keep is module or not _same_module(keep, module):
            continue
        if module.graph is not None and keep.graph is None:
            keep.set_graph(module.graph)
        parent_fqn, _, leaf = fqn.rpartition(".")
        modules[parent_fqn].add_module(leaf, keep)
        prefix = fqn + "."
        for name in [n for n in modules if n == fqn or n.startswith(prefix)]:
            modules[name] = root.get_submodule(name)
