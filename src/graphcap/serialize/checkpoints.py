"""Weights attached at load time: a safetensors file, a sharded checkpoint, or a mapping.

A big model is exported without its weights (built on the meta device) and
saved as structure alone (``graphcap.save(ep, f, weights=False)``); the
weights join it when the program is loaded, from wherever they already are:
``graphcap.load(f, weights=source)``. This module reads such a source and
matches it against the program's description of every tensor.

- Names are the program's state FQNs (``ep.state_dict`` and ``ep.constants``
  keys), as ``model.state_dict()`` and transformers' ``save_pretrained``
  write them. Tied weights (one tensor under several names) need the tensor
  under any one of their names; two *different* tensors for them are refused.
- Each tensor's shape and dtype are checked against the program from the
  checkpoint's header, before any data is read; every problem (missing, extra,
  mismatched, tied) is listed in one error naming the tensors and the fix.
- safetensors files are memory-mapped (``safe_open``): a tensor's bytes stay in
  the file until a kernel reads them, so a 70B checkpoint needs no RAM to load.
  The files are private mappings: writing to a weight never writes the file.
  Pickle-based checkpoints (``.bin``, ``.pt``) are refused: unpickling runs code.
"""
from __future__ import annotations

import difflib
import json
import os
from typing import Any, Mapping, Optional, Union

import torch

from ..errors import SerializationError
from .tensors import _CODES, has_data, without_data
from .values import DTYPES, bad, decode_device

WeightsArg = Union[bool, str, "os.PathLike[str]", Mapping[str, torch.Tensor]]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_INDEX_BYTES = 1 << 28
_SHOWN = 8  # names listed per kind of problem


def _error(what: str, where: str, fix: str) -> SerializationError:
    return SerializationError(what, where=where, fix=fix)


# ---------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------

