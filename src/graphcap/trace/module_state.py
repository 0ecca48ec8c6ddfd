"""The user's modules while their forward is traced: what it changes, and undoing it.

A forward runs on fake tensors during export. What it stores on the module
must not outlive the trace (a fake tensor left in a model breaks its next
eager call), and what it means must not be lost:

* a registered buffer given a new tensor (``self.buf = self.buf + 1``) is a
  buffer update, like ``self.buf.add_(1)``: :func:`reassigned_buffers` finds
  them so that the program writes the new value into the buffer (an in-graph
  ``copy_``, as torch's training IR records it);
* a plain tensor attribute assigned (``self.cache = x * 2``, an entry of a
  dict or list attribute, a buffer registered inside forward) is not state
  an exported program can carry: the program computes with it, the module
  is restored, and a ``UserWarning`` names each such attribute so the user
  can register it as a buffer (torch warns the same way).
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Optional

import torch

from ..errors import UnsupportedError
from ..pytree import holds_tensor
from ..torch_private.fake import FakeTensor
from ..torch_private.modules import (
    BUFFER_REGISTRY,
    HOOK_FIELD_PREFIXES,
    REGISTRY_FIELDS,
    buffers_of,
    children_of,
    non_persistent_buffer_names,
    registry_view,
)

# nn.Module's registries, restored entry by entry rather than as attributes
_REGISTRIES = REGISTRY_FIELDS


def _container_copy(value: Any) -> Any:
    return dict(value) if type(value) is dict else list(value) if type(value) is list else None


def _assigned_paths(path: str, old: Any, new: Any, out: list[str], state: frozenset = frozenset()) -> None:
    """Append the paths under ``path`` where a tensor was put in place of ``old``.

    An entry that held one of the model's own parameters or buffers (``state``, by id) is not
    named: a module keeping references to its weights (an RNN's ``_flat_weights`` list) sees them
    swapped with the trace's stand-ins by the export itself, not by forward."""
    if old is new or (isinstance(old, torch.Tensor) and id(old) in state):
        return
    if isinstance(new, torch.Tensor):
        out.append(path)
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            _assigned_paths(f"{path}[{key!r}]", old.get(key), new.get(key), out, state)
    elif isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _assigned_paths(f"{path}[{i}]", old[i] if i < len(old) else None,
                            new[i] if i < len(new) else None, out, state)


def _warn_assigned(paths: list[str]) -> None:
    if not paths:
        return
    noun, verb = ("attributes", "were") if len(paths) > 1 else ("attribute", "was")
    warnings.warn(
        f"The tensor {noun} {', '.join(paths)} {verb} assigned during export. The exported "
        f"program used the new value while tracing, but it cannot keep it as state: the module "
        f"was restored. If forward has to update a tensor across calls, register it as a buffer "
        f"(self.register_buffer(name, tensor)); buffer updates become outputs of the program.",
        UserWarning, stacklevel=4)


@contextlib.contextmanager
def preserved_module_attributes(root: Optional[torch.nn.Module]) -> Iterator[None]:
    """Undo attribute writes the traced forward makes on the user's modules.

    Some models cache tensors on themselves during forward (timm's
    EfficientFormer keeps an ``attention_bias_cache`` dict). During export
    those would be fake tensors left behind in the user's model, so plain
    attributes, the contents of dict/list attributes and buffers registered
    during forward are put back as they were, and the tensor ones are named
    in a warning (see the module docstring).
    """
    if root is None:
        yield
        return
    saved = []
    state_ids = frozenset(id(t) for t in (*root.parameters(), *root.buffers()))
    for prefix, mod in root.named_modules(remove_duplicate=True):
        state = {}
        for k, v in mod.__dict__.items():
            if k in _REGISTRIES:
                v = registry_view(v)  # a ScriptModule's registry is no dict
                state[k] = (v, dict(v))  # entries swapped by reparametrization come back by themselves
            elif k.startswith(HOOK_FIELD_PREFIXES):
                state[k] = None  # hooks: the user's business
            else:
                state[k] = (v, _container_copy(v))
        saved.append((prefix, mod, state))
    try:
        yield
    finally:
        assigned: list[str] = []
        for prefix, mod, state in saved:
            where = f"self.{prefix}." if prefix else "self."
            for k in [k for k in mod.__dict__ if k not in state]:
                if holds_tensor(mod.__dict__[k]):
                    _assigned_paths(where + k, None, mod.__dict__[k], assigned)
                    del mod.__dict__[k]
            for k, entry in state.items():
                if entry is None:
                    continue
                v, copy = entry
                if k in _REGISTRIES:
                    for name in [n for n in v if n not in copy]:  # registered during forward
                        if isinstance(v[name], torch.Tensor):
                            assigned.append(where + name)
                        del v[name]
                        if k == BUFFER_REGISTRY:
                            non_persistent_buffer_names(mod).discard(name)
                    continue
                _assigned_paths(where + k, copy if copy is not None else v, mod.__dict__.get(k), assigned, state_ids)
                mod.__dict__[k] = v
                if copy is not None:
                    v.clear()
                    if isinstance(v, dict):
                        v.update(copy)
                    else:
                        v.extend(copy)
        _warn_assigned(assigned)


def reassigned_buffers(root: torch.nn.Module, passed: dict[str, torch.Tensor],
                       buffer_names: list[str]) -> dict[str, torch.Tensor]:
    """Buffers that now hold another tensor than the one passed in for the trace.

    Call it inside the reparametrization, right after forward returned.
    """
    found: dict[str, torch.Tensor] = {}
    for fqn in buffer_names:
        *path, leaf = fqn.split(".")
        mod = root
        for part in path:
            mod = children_of(mod).get(part) if mod is not None else None
        current = buffers_of(mod).get(leaf) if mod is not None else None  # views: ScriptModules too
        original = passed[fqn]
        if current is original or not isinstance(current, torch.Tensor):
            continue
        if current.shape != original.shape or current.dtype != original.dtype:
            raise UnsupportedError(
                f"forward gives buffer {fqn!r} a new tensor of dtype {current.dtype} and shape "
                f"{list(current.shape)}; the buffer is {original.dtype} {list(original.shape)}.",
                where=f"buffer {fqn}",
                fix="An exported program updates a buffer in place, so the new value needs the "
                    "buffer's shape and dtype. Register the buffer with the shape it will have, or "
                    "keep the changing value in a plain variable returned from forward.")
        if not isinstance(current, FakeTensor):  # a real tensor from outside: a constant of the graph
            current = current.clone()
        found[fqn] = current
    return found
