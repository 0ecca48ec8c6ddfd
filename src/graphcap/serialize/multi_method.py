"""A multi-method program on disk: each method's program beside the others, each state tensor once.

The archive is a graphcap archive (same zip container, version entry and
manifest as a single program's) holding::

    multi_method.json       {"layout": 1, "methods": [name, ...], "state": tensor table,
                             "method_state": {name: [fqn, ...]}, "nonpersistent": [fqn, ...]}
    state.safetensors       every parameter and buffer of any method, each storage once
                            (``weights=False``: the parameters and persistent buffers
                            described, not stored; a checkpoint gives them at load)
    methods/<i>.pt2         method i's program, a complete single-program archive
                            written structure-only: its state is described, not stored
                            (its lifted constants are stored in it)
    extra/<name>            user extra_files

The single-program format is unchanged: a method entry is what
``graphcap.save(ep, f, weights=False)`` writes, and loading attaches the shared
state to it by FQN as ``graphcap.load(f, weights={...})`` does. ``layout`` is
this container's own version; a reader refuses a newer one. ``nonpersistent``
(the non-persistent buffers, which a checkpoint need not hold) was added
within layout 1: a file without it treats every state tensor as a weight.
"""
from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any, Optional

import torch

from ..errors import SerializationError
from ..program import ExportedProgram
from ..signature import call_graph_of
from . import attach, checkpoints, tensors
from .archive import ArchiveReader, PathOrFile, corrupt, write_archive
from .pt2 import check_members, extra_file_entries, read_extra_files
from .pt2 import load as load_program
from .pt2 import save as save_program

LAYOUT_ENTRY = "multi_method.json"
STATE_ENTRY = "state.safetensors"
METHOD_PREFIX = "methods/"
LAYOUT_VERSION = 1


def is_multi_method_archive(reader: ArchiveReader) -> bool:
    return reader.has(LAYOUT_ENTRY)


def _without_state(ep: ExportedProgram, fqns: set[str]) -> ExportedProgram:
    """``ep`` with its shared state (parameters, buffers) as meta tensors: what the method's
    entry describes and does not store. Tied names stay one object."""
    memo: dict[int, torch.Tensor] = {}

    def meta(t: torch.Tensor) -> torch.Tensor:
        return _meta_of(t, memo)
    state = {k: meta(v) if k in fqns else v for k, v in ep.state_dict.items()}
    constants = {k: meta(v) if k in fqns else v for k, v in ep.constants.items()}
    out = ExportedProgram(ep.graph_module, ep.graph_signature, state, ep.range_constraints, call_graph_of(ep),
                          example_inputs=None, constants=constants, verify=False, verifiers=ep.verifiers)
    out.opset_version = dict(getattr(ep, "opset_version", None) or {})  # a loaded method's namespaces stay
    return out


def save(progs: Any, f: PathOrFile, *, extra_files: Optional[dict[str, Any]] = None, weights: bool = True,
         opset_version: Optional[dict[str, int]] = None) -> None:
    """Write a :class:`graphcap.multi_method.MultiMethodProgram`; see the module docstring.

    ``weights=False`` describes the parameters and persistent buffers without storing them (the
    non-persistent buffers, in no checkpoint, are stored): ``load(f, weights=<checkpoint>)``
    attaches them."""
    shared = {**progs.state_dict, **progs.constants}
    if weights:
        for fqn, t in shared.items():
            if not tensors.has_data(t):
                raise SerializationError(f"The state tensor {fqn!r} has no data (meta or fake).",
                                         where=f"graphcap.save(progs, f), state {fqn!r}",
                                         fix="Save a multi-method program whose weights are loaded, or save the "
                                             "structure alone with graphcap.save(progs, f, weights=False).")
        data, described = tensors.pack(shared)
    else:
        memo: dict[int, torch.Tensor] = {}
        structure = {fqn: _meta_of(t, memo) for fqn, t in progs.state_dict.items()}
        structure.update({fqn: _meta_of(t, memo) if not tensors.has_data(t) else t
                          for fqn, t in progs.constants.items()})
        data, described = tensors.pack_structure(structure, keep_data=True)
        for fqn, t in shared.items():  # the device the tensors belong on, not meta
            if "alias_of" not in described[fqn] and described[fqn].get("storage") is None:
                described[fqn]["device"] = str(t.device)
    entries: dict[str, bytes] = {STATE_ENTRY: data}
    for i, ep in enumerate(progs.values()):
        buf = io.BytesIO()
        save_program(_without_state(ep, set(shared)), buf, weights=False, opset_version=opset_version)
        entries[f"{METHOD_PREFIX}{i}.pt2"] = buf.getvalue()
    method_state = {name: [fqn for fqn in (*ep.state_dict, *ep.constants) if fqn in shared]
                    for name, ep in progs.items()}
    layout = {"layout": LAYOUT_VERSION, "methods": list(progs), "method_state": method_state,
              "nonpersistent": list(progs.constants),
              "state": described, "checksums": tensors.checksums(data)}  # what an mmap load checks
    entries[LAYOUT_ENTRY] = json.dumps(layout, indent=1, allow_nan=False).encode()
    entries.update(extra_file_entries(extra_files))
    write_archive(f, entries)


def _meta_of(t: torch.Tensor, memo: dict[int, torch.Tensor]) -> torch.Tensor:
    """A data-less stand-in of ``t`` (one per tensor object, so tied names stay tied)."""
    if id(t) not in memo:
        m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        memo[id(t)] = torch.nn.Parameter(m, requires_grad=t.requires_grad) \
            if isinstance(t, torch.nn.Parameter) else m
    return memo[id(t)]