class Checkpoint:
    """Names, headers (shape, dtype) and tensors of one weights source, read lazily."""

    label: str

    def names(self) -> list[str]:
        raise NotImplementedError

    def header(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        raise NotImplementedError

    def tensor(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def same_tensor(self, a: str, b: str) -> bool:
        """True when the source holds one tensor under both names (a tie it kept)."""
        return False


class MappingCheckpoint(Checkpoint):
    """A mapping name → tensor the caller built (a state_dict, tensors loaded elsewhere)."""

    def __init__(self, mapping: Mapping[str, Any]):
        self.label = "the mapping"
        self._tensors: dict[str, torch.Tensor] = {}
        for name, t in mapping.items():
            if not isinstance(name, str):
                raise _error(f"The weights mapping has the key {name!r}, not a string.", "graphcap.load(f, weights={...})",
                             "Key the mapping by the program's state FQNs (the keys of ep.state_dict).")
            if not isinstance(t, torch.Tensor):
                raise _error(f"The weights mapping gives a {type(t).__name__} for {name!r}, not a tensor.",
                             "graphcap.load(f, weights={...})", "Map each FQN to a tensor.")
            if not has_data(t) or t.layout != torch.strided:
                raise _error(f"The weights mapping gives {name!r} as a tensor without data (meta or fake) or "
                             f"not dense ({t.layout}).", "graphcap.load(f, weights={...})",
                             "Attach tensors holding the weights (loaded from the checkpoint), or load the "
                             "structure alone with weights=False.")
            self._tensors[name] = t

    def names(self) -> list[str]:
        return list(self._tensors)

    def header(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        t = self._tensors[name]
        return tuple(t.shape), t.dtype

    def tensor(self, name: str) -> torch.Tensor:
        return self._tensors[name].detach()

    def same_tensor(self, a: str, b: str) -> bool:
        x, y = self._tensors[a], self._tensors[b]
        return x is y or (x.device == y.device and x.dtype == y.dtype and x.shape == y.shape
                          and x.stride() == y.stride() and x.data_ptr() == y.data_ptr())


class SafetensorsCheckpoint(Checkpoint):
    """One safetensors file, or the shards an index names; each file memory-mapped."""

    def __init__(self, label: str, files: dict[str, str]):
        from safetensors import safe_open
        self.label = label
        self._file_of = files  # tensor name -> file path
        self._handles: dict[str, Any] = {}
        for path in dict.fromkeys(files.values()):
            try:
                self._handles[path] = safe_open(path, framework="pt")
            except Exception as e:  # SafetensorError, OSError: damaged, truncated, not safetensors
                raise _error(f"Cannot read the safetensors file {path}: {e}", f"graphcap.load(f, weights={label!r})",
                             "Check that the checkpoint was written completely (save_pretrained / "
                             "safetensors.torch.save_file) and is not damaged.") from None
        for path, handle in self._handles.items():
            held = set(handle.keys())
            absent = [n for n, p in files.items() if p == path and n not in held]
            if absent:
                raise _error(f"The index of {label} places {_names(absent)} in {os.path.basename(path)}, which "
                             f"does not hold {'it' if len(absent) == 1 else 'them'}.",
                             f"graphcap.load(f, weights={label!r})",
                             "The index and the shards are from different saves: save the checkpoint again.")

    def names(self) -> list[str]:
        return list(self._file_of)

    def header(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        piece = self._handles[self._file_of[name]].get_slice(name)
        code = piece.get_dtype()
        dtype = _CODES.get(code)
        if dtype is None:
            raise _error(f"{name!r} in {self._file_of[name]} has the safetensors dtype {code}, which this "
                         f"torch has no dtype for.", f"graphcap.load(f, weights={self.label!r})",
                         "Convert the checkpoint to a dtype torch supports.")
        return tuple(int(s) for s in piece.get_shape()), dtype

    def tensor(self, name: str) -> torch.Tensor:
        path = self._file_of[name]
        try:
            return self._handles[path].get_tensor(name)
        except Exception as e:
            raise _error(f"Cannot read {name!r} from {path}: {e}", f"graphcap.load(f, weights={self.label!r})",
                         "The file is damaged or truncated: save the checkpoint again.") from None


def _inside(directory: str, relative: Any, label: str) -> str:
    """The path of a shard the index names, which must be a file inside the checkpoint's folder."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative) or "\\" in relative:
        raise _error(f"The index of {label} names the shard {relative!r:.80}, not a file name in its folder.",
                     f"graphcap.load(f, weights={label!r})", "Use an index written by save_pretrained.")
    base = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(base, relative))
    if os.path.commonpath([base, path]) != base:
        raise _error(f"The index of {label} names the shard {relative!r:.80}, outside the checkpoint's folder.",
                     f"graphcap.load(f, weights={label!r})", "Use an index written by save_pretrained.")
    if not os.path.isfile(path):
        raise _error(f"The index of {label} names the shard {relative!r}, which does not exist.",
                     f"graphcap.load(f, weights={label!r})",
                     "Copy every shard the index lists next to it (model-0000N-of-0000M.safetensors).")
    return path


def _sharded(index_path: str, label: str) -> SafetensorsCheckpoint:
    try:
        if os.path.getsize(index_path) > _MAX_INDEX_BYTES:
            raise ValueError("the file is too large for an index")
        with open(index_path, "rb") as fh:
            index = json.loads(fh.read())
    except (OSError, ValueError) as e:
        raise _error(f"Cannot read the checkpoint index {index_path}: {e}", f"graphcap.load(f, weights={label!r})",
                     "Write the checkpoint again with save_pretrained.") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) for k in weight_map):
        raise _error(f"The checkpoint index {index_path} has no 'weight_map' of names to shard files.",
                     f"graphcap.load(f, weights={label!r})", "Write the checkpoint again with save_pretrained.")
    directory = os.path.dirname(os.path.abspath(index_path))
    shards: dict[Any, str] = {}
    files = {}
    for name, relative in weight_map.items():
        if relative not in shards:
            shards[relative] = _inside(directory, relative, label)
        files[name] = shards[relative]
    return SafetensorsCheckpoint(label, files)


def _single_file(path: str, label: str) -> SafetensorsCheckpoint:
    from safetensors import safe_open
    try:
        with safe_open(path, framework="pt") as handle:
            names = list(handle.keys())
    except Exception as e:
        raise _error(f"Cannot read the safetensors file {path}: {e}", f"graphcap.load(f, weights={label!r})",
                     "Check that the file is a complete safetensors checkpoint.") from None
    return SafetensorsCheckpoint(label, {n: path for n in names})


def open_checkpoint(weights: Any) -> Optional[Checkpoint]:
    """The source ``graphcap.load``'s ``weights`` names; None for True/False."""
    if isinstance(weights, bool):
        return None
    if isinstance(weights, Mapping):
        return MappingCheckpoint(weights)
    if not isinstance(weights, (str, os.PathLike)):
        raise _error(f"graphcap.load's weights= takes True, False, a path or a mapping; got {type(weights).__name__}.",
                     "graphcap.load(f, weights=...)",
                     "Pass True (the file's weights), False (structure only), the path of a .safetensors file "
                     "or of a checkpoint folder (save_pretrained), or a mapping {fqn: tensor}.")
    path = os.fspath(weights)
    label = path
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, INDEX_FILE)):
            return _sharded(os.path.join(path, INDEX_FILE), label)
        if os.path.isfile(os.path.join(path, SINGLE_FILE)):
            return _single_file(os.path.join(path, SINGLE_FILE), label)
        found = sorted(os.listdir(path))[:6]
        raise _error(f"The folder {path} holds neither {INDEX_FILE} nor {SINGLE_FILE} (it holds {found}).",
                     f"graphcap.load(f, weights={label!r})",
                     "Point weights= at a folder written by save_pretrained (safe_serialization, the default), "
                     "or at one .safetensors file.")
    if not os.path.isfile(path):
        raise _error(f"The weights path {path} does not exist.", f"graphcap.load(f, weights={label!r})",
                     "Pass the path of a .safetensors file or of a checkpoint folder.")
    if path.endswith(".index.json"):
        return _sharded(path, label)
    if path.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl")):
        raise _error(f"{path} is a pickle-based checkpoint; graphcap reads weights only from safetensors "
                     f"(unpickling a file can run any code).", f"graphcap.load(f, weights={label!r})",
                     "Convert it to safetensors once, in a process you trust: load its state dict there and "
                     "write it with safetensors.torch.save_file (or save_pretrained, which writes safetensors).")
    return _single_file(path, label)


# ---------------------------------------------------------------------------
# matching a source against the program
# ---------------------------------------------------------------------------

def _names(names: list[str], quoted: bool = False) -> str:
    shown = ", ".join(n if quoted else repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _expected(name: str, d: Any) -> tuple[tuple[int, ...], torch.dtype, torch.device, dict]:
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
                         "in forward) is in no checkpoint: export with it holding data (build the model on the "
                         "meta device, then rebuild that submodule on the CPU) so save(..., weights=False) keeps "
                         "it, or add it to a mapping passed as weights=.")
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
            lines.append(f"missing from {checkpoint.label}: " + _names(problems["missing"], quoted=True))
        if unknown:
            lines.append(f"in {checkpoint.label} but not in the program: {_names(unknown)}")
        for kind in ("shape", "dtype", "tied"):
            lines += [f"{'tied in the program, two tensors in the source: ' if kind == 'tied' else ''}{p}"
                      for p in problems[kind][:_SHOWN]]
            if len(problems[kind]) > _SHOWN:
                lines.append(f"... and {len(problems[kind]) - _SHOWN} more {kind} mismatches")
        raise _error("The weights do not match the program:\n  " + "\n  ".join(lines),
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
        raise _error(f"{name!r} read from {checkpoint.label} is {t.dtype} {list(t.shape)}, not the "
                     f"{g.dtype} {list(g.shape)} its header announced.", f"graphcap.load(f, weights={checkpoint.label!r})",
                     "The file is damaged: save the checkpoint again.")
    if g.device.type != "meta" and t.device != g.device:
        try:
            t = t.to(g.device)
        except (RuntimeError, AssertionError) as e:
            raise _error(f"{name!r} belongs on {g.device}, which this process cannot use ({e}).",
                         f"graphcap.load(f, weights={checkpoint.label!r})",
                         "Load on a machine with that device, or move the program with move_to_device_pass.") from None
    if g.description.get("parameter"):
        return torch.nn.Parameter(t, requires_grad=bool(g.description.get("requires_grad")))
    if g.description.get("requires_grad") and t.is_floating_point():
        t.requires_grad_(True)
    return t


def structure_only_error() -> SerializationError:
    return SerializationError(
        "The file holds the program's structure without its weights (it was saved with weights=False).",
        where="graphcap.load(f)",
        fix="Attach the weights as it loads: graphcap.load(f, weights='model.safetensors' or a checkpoint folder "
            "written by save_pretrained, or a mapping {fqn: tensor}); weights=False loads the structure alone.")


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
