"""Weights sources for load time: a safetensors file, a sharded checkpoint, or a mapping.

A big model is exported without its weights (built on the meta device) and
saved as structure alone (``graphcap.save(ep, f, weights=False)``); the
weights join it when the program is loaded, from wherever they already are:
``graphcap.load(f, weights=source)``. This module opens such a source and
reads it lazily; ``attach`` matches it against the program.

- Names are the program's state FQNs (``ep.state_dict`` and ``ep.constants``
  keys), as ``model.state_dict()`` and transformers' ``save_pretrained``
  write them.
- A source answers a tensor's shape and dtype from its header, without reading
  data, so every mismatch is found before anything is read.
- safetensors files are memory-mapped (``safe_open``): a tensor's bytes stay in
  the file until a kernel reads them, so a 70B checkpoint needs no RAM to load.
  The files are private mappings: writing to a weight never writes the file.
  Pickle-based checkpoints (``.bin``, ``.pt``) are refused: unpickling runs code.
- An index's shard names must be files inside the checkpoint's folder, and
  every name the index places in a shard must be in that shard.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Union, cast

import torch

from ..errors import SerializationError
from .tensors import _CODES, has_data

WeightsArg = Union[bool, str, "os.PathLike[str]", Mapping[str, torch.Tensor]]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_INDEX_BYTES = 1 << 28
SHOWN = 8  # names listed per kind of problem


def listed(names: list[str], quoted: bool = False) -> str:
    shown = ", ".join(n if quoted else repr(n) for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def refuse(what: str, where: str, fix: str) -> SerializationError:
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
                raise refuse(f"The weights mapping has the key {name!r}, not a string.",
                             "graphcap.load(f, weights={...})",
                             "Key the mapping by the program's state FQNs (the keys of ep.state_dict).")
            if not isinstance(t, torch.Tensor):
                raise refuse(f"The weights mapping gives a {type(t).__name__} for {name!r}, not a tensor.",
                             "graphcap.load(f, weights={...})", "Map each FQN to a tensor.")
            if not has_data(t) or t.layout != torch.strided:
                raise refuse(f"The weights mapping gives {name!r} as a tensor without data (meta or fake) or "
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
                raise refuse(f"Cannot read the safetensors file {path}: {e}", f"graphcap.load(f, weights={label!r})",
                             "Check that the checkpoint was written completely (save_pretrained / "
                             "safetensors.torch.save_file) and is not damaged.") from None
        for path, handle in self._handles.items():
            held = set(handle.keys())
            absent = [n for n, p in files.items() if p == path and n not in held]
            if absent:
                raise refuse(f"The index of {label} places {listed(absent)} in {os.path.basename(path)}, which "
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
            raise refuse(f"{name!r} in {self._file_of[name]} has the safetensors dtype {code}, which this "
                         f"torch has no dtype for.", f"graphcap.load(f, weights={self.label!r})",
                         "Convert the checkpoint to a dtype torch supports.")
        return tuple(int(s) for s in piece.get_shape()), dtype

    def tensor(self, name: str) -> torch.Tensor:
        path = self._file_of[name]
        try:
            return cast(torch.Tensor, self._handles[path].get_tensor(name))
        except Exception as e:
            raise refuse(f"Cannot read {name!r} from {path}: {e}", f"graphcap.load(f, weights={self.label!r})",
                         "The file is damaged or truncated: save the checkpoint again.") from None


def _inside(directory: str, relative: Any, label: str) -> str:
    """The path of a shard the index names, which must be a file inside the checkpoint's folder."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative) or "\\" in relative:
        raise refuse(f"The index of {label} names the shard {relative!r:.80}, not a file name in its folder.",
                     f"graphcap.load(f, weights={label!r})", "Use an index written by save_pretrained.")
    base = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(base, relative))
    if os.path.commonpath([base, path]) != base:
        raise refuse(f"The index of {label} names the shard {relative!r:.80}, outside the checkpoint's folder.",
                     f"graphcap.load(f, weights={label!r})", "Use an index written by save_pretrained.")
    if not os.path.isfile(path):
        raise refuse(f"The index of {label} names the shard {relative!r}, which does not exist.",
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
        raise refuse(f"Cannot read the checkpoint index {index_path}: {e}", f"graphcap.load(f, weights={label!r})",
                     "Write the checkpoint again with save_pretrained.") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) for k in weight_map):
        raise refuse(f"The checkpoint index {index_path} has no 'weight_map' of names to shard files.",
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
        raise refuse(f"Cannot read the safetensors file {path}: {e}", f"graphcap.load(f, weights={label!r})",
                     "Check that the file is a complete safetensors checkpoint.") from None
    return SafetensorsCheckpoint(label, {n: path for n in names})


def open_checkpoint(weights: Any) -> Optional[Checkpoint]:
    """The source ``graphcap.load``'s ``weights`` names; None for True/False."""
    if isinstance(weights, bool):
        return None
    if isinstance(weights, Mapping):
        return MappingCheckpoint(weights)
    if not isinstance(weights, (str, os.PathLike)):
        raise refuse(f"graphcap.load's weights= takes True, False, a path or a mapping; got {type(weights).__name__}.",
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
        raise refuse(f"The folder {path} holds neither {INDEX_FILE} nor {SINGLE_FILE} (it holds {found}).",
                     f"graphcap.load(f, weights={label!r})",
                     "Point weights= at a folder written by save_pretrained (safe_serialization, the default), "
                     "or at one .safetensors file.")
    if not os.path.isfile(path):
        raise refuse(f"The weights path {path} does not exist.", f"graphcap.load(f, weights={label!r})",
                     "Pass the path of a .safetensors file or of a checkpoint folder.")
    if path.endswith(".index.json"):
        return _sharded(path, label)
    if path.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl")):
        raise refuse(f"{path} is a pickle-based checkpoint; graphcap reads weights only from safetensors "
                     f"(unpickling a file can run any code).", f"graphcap.load(f, weights={label!r})",
                     "Convert it to safetensors once, in a process you trust: load its state dict there and "
                     "write it with safetensors.torch.save_file (or save_pretrained, which writes safetensors).")
    return _single_file(path, label)
