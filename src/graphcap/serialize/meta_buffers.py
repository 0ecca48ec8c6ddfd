"""Real values for the non-persistent buffers of a model built on the meta device.

A model built under ``torch.device("meta")`` has no data, and for its weights
that is the point: they come from a checkpoint when the program is loaded. Its
non-persistent buffers (rotary frequency tables, masks) are in no checkpoint:
the module computes them when it is constructed. So after an export of such a
model, each submodule that owns meta non-persistent buffers and holds no
parameters is built again on the CPU from what the instance keeps (its
constructor's arguments found among its attributes: transformers' rotary
embeddings take the ``config`` they keep), and the program's constants take the
buffers that construction computes. The user's model is left untouched.

A submodule is rebuilt only when that is sure to give the same buffers: every
required constructor argument is an attribute of the instance, the rebuilt
module has no parameters, the same buffers with the same shapes, and the same
plain attributes (ints, floats, strings, bools) as the instance. Otherwise its
buffers stay without data, and attaching weights names them with a fix.
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

_PLAIN = (int, float, str, bool)


def _constructor_arguments(module: torch.nn.Module) -> Optional[dict[str, Any]]:
    """The arguments that build ``type(module)`` again, from its attributes (None when one is missing)."""
    try:
        params = list(inspect.signature(type(module).__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    attrs = vars(module)
    found: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in attrs and not isinstance(attrs[p.name], (torch.Tensor, torch.nn.Module)):
            found[p.name] = attrs[p.name]
        elif p.name == "device":
            found[p.name] = torch.device("cpu")
        elif p.default is p.empty:
            return None
    return found


def _rebuilt(module: torch.nn.Module, names: list[str]) -> Optional[dict[str, torch.Tensor]]:
    """``module``'s buffers ``names`` computed by constructing its class again on the CPU."""
    arguments = _constructor_arguments(module)
    if arguments is None:
        return None
    try:
        with torch.device("cpu"):
            fresh = type(module)(**arguments)
    except Exception:  # a class that cannot be built this way keeps its buffers without data
        return None
    if any(True for _ in fresh.parameters()):
        return None
    same_plain = all(fresh.__dict__.get(k) == v for k, v in vars(module).items()
                     if isinstance(v, _PLAIN) and not k.startswith("_") and k != "training")
    if not same_plain:
        return None
    out: dict[str, torch.Tensor] = {}
    for name in names:
        old = dict(module.named_buffers(recurse=False)).get(name)
        new = dict(fresh.named_buffers(recurse=False)).get(name)
        if old is None or new is None or tuple(new.shape) != tuple(old.shape) or new.device.type == "meta":
            return None
        out[name] = new.detach().to(dtype=old.dtype)
    return out


def materialise(model: Any, ep: Any) -> list[str]:
    """Give ``ep``'s meta non-persistent buffers their real values (see the module's docstring).

    Returns the FQNs that got data. Nothing changes when the model holds no
    meta buffers.
    """
    constants = getattr(ep, "constants", None)
    if not isinstance(model, torch.nn.Module) or not constants:
        return []
    meta = {fqn for fqn, t in constants.items() if isinstance(t, torch.Tensor) and t.device.type == "meta"}
    if not meta:
        return []
    by_owner: dict[str, list[str]] = {}
    for fqn in meta:
        owner, _, name = fqn.rpartition(".")
        by_owner.setdefault(owner, []).append(name)
    done: list[str] = []
    for owner, names in by_owner.items():
        try:
            module = model.get_submodule(owner) if owner else model
        except AttributeError:
            continue
        persistent = set(module.state_dict(keep_vars=True))
        if any(True for _ in module.parameters()) or any(n in persistent for n in names):
            continue
        values = _rebuilt(module, names)
        if values is None:
            continue
        for name, value in values.items():
            fqn = f"{owner}.{name}" if owner else name
            constants[fqn] = value
            done.append(fqn)
    return done
