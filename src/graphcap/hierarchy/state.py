"""Where the program's parameters, buffers and constants go in the rebuilt tree.

Each lifted placeholder names one FQN (its signature target). A tensor the
model held under several names (tied weights, a module shared under two
attributes) is one tensor of the program listed under each name; it is
installed, the same object, at every one of them, so ``state_dict()`` has
the original keys and a write through one name is seen through the others.

Tensors are the program's own (not copies), except buffers the program
updates: those are cloned once, as ``ep.module()`` does, so that running the
unflattened module leaves the program as it was.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import torch

from ..signature import InputKind, OutputKind
from ..trace.mutations import written_placeholders


@dataclasses.dataclass
class StateEntry:
    kind: InputKind
    target: str
    names: list[str]  # every FQN the same tensor has, the signature's target first
    value: Any
    persistent: bool = True


def _same_tensor_names(ep) -> dict[int, list[str]]:
    by_id: dict[int, list[str]] = {}
    for store in (ep.state_dict, ep.constants):
        for name, value in store.items():
            by_id.setdefault(id(value), []).append(name)
    return by_id


def state_entries(ep, placeholders: list[torch.fx.Node]) -> dict[torch.fx.Node, StateEntry]:
    """The lifted placeholders of ``ep`` (in the given copy of its graph) and what each holds."""
    sig = ep.graph_signature
    aliases = _same_tensor_names(ep)
    updated = {s.target for s in sig.output_specs if s.kind is OutputKind.BUFFER_MUTATION}
    original = [n for n in ep.graph.nodes if n.op == "placeholder"]
    written = set(written_placeholders(ep.graph))
    updated |= {s.target for s, n in zip(sig.input_specs, original) if n in written}
    clones: dict[int, torch.Tensor] = {}
    out: dict[torch.fx.Node, StateEntry] = {}
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind is InputKind.USER_INPUT:
            continue
        persistent = spec.persistent is not False
        if spec.kind is InputKind.PARAMETER or (spec.kind is InputKind.BUFFER and persistent):
            value = ep.state_dict[spec.target]
        else:
            value = ep.constants[spec.target]
        names = [spec.target] + [n for n in aliases.get(id(value), []) if n != spec.target]
        if spec.kind is InputKind.BUFFER and spec.target in updated and isinstance(value, torch.Tensor):
            value = clones.setdefault(id(value), value.clone())
        elif spec.kind is InputKind.PARAMETER and not isinstance(value, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=value.requires_grad)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ) and \
                isinstance(value, torch.Tensor) and value.requires_grad:
            value = value.detach()  # constants are not trained
        out[node] = StateEntry(spec.kind, spec.target, names, value, persistent)
    return out


def install_state(entries: dict[torch.fx.Node, StateEntry], module_at: Callable[[str], torch.nn.Module]) -> None:
    """Put every entry's tensor at each of its names; ``module_at(fqn)`` makes or finds a submodule."""
    for entry in entries.values():
        for name in entry.names:
            owner_fqn, _, field = name.rpartition(".")
            owner = module_at(owner_fqn)
            if entry.kind is InputKind.PARAMETER:
                owner.register_parameter(field, entry.value)
            elif entry.kind is InputKind.BUFFER:
                owner.register_buffer(field, entry.value, persistent=entry.persistent)
            else:
                owner.__dict__[field] = entry.value


def reachable_name(entry: StateEntry, scope_fqn: str) -> Optional[str]:
    """The entry's name relative to the module ``scope_fqn`` if one of its names lies under
    it (the signature's target preferred), else None."""
    if scope_fqn == "":
        return entry.names[0]
    prefix = scope_fqn + "."
    for name in entry.names:
        if name.startswith(prefix):
            return name[len(prefix):]
    return None
