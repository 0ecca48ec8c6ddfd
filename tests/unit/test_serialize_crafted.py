"""Files crafted to run code: torch.export's loader runs them, graphcap's refuses.

torch.export 2.14 unpickles a weight whose config entry says ``use_pickle``
(``torch.load(..., weights_only=False)``), so a .pt2 file can run arbitrary
code on ``torch.export.load``. graphcap's format has no such path: these tests
build such files and show that graphcap fails with a ``SerializationError``,
runs nothing, and imports nothing named by the file.
"""
from __future__ import annotations

import io
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive

SRC = Path(__file__).resolve().parents[2] / "src" / "graphcap"


class _RunsCode:
    """Unpickling this creates a directory: visible proof that code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _malicious_torch_pt2(path: Path, marker: Path) -> None:
    ep = torch.export.export(torch.nn.Linear(3, 3), (torch.randn(2, 3),))
    clean = io.BytesIO()
    torch.export.save(ep, clean)
    src = zipfile.ZipFile(clean)
    payload = io.BytesIO()
    torch.save(_RunsCode(str(marker)), payload)
    with zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            body = src.read(info)
            if info.filename.endswith("model_weights_config.json"):
                config = json.loads(body)
                config["config"]["weight"]["use_pickle"] = True
                body = json.dumps(config).encode()
            if info.filename.endswith("weights/weight_0"):
                body = payload.getvalue()
            out.writestr(info, body)


def test_torch_export_load_runs_code_graphcap_load_does_not(tmp_path):
    path = tmp_path / "crafted.pt2"
    marker = tmp_path / "code-ran"
    _malicious_torch_pt2(path, marker)

    with pytest.raises(SerializationError):
        graphcap.load(path)
    assert not marker.exists(), "graphcap ran code from the file"

    try:  # the demonstration: torch's loader executes the payload
        torch.export.load(path)
    except Exception:
        pass  # what it does after running the payload does not matter
    assert marker.exists(), "torch.export.load did not unpickle the crafted weight (behaviour changed?)"


@pytest.fixture(scope="module")
def valid_bytes():
    ep = graphcap.export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return buf.getvalue()


def _rewrite(data: bytes, edit_program=None, replace=None) -> bytes:
    entries = read_entries(io.BytesIO(data))
    if edit_program is not None:
        program = json.loads(entries[schema.PROGRAM_ENTRY])
        edit_program(program)
        entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    entries.update(replace or {})
    out = io.BytesIO()
    write_archive(out, entries)  # fresh manifest: the hashes match, the decoder must catch it
    return out.getvalue()


def _node(program, op="call_function"):
    return next(n for n in program["graph_module"]["nodes"] if n["op"] == op)


def test_pickle_payload_in_graphcap_weights_is_not_unpickled(tmp_path, valid_bytes):
    marker = tmp_path / "code-ran"
    payload = io.BytesIO()
    torch.save(_RunsCode(str(marker)), payload)
    crafted = _rewrite(valid_bytes, replace={schema.WEIGHTS_ENTRY: payload.getvalue()})
    with pytest.raises(SerializationError, match="not valid safetensors"):
        graphcap.load(io.BytesIO(crafted))
    assert not marker.exists()


CRAFTED_EDITS = {
    "python callable exec": lambda p: _node(p).update(target={"python": "builtins.exec"}),
    "python callable os.system": lambda p: _node(p).update(target={"python": "posix.system"}),
    "operator in a module namespace": lambda p: _node(p).update(target={"op": "os::system.default"}),
    "operator via torch.ops attribute": lambda p: _node(p).update(target={"op": "load_library::x.default"}),
    "dunder operator namespace": lambda p: _node(p).update(target={"op": "__builtins__::eval.default"}),
    "unknown higher-order op": lambda p: _node(p).update(target={"hop": "__class__"}),
    "unknown target kind": lambda p: _node(p).update(target={"import": "antigravity"}),
    "unknown argument tag": lambda p: _node(p).update(args=[{"import": "antigravity"}]),
    "expression with import": lambda p: p.update(symbols=[{"name": "s0", "assumptions": {"integer": True},
                                                          "min": 1, "max": 8, "hint": 2}],
                                                 range_constraints=[["__import__('antigravity')", 1, 2]]),
    "pytree class from a module": lambda p: p["module_call_graph"][0]["signature"].update(
        out_spec={"type": "antigravity.Fly", "context": None, "children": []}),
    "pytree context naming a class": lambda p: p["module_call_graph"][0]["signature"].update(
        out_spec={"type": "builtins.tuple", "context": {"type": "antigravity.Fly"}, "children": []}),
    "unknown dtype": lambda p: _node(p)["meta"]["val"]["tensor"].update(dtype="torch.Tensor.__reduce__"),
    "node used before defined": lambda p: _node(p).update(args=[{"node": "later"}]),
    "wrong version inside json": lambda p: p.update(format_version=1),
    "signature kind": lambda p: p["signature"]["inputs"][0].update(kind="__class__"),
    "symbol assumption": lambda p: p.update(symbols=[{"name": "s0", "assumptions": {"__class__": True}}]),
}


@pytest.mark.parametrize("case", list(CRAFTED_EDITS))
def test_crafted_program_json_is_refused_without_importing(case, valid_bytes):
    crafted = _rewrite(valid_bytes, CRAFTED_EDITS[case])
    assert "antigravity" not in sys.modules
    with pytest.raises(SerializationError):
        graphcap.load(io.BytesIO(crafted))
    assert "antigravity" not in sys.modules, "the loader imported a module named by the file"


def test_every_entry_is_json_or_safetensors(valid_bytes):
    """graphcap never writes a pickled entry (torch.export pickles its sample inputs, for one)."""
    entries = read_entries(io.BytesIO(valid_bytes))
    tensor_entries = {schema.WEIGHTS_ENTRY, schema.CONSTANTS_ENTRY, schema.EXAMPLE_INPUTS_ENTRY}
    assert set(entries) == {schema.PROGRAM_ENTRY} | tensor_entries
    json.loads(entries[schema.PROGRAM_ENTRY])
    for name in tensor_entries:
        n = int.from_bytes(entries[name][:8], "little")
        json.loads(entries[name][8:8 + n])


_FORBIDDEN = re.compile(
    r"\bimport\s+(c?pickle|dill|marshal|shelve|importlib)\b|from\s+(c?pickle|dill|marshal|shelve|importlib)\b(?!\.metadata\b)"
    r"|\bpickle\.|\bc?Pickler\b|\bUnpickler\b|torch\.load\b|weights_only|\bimportlib\b(?!\.metadata\b)|__import__"
    r"|(?<![.\w])eval\(|(?<![.\w])exec\(")


# The command line imports the factory file the user names (`graphcap export FILE.py:FACTORY`), at the
# user's request; nothing that reads a .pt2 file reaches it.
# The loader imports a module by name only below a package the process already imported, or one the
# user names (load(import_modules=...), --import): serialize/class_lookup.py, the one place, tested in
# tests/unit/test_serialize_classes.py::test_a_file_never_makes_the_loader_import_a_package.
_RUNS_USER_CODE = {"cli/factory.py", "serialize/class_lookup.py"}
# (importlib.metadata reads installed versions, imports nothing: `graphcap --version`, cli/versions.py.)


def test_no_pickle_or_torch_load_in_src_graphcap():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() in _RUNS_USER_CODE:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _FORBIDDEN.search(line):
                offenders.append(f"{path.relative_to(SRC)}:{i}: {line.strip()}")
    assert not offenders, "pickle / torch.load / dynamic import found:\n" + "\n".join(offenders)
