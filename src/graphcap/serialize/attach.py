"""Matching a weights source against a program, and attaching its tensors.

``graphcap.load(f, weights=source)`` calls :func:`attach` with the program's
tensor table (program.json's ``state``) and the opened source
(``checkpoints``). Every tensor the program needs (all weights, and the
constants the file holds no data for) is looked up by its FQN; a tied group
(one tensor under several names) by any of its names. Shapes and dtypes are
compared from the source's headers before any data is read, and all problems
are reported in one error, so one round of fixes suffices.
"""
from __future__ import annotations

import difflib
from typing import Any, Optional

import torch

from ..errors import SerializationError
from . import placement
from .checkpoints import SHOWN, Checkpoint, listed, refuse
from .tensors import without_data
from .values import DTYPES, bad, decode_device

# ---------------------------------------------------------------------------

def _expected(name: str, d: Any) -> tuple[tuple[int, ...], torch.dtype, torch.device, dict[str, Any]]:
    try:
        shape = tuple(d["shape"])
        dtype = DTYPES[d["dtype"]]
        device = decode_device(d["device"])
    except (KeyError, TypeError):
        raise bad(f"The description of tensor {name!r} is malformed.") from None
    if not all(type(s) is int and s >= 0 for s in shape):
        raise bad(f"The shape of tensor {name!r} is malformed.")
    return shape, dtype, device, d


class _Group:
    """The names of one program tensor (several when tied) and its description."""

    def __init__(self, kind: str, name: str, description: Any, required: bool):
        self.kind, self.names, self.required = kind, [name], required
        self.shape, self.dtype, self.device, self.description = _expected(name, description)


def _groups(state: dict[str, Any]) -> list[_Group]:
    groups: dict[tuple[str, str], _Group] = {}
    for kind in ("weights", "constants"):
        described = state.get(kind)
        if not isinstance(described, dict):
            raise bad("The tensor table is malformed.")
        external = set(without_data(described))
        for name, d in described.items():
            if not isinstance(d, dict):
                raise bad(f"The description of tensor {name!r} is malformed.")
            if "alias_of" in d:
                continue
            groups[(kind, name)] = _Group(kind, name, d, required=kind == "weights" or name in external)
        for name, d in described.items():
            if "alias_of" in d:
                group = groups.get((kind, d["alias_of"])) if isinstance(d["alias_of"], str) else None
                if group is None:
                    raise bad(f"Tensor {name!r} is an alias of a tensor the file does not describe.")
                group.names.append(name)
    return list(groups.values())


