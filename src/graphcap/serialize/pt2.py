"""save / load: the .pt2 round trip, assembled from the serialize modules.

``save`` encodes the program (``encode``), packs tensors (``tensors``) and
writes the archive atomically (``archive``). ``load`` reads and checks the
archive, decodes the program (``decode``) and its tensors (or attaches them
from a checkpoint: ``checkpoints``, ``attach``), and rebuilds a verified
ExportedProgram. Any failure while reading a file — however the file was
damaged or crafted — surfaces as a ``SerializationError``.
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional, Sequence

import torch

from .. import auto_flatten
from ..errors import GraphcapError, NotAProgramError, SerializationError, VerificationError
from ..graph_arguments import TensorArgument
from ..program import ExportedProgram
from ..torch_private.dispatch import disable_current_modes
from . import attach, checkpoints, class_lookup, opsets, placement, schema, tensors, upgrade
from .archive import ArchiveReader, PathOrFile, corrupt, write_archive
from .decode import decode_program
from .encode import encode_program
from .values import DTYPES, bad, decode_value

_EXTRA_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


class StructureOnlyProgram(ExportedProgram):
    """A program loaded with ``weights=False``: printable and inspectable, not runnable.

    Its ``state_dict`` and ``constants`` hold tensors on the ``meta`` device (shape
    and dtype only). ``save(ep, f, weights=False)`` writes its structure again.
    """

    def module(self, check_guards: bool = True) -> torch.fx.GraphModule:
        raise SerializationError(
            "This program was loaded with weights=False: it has the structure but no weights, so it "
            "cannot run.", where="ep.module()",
            fix="Load it again with graphcap.load(f) (or mmap=True to keep the weights on disk until used), "
                "or attach weights from a checkpoint: graphcap.load(f, weights='checkpoint/folder').")


def _check_extra_name(name: Any) -> str:
    if not isinstance(name, str) or not _EXTRA_NAME.match(name) or name in (".", ".."):
        raise SerializationError(
            f"Extra file name {name!r:.80} is not allowed.", where="extra_files",
            fix="Use names of letters, digits, '_', '-' and '.' (at most 200 characters).")
    return name


def save(ep: ExportedProgram, f: PathOrFile, *, extra_files: Optional[dict[str, Any]] = None,
         weights: bool = True, opset_version: Optional[dict[str, int]] = None,
         pickle_protocol: Any = 2) -> None:
    opsets.check_pickle_protocol(pickle_protocol, call="graphcap.save")
    versions = opsets.versions_to_write(ep, opset_version, call="graphcap.save")
    if not isinstance(ep, ExportedProgram):
        raise NotAProgramError.of(ep, "graphcap.save(ep, f)", "graphcap.save({}, f)")
    if not isinstance(weights, bool):
        raise SerializationError(f"graphcap.save's weights= is True or False, got {type(weights).__name__}.",
                                 where="graphcap.save(ep, f, weights=...)",
                                 fix="weights=False writes the structure alone; weights are attached at load.")
    if isinstance(ep, StructureOnlyProgram) and weights:
        raise SerializationError("This program was loaded with weights=False and has no weights to save.",
                                 where="graphcap.save(ep, f)",
                                 fix="Load it with weights=True (or weights=<checkpoint>), then save; or save "
                                     "the structure again with graphcap.save(ep, f, weights=False).")
    program, payloads = encode_program(ep, with_weights=weights, opset_version=versions)
    entries: dict[str, bytes] = {schema.PROGRAM_ENTRY: json.dumps(program, indent=1, allow_nan=False).encode()}
    entries.update(payloads)
    entries.update(extra_file_entries(extra_files))
    write_archive(f, entries)


def extra_file_entries(extra_files: Optional[dict[str, Any]]) -> dict[str, bytes]:
    """The archive entries of the user's ``extra_files`` (name -> text or bytes)."""
    entries: dict[str, bytes] = {}
    for name, content in (extra_files or {}).items():
        data = content.encode() if isinstance(content, str) else content
        if not isinstance(data, (bytes, bytearray)):
            raise SerializationError(f"Extra file {name!r} must be str or bytes, got {type(content).__name__}.",
                                     where="extra_files", fix="Pass text or bytes.")
        entries[schema.EXTRA_PREFIX + _check_extra_name(name)] = bytes(data)
    return entries