def _read_state(reader: ArchiveReader, layout: dict[str, Any], mmap: bool) -> dict[str, torch.Tensor]:
    """The state tensors the file stores (all of them unless it was saved with ``weights=False``)."""
    if not mmap:
        return tensors.unpack(reader.read(STATE_ENTRY), layout["state"], STATE_ENTRY)
    if reader.path is None:
        raise SerializationError("mmap=True needs a file path, not a file object.",
                                 where="graphcap.load(f, mmap=True)",
                                 fix="Pass the path of the .pt2 file, or load without mmap.")
    loc = reader.location(STATE_ENTRY)
    return tensors.unpack_mmap(reader.path, loc.offset, loc.size, layout["state"], entry=STATE_ENTRY,
                               sums=layout.get("checksums"), entry_sha256=reader.entry_sha256(STATE_ENTRY))


def _attach_checkpoint(layout: dict[str, Any], stored: dict[str, torch.Tensor],
                       checkpoint: checkpoints.Checkpoint) -> dict[str, torch.Tensor]:
    """Every state tensor from ``checkpoint`` (checked against the file's table, the methods'
    FQNs together), the non-persistent buffers it lacks from the file."""
    nonpersistent = layout.get("nonpersistent", [])
    if not (isinstance(nonpersistent, list) and all(isinstance(n, str) for n in nonpersistent)):
        raise corrupt(f"{LAYOUT_ENTRY} lists the non-persistent buffers malformed.", where=LAYOUT_ENTRY)
    kept = set(nonpersistent)
    described = layout["state"]
    table = {"weights": {n: d for n, d in described.items() if n not in kept},
             "constants": {n: d for n, d in described.items() if n in kept}}
    loaded = {"weights": {}, "constants": {n: t for n, t in stored.items() if n in kept}}
    attached, _ = attach.attach(table, loaded, checkpoint)
    return {**attached["weights"], **attached["constants"]}


def load(reader: ArchiveReader, *, extra_files: Optional[dict[str, Any]] = None, mmap: bool = False,
         weights: Any = True, import_modules: Sequence[str] = (), stand_ins: bool = False,
         expected_opset_version: Optional[dict[str, int]] = None) -> Any:
    """Read a multi-method archive from an open reader; the methods share one tensor per FQN.

    ``weights``, ``mmap``, ``import_modules`` and ``stand_ins`` mean what they mean for one
    program (``graphcap.load``); a checkpoint is matched against every method's state at once."""
    from ..multi_method import MultiMethodProgram
    checkpoint = checkpoints.open_checkpoint(weights)
    try:
        layout = json.loads(reader.read(LAYOUT_ENTRY))
    except SerializationError:
        raise
    except Exception as e:
        raise corrupt(f"{LAYOUT_ENTRY} is not valid JSON ({type(e).__name__}).") from None
    if not (isinstance(layout, dict) and isinstance(layout.get("methods"), list)
            and all(isinstance(m, str) for m in layout["methods"]) and isinstance(layout.get("state"), dict)
            and isinstance(layout.get("layout"), int)):
        raise corrupt(f"{LAYOUT_ENTRY} is malformed.", where=LAYOUT_ENTRY)
    methods = {f"{METHOD_PREFIX}{i}.pt2" for i in range(len(layout["methods"]))}
    check_members(reader, {LAYOUT_ENTRY, STATE_ENTRY, *methods}, "a multi-method file")
    if layout["layout"] > LAYOUT_VERSION:
        raise SerializationError(
            f"This multi-method file has layout {layout['layout']}; this graphcap reads up to {LAYOUT_VERSION}.",
            where=LAYOUT_ENTRY, fix="Upgrade graphcap to load it.")
    state: Optional[dict[str, torch.Tensor]]
    if weights is False:
        state = None
    elif checkpoint is not None:
        state = _attach_checkpoint(layout, _read_state(reader, layout, mmap), checkpoint)
    elif tensors.without_data(layout["state"]):
        raise attach.structure_only_error(reader.path)
    else:
        state = _read_state(reader, layout, mmap)
    program_options: dict[str, Any] = {"import_modules": import_modules, "stand_ins": stand_ins,
                                       "expected_opset_version": expected_opset_version}
    programs: dict[str, ExportedProgram] = {}
    for i, name in enumerate(layout["methods"]):
        entry = f"{METHOD_PREFIX}{i}.pt2"
        if not reader.has(entry):
            raise corrupt(f"The file lists method {name!r} but has no entry {entry}.", where=entry)
        sub = io.BytesIO(reader.read(entry))
        if state is None:
            programs[name] = load_program(sub, weights=False, **program_options)
            continue
        wanted = layout.get("method_state", {}).get(name)
        if not (isinstance(wanted, list) and all(isinstance(fqn, str) for fqn in wanted)):
            raise corrupt(f"{LAYOUT_ENTRY} does not list the state of method {name!r}.", where=LAYOUT_ENTRY)
        missing = [fqn for fqn in wanted if fqn not in state]
        if missing:
            raise corrupt(f"Method {name!r} needs state {missing[0]!r}, which the file does not hold.",
                          where=entry)
        programs[name] = load_program(sub, weights={fqn: state[fqn] for fqn in wanted}, **program_options)
    if extra_files is not None:
        read_extra_files(reader, extra_files)
    return MultiMethodProgram(programs, share_equal_values=True)