def _fixes(problems: dict[str, list[str]], unknown: list[str], known: list[str], missing_constants: bool) -> str:
    fixes = []
    if problems["missing"]:
        fixes.append("Give every weight under its FQN (the keys of ep.state_dict; a tied weight under any one of "
                     "its names).")
        if missing_constants:
            fixes.append("A constant (a non-persistent buffer such as a rotary frequency table, or a tensor made "
                         "in forward) is in no checkpoint. graphcap gives such buffers their values at export by "
                         "building their submodule again on the CPU when its class can be built from the "
                         "attributes the instance keeps (as transformers' rotary embeddings from their config); "
                         "this one could not be. Before exporting, build it yourself on the CPU, e.g. "
                         "model.<path> = type(model.<path>)(config) for the submodule owning the buffer, so "
                         "save(..., weights=False) keeps it, or add the buffer to a mapping passed as weights=.")
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (the program's closest name to {unknown[0]!r} is {close[0]!r})" if close else ""
        fixes.append(f"Names must be the program's state FQNs{hint}: rename the keys in a mapping "
                     f"(weights={{new: t for ...}}) or leave out tensors the program does not use.")
    if problems["shape"] or problems["dtype"]:
        fixes.append("Export the model with the checkpoint's configuration and dtype (e.g. model.to(torch.bfloat16) "
                     "on the meta device before export), or convert the checkpoint.")
    if problems["tied"]:
        fixes.append("The program ties these names (one tensor): give the tensor under one of them only.")
    return " ".join(fixes)


def attach(state: dict[str, Any], loaded: dict[str, dict[str, torch.Tensor]],
           checkpoint: Checkpoint) -> tuple[dict[str, dict[str, torch.Tensor]], bool]:
    """The program's weights (and constants the file lacks) from ``checkpoint``.

    ``state`` is program.json's tensor table, ``loaded`` the constants already
    read from the file (a checkpoint tensor of the same name replaces one).
    Returns the state in the file's order and whether tensors exported on the
    meta device got data (the program's meta placements must then move).
    """
    groups = _groups(state)
    provided = checkpoint.names()
    by_name = {n: g for g in groups for n in g.names}
    unknown = [n for n in provided if n not in by_name]
    present_set = set(provided)
    problems: dict[str, list[str]] = {"missing": [], "shape": [], "dtype": [], "tied": []}
    chosen: dict[int, str] = {}
    missing_constants = False
    for g in groups:
        present = [n for n in g.names if n in present_set]
        if not present:
            if g.required:
                problems["missing"].append(" = ".join(repr(n) for n in g.names))
                missing_constants |= g.kind == "constants"
            continue
        if any(not checkpoint.same_tensor(present[0], other) for other in present[1:]):
            problems["tied"].append(" and ".join(repr(n) for n in present))
            continue
        shape, dtype = checkpoint.header(present[0])
        if shape != g.shape:
            problems["shape"].append(f"{present[0]!r} has shape {list(shape)} in {checkpoint.label}, "
                                     f"{list(g.shape)} in the program")
        elif dtype != g.dtype:
            problems["dtype"].append(f"{present[0]!r} is {dtype} in {checkpoint.label}, {g.dtype} in the program")
        else:
            chosen[id(g)] = present[0]
    if unknown or any(problems.values()):
        lines = []
        if problems["missing"]:
            lines.append(f"missing from {checkpoint.label}: " + listed(problems["missing"], quoted=True))
        if unknown:
            lines.append(f"in {checkpoint.label} but not in the program: {listed(unknown)}")
        for kind in ("shape", "dtype", "tied"):
            lines += [f"{'tied in the program, two tensors in the source: ' if kind == 'tied' else ''}{p}"
                      for p in problems[kind][:SHOWN]]
            if len(problems[kind]) > SHOWN:
                lines.append(f"... and {len(problems[kind]) - SHOWN} more {kind} mismatches")
        raise refuse("The weights do not match the program:\n  " + "\n  ".join(lines),
                     f"graphcap.load(f, weights={checkpoint.label!r})",
                     _fixes(problems, unknown, list(by_name), missing_constants))

    out = {kind: dict(loaded.get(kind, {})) for kind in ("weights", "constants")}
    from_meta = False
    for g in groups:
        source = chosen.get(id(g))
        if source is None:
            continue
        t = _placed(source, checkpoint.tensor(source), g, checkpoint)
        from_meta |= g.device.type == "meta"
        for name in g.names:
            out[g.kind][name] = t
    ordered = {kind: {n: out[kind][n] for n in state[kind] if n in out[kind]} for kind in ("weights", "constants")}
    return ordered, from_meta


def _placed(name: str, t: torch.Tensor, g: _Group, checkpoint: Checkpoint) -> torch.Tensor:
    """The tensor as the program holds it: checked, on its device, a Parameter where it was one."""
    if tuple(t.shape) != g.shape or t.dtype != g.dtype:  # what was read must be what the header said
        raise refuse(f"{name!r} read from {checkpoint.label} is {t.dtype} {list(t.shape)}, not the "
                     f"{g.dtype} {list(g.shape)} its header announced.",
                     f"graphcap.load(f, weights={checkpoint.label!r})",
                     "The file is damaged: save the checkpoint again.")
    device = placement.placed_device(g.device)
    if device.type != "meta" and t.device != device:
        try:
            t = t.to(device)
        except (RuntimeError, AssertionError) as e:
            raise refuse(f"{name!r} belongs on {device}, which this process cannot use ({e}).",
                         f"graphcap.load(f, weights={checkpoint.label!r})",
                         f"Load it onto a device this machine has: graphcap.load(f, weights={checkpoint.label!r}, "
                         "map_location='cpu').") from None
    if g.description.get("parameter"):
        return torch.nn.Parameter(t, requires_grad=bool(g.description.get("requires_grad")))
    if g.description.get("requires_grad") and t.is_floating_point():
        t = t.detach().requires_grad_(True)  # a leaf, not a view of the checkpoint (as tensors.py)
    return t


def structure_only_error(path: Optional[str] = None) -> SerializationError:
    """The refusal of a structure-only file loaded without weights; ``path`` names it in the code."""
    f = repr(path) if path is not None else "f"
    return SerializationError(
        "The file holds the program's structure without its weights (it was saved with weights=False).",
        where=f"graphcap.load({f})",
        fix=f"Attach the weights as it loads: graphcap.load({f}, weights='model.safetensors') (or a checkpoint "
            f"folder written by save_pretrained, or a mapping {{fqn: tensor}}); graphcap.load({f}, weights=False) "
            f"loads the structure alone.")


def move_meta_placements(ep: Any) -> Any:
    """``ep`` with what it placed on the meta device placed where its attached weights are.

    A model exported on the meta device records ``device=meta`` wherever forward
    made a tensor on its weights' device (``torch.arange(..., device=w.device)``),
    and its fake values say meta; with real weights attached, those must follow
    the weights, or the first kernel would mix a meta tensor with a real one.
    """
    from ..passes.move_to_device import move_to_device_pass
    placed = [t.device for t in (*ep.state_dict.values(), *ep.constants.values())
              if isinstance(t, torch.Tensor) and t.device.type != "meta"]
    if not placed:
        return ep
    return move_to_device_pass(ep, {"meta": placed[0]})