def check_members(reader: ArchiveReader, layout: frozenset[str] | set[str], kind: str) -> None:
    """Refuse an entry the format does not place in a file of this ``kind``: no save writes one, so
    it was added after (a name like ``../x`` or ``/etc/x`` aimed at a tool that extracts the zip)."""
    for name in reader.names():
        if name in layout:
            continue
        rest = name[len(schema.EXTRA_PREFIX):] if name.startswith(schema.EXTRA_PREFIX) else None
        if rest is not None and _EXTRA_NAME.match(rest) and rest not in (".", ".."):
            continue
        raise corrupt(f"The archive holds the entry {name[:120]!r}, which no graphcap.save writes in {kind}.",
                      where=name[:120] or "(an entry with an empty name)")


_PROGRAM_LAYOUT = frozenset({schema.PROGRAM_ENTRY, schema.WEIGHTS_ENTRY, schema.CONSTANTS_ENTRY,
                             schema.EXAMPLE_INPUTS_ENTRY})


def read_extra_files(reader: Any, extra_files: dict[str, Any]) -> None:
    """Fill ``extra_files`` in place from the archive: text where the bytes are UTF-8, else bytes."""
    for name in list(extra_files):
        entry = schema.EXTRA_PREFIX + _check_extra_name(name)
        if reader.has(entry):
            data = reader.read(entry)
            try:
                extra_files[name] = data.decode()
            except UnicodeDecodeError:
                extra_files[name] = data


def _meta_tensors(described: Any) -> dict[str, torch.Tensor]:
    """Shape-and-dtype stand-ins for the tensors, for ``weights=False``."""
    if not isinstance(described, dict):
        raise bad("The tensor table is malformed.")
    out: dict[str, torch.Tensor] = {}
    for name, d in described.items():
        if isinstance(d, dict) and "alias_of" in d:
            continue
        try:
            shape, stride, dtype = d["shape"], d["stride"], DTYPES[d["dtype"]]
            t = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        except Exception:
            raise bad(f"The description of tensor {name!r} is malformed.") from None
        out[name] = torch.nn.Parameter(t, requires_grad=bool(d.get("requires_grad"))) if d.get("parameter") else t
    for name, d in described.items():
        if isinstance(d, dict) and "alias_of" in d:
            if d["alias_of"] not in out:
                raise bad(f"Tensor {name!r} is an alias of a tensor the file does not hold.")
            out[name] = out[d["alias_of"]]
    return out


def _example_inputs(reader: ArchiveReader, j: Any, root_entry: Any) -> Any:
    """The example inputs as (args, kwargs), rebuilt in the program's input structure."""
    if not (isinstance(j, dict) and isinstance(j.get("leaves"), list)):
        raise bad("The example inputs are malformed.")
    stored = tensors.unpack(reader.read(schema.EXAMPLE_INPUTS_ENTRY), j.get("tensors"), schema.EXAMPLE_INPUTS_ENTRY)

    def extra(tag: str, payload: Any) -> Any:
        if tag == "tensor" and isinstance(payload, str) and payload in stored:
            return stored[payload]
        raise bad("An example input refers to a tensor the file does not hold.")
    leaves = [decode_value(leaf, extra) for leaf in j["leaves"]]
    in_spec = root_entry.signature.in_spec
    if len(leaves) != in_spec.num_leaves:
        raise bad("The example inputs do not match the program's input structure.")
    return auto_flatten.unflatten(leaves, in_spec)


def _load(reader: ArchiveReader, extra_files: Optional[dict[str, Any]], mmap: bool, weights: bool,
          checkpoint: Optional[checkpoints.Checkpoint], expected_opsets: dict[str, int],
          given_opsets: Optional[dict[str, int]]) -> ExportedProgram:
    check_members(reader, _PROGRAM_LAYOUT, "a program's file")
    text = reader.read(schema.PROGRAM_ENTRY)
    if len(text) > schema.MAX_JSON_BYTES:
        raise corrupt(f"program.json has {len(text)} bytes, more than a graphcap program ever holds.")
    try:
        program = json.loads(text)
    except SerializationError:
        raise
    except Exception as e:
        raise corrupt(f"program.json is not valid JSON ({type(e).__name__}: {e}).") from None
    if not isinstance(program, dict) or program.get("format_version") != reader.version:
        recorded = program.get("format_version") if isinstance(program, dict) else None
        raise corrupt(f"program.json records the format version {recorded!r:.40}, the archive's "
                      f"{schema.VERSION_ENTRY} entry {reader.version}: they must be the same.",
                      where=f"{schema.PROGRAM_ENTRY}: format_version")
    recorded = program.get("opset_version")  # checked before anything is decoded; its form by the schema, below
    opsets.check_expected(recorded if isinstance(recorded, dict) else None, expected_opsets,
                          entry=schema.PROGRAM_ENTRY, given=given_opsets)
    parts = decode_program(program, reader.version)
    _check_tensor_inputs(parts["graph_module"], parts["signature"])
    placement.place_graph(parts["graph_module"])
    upgrade.writes_into_graph(parts["graph_module"], parts["signature"])
    state = parts["state"]
    loaded: dict[str, dict[str, torch.Tensor]] = {}
    for key, entry in (("weights", schema.WEIGHTS_ENTRY), ("constants", schema.CONSTANTS_ENTRY)):
        described = state.get(key)
        if not weights:
            loaded[key] = _meta_tensors(described)
        elif key == "weights" and checkpoint is not None:
            loaded[key] = {}  # all from the checkpoint, below
        elif checkpoint is None and tensors.without_data(described):
            raise attach.structure_only_error(reader.path)
        elif mmap:
            if reader.path is None:
                raise SerializationError("mmap=True needs a file path, not a file object.",
                                         where="graphcap.load(f, mmap=True)",
                                         fix="Pass the path of the .pt2 file, or load without mmap.")
            loc = reader.location(entry)
            sums = (state.get("checksums") or {}).get(key)
            loaded[key] = tensors.unpack_mmap(reader.path, loc.offset, loc.size, described, entry=entry,
                                              sums=sums, entry_sha256=reader.entry_sha256(entry))
        else:
            loaded[key] = tensors.unpack(reader.read(entry), described, entry)
    from_meta = False
    if checkpoint is not None:
        loaded, from_meta = attach.attach(state, loaded, checkpoint)
    if extra_files is not None:
        read_extra_files(reader, extra_files)
    example_inputs = None
    if weights and "example_inputs" in program:
        example_inputs = _example_inputs(reader, program["example_inputs"], parts["module_call_graph"][0])
    cls = ExportedProgram if weights else StructureOnlyProgram
    try:
        ep = cls(parts["graph_module"], parts["signature"], loaded["weights"], parts["range_constraints"],
                 parts["module_call_graph"], example_inputs=example_inputs, constants=loaded["constants"])
    except VerificationError as e:
        raise corrupt(f"The loaded program breaks the IR invariants:\n{e.what}", where=schema.PROGRAM_ENTRY) from None
    if from_meta:  # exported on the meta device: what ran there now runs where the weights are
        ep = attach.move_meta_placements(ep)
    if "assumptions" in program:
        ep.export_assumptions = _assumptions(program["assumptions"])
    ep.export_dim_names = dict(program.get("dim_names", {}))
    ep.opset_version = parts["opset_version"]
    return ep


def _check_tensor_inputs(gm: torch.fx.GraphModule, signature: Any) -> None:
    """Refuse a placeholder the signature takes as a tensor whose value in the graph is not one (a
    crafted ``val``): loaded, the program would check its callers' tensors against a constant."""
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    for i, spec in enumerate(signature.input_specs):
        node = placeholders.get(getattr(spec.arg, "name", None))
        if isinstance(spec.arg, TensorArgument) and node is not None and "val" in node.meta \
                and not isinstance(node.meta["val"], torch.Tensor):
            raise bad(f"Input {node.name} is a tensor in the signature, but its value in the graph is "
                      f"{type(node.meta['val']).__name__}.", where=f"program.json signature.inputs[{i}]")


def _assumptions(items: list[dict[str, Any]]) -> list[Any]:
    """The export's assumptions as the records export made (``ep.export_assumptions``)."""
    from ..dynamic.assumptions import Assumption
    return [Assumption(kind=a["kind"], dim=a["dim"], text=a["text"], where=a["where"], framework=a["framework"])
            for a in items]


def load(f: PathOrFile, *, extra_files: Optional[dict[str, Any]] = None, mmap: bool = False,
         weights: checkpoints.WeightsArg = True, import_modules: Sequence[str] = (),
         stand_ins: bool = False, expected_opset_version: Optional[dict[str, int]] = None) -> ExportedProgram:
    expected = opsets.expected_versions(expected_opset_version)
    if isinstance(import_modules, str):
        import_modules = (import_modules,)
    class_lookup.import_named_modules(import_modules)
    checkpoint = checkpoints.open_checkpoint(weights)
    reader = ArchiveReader(f)
    try:
        with disable_current_modes(), class_lookup.options(import_modules, stand_ins):
            return _load(reader, extra_files, mmap, weights is not False, checkpoint, expected,
                         expected_opset_version)
    except GraphcapError:
        raise
    except RecursionError:
        raise corrupt("The file nests values too deeply to be a graphcap program.") from None
    except Exception as e:  # anything else a crafted file provokes is still a damaged file
        raise corrupt(f"The file could not be decoded ({type(e).__name__}: {str(e)[:300]}).") from None
    finally:
        reader.release()
