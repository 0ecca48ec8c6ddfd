"""The declared file format: program.json follows serialize/schema.py's PROGRAM, on saving and on loading.

A change to what ``save`` writes must come with a new ``FORMAT_VERSION`` and a
changelog line: the schema's fingerprint is recorded per version, and the
golden file of the current version, loaded and saved again, must give back
the same program.json by content.
"""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import torch

import graphcap
from conftest import program_json_edited
from graphcap.errors import SerializationError
from graphcap.serialize import encode, schema, upgrade
from graphcap.serialize.archive import read_entries
from graphcap.serialize.typed_json import describe

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _golden(version: int) -> Path:
    return GOLDEN / f"format_v{version}.pt2"


def test_changelog_lines_are_dated_and_carry_the_schema_fingerprint():
    assert graphcap.FORMAT_VERSION == schema.FORMAT_VERSION == max(schema.CHANGELOG)
    assert schema.READABLE_VERSIONS == frozenset(schema.CHANGELOG)
    for version, (date, fingerprint, text) in schema.CHANGELOG.items():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), f"version {version}: date {date!r}"
        assert re.fullmatch(r"[0-9a-f]{16}", fingerprint), f"version {version}: fingerprint {fingerprint!r}"
        assert text.strip(), f"version {version}: the changelog line says nothing"


def test_schema_change_needs_a_format_version_bump():
    recorded = schema.CHANGELOG[schema.FORMAT_VERSION][1]
    now = schema.program_fingerprint()
    assert now == recorded, (
        f"program.json's declared schema (serialize/schema.py PROGRAM) changed: its fingerprint is {now}, "
        f"format version {schema.FORMAT_VERSION} was released with {recorded}. Bump FORMAT_VERSION, add a "
        f"dated CHANGELOG line with fingerprint {now}, add an upgrader from the old version in "
        f"serialize/upgrade.py, and write the new golden file (tests/golden/make_golden.py).")


def test_description_is_plain_json_naming_every_definition():
    described = describe(schema.PROGRAM)
    assert json.loads(json.dumps(described)) == described
    assert described["root"] == {"ref": "Program"}
    for name in ("Program", "GraphModule", "Node", "NodeMeta", "Signature", "TreeSpec", "ArgValue", "Symbol"):
        assert name in described["definitions"], name


def test_every_golden_file_follows_the_schema_after_upgrading():
    for path in sorted(GOLDEN.glob("format_v*.pt2")):
        version = int(re.fullmatch(r"format_v(\d+)\.pt2", path.name).group(1))
        program = json.loads(read_entries(path)["program.json"])
        schema.check_read(upgrade.to_current_format(program, version), version)


def test_save_writes_the_current_golden_file_again_by_content(tmp_path):
    """Loading the current version's golden file and saving it gives the same program.json and tensors."""
    path = _golden(schema.FORMAT_VERSION)
    assert path.exists(), f"format version {schema.FORMAT_VERSION} has no golden file: run tests/golden/make_golden.py"
    before = read_entries(path)
    graphcap.save(graphcap.load(path), tmp_path / "again.pt2")
    after = read_entries(tmp_path / "again.pt2")
    old, new = json.loads(before.pop("program.json")), json.loads(after.pop("program.json"))
    old.pop("producer"), new.pop("producer")  # the torch version that wrote it may differ
    for key in sorted(set(old) | set(new)):
        assert new.get(key) == old.get(key), (
            f"what graphcap.save writes changed (program.json field {key!r}) without a format version bump: "
            f"bump FORMAT_VERSION in serialize/schema.py with a CHANGELOG line, and write a new golden file.")
    assert after == before, "the tensor entries save writes changed"


def _corrupted(data: bytes, edit) -> io.BytesIO:
    return program_json_edited(data, edit)


@pytest.fixture(scope="module")
def saved() -> bytes:
    ep = graphcap.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return buf.getvalue()


@pytest.mark.parametrize("edit, path, expected", [
    (lambda p: p["graph_module"]["nodes"][3].__setitem__("args", "x"), "graph_module.nodes[3].args", "an array"),
    (lambda p: p["graph_module"]["nodes"][0].pop("meta"), "graph_module.nodes[0].meta", "the field 'meta'"),
    (lambda p: p["signature"]["inputs"][0].__setitem__("kind", "WEIGHT"), "signature.inputs[0].kind",
     "one of \"USER_INPUT\""),
    (lambda p: p.__setitem__("extra_field", 1), "extra_field", "only the fields"),
    (lambda p: p["graph_module"]["nodes"][3]["args"].append({"pickle": "x"}), "graph_module.nodes[3].args[",
     "ArgValue"),
    (lambda p: p["symbols"].append({"name": "s9", "assumptions": {}, "min": "big", "max": None, "hint": None}),
     "symbols[0].min", "one of \"oo\""),
], ids=["wrong-type", "missing-field", "unknown-enum", "unknown-field", "unknown-tag", "bad-bound"])
def test_mismatched_program_json_names_path_expectation_and_fix(saved, edit, path, expected):
    with pytest.raises(SerializationError) as info:
        graphcap.load(_corrupted(saved, edit))
    e = info.value
    assert path in e.where and expected in e.what, str(e)
    assert "does not follow format version" in e.what and "save the program again" in e.fix


def test_save_refuses_to_write_what_the_schema_does_not_declare(monkeypatch):
    real = encode._Writer.signature
    monkeypatch.setattr(encode._Writer, "signature", lambda self, sig: {**real(self, sig), "undeclared": 1})
    ep = graphcap.export(torch.nn.ReLU(), (torch.randn(2),))
    with pytest.raises(SerializationError, match="graphcap bug") as info:
        graphcap.save(ep, io.BytesIO())
    assert "signature.undeclared" in info.value.where


def test_older_format_versions_are_upgraded_step_by_step(monkeypatch):
    """With a (pretend) version 3, a version-1 file goes through the 1→2 and 2→3 upgraders in order."""
    monkeypatch.setattr(schema, "FORMAT_VERSION", 3)
    monkeypatch.setattr(schema, "READABLE_VERSIONS", frozenset({1, 2, 3}))
    steps = []
    monkeypatch.setitem(upgrade.FORMAT_UPGRADERS, 1, lambda p: steps.append(1) or {**p, "renamed": p["old"]})
    monkeypatch.setitem(upgrade.FORMAT_UPGRADERS, 2, lambda p: steps.append(2) or {**p, "twice": True})
    out = upgrade.to_current_format({"format_version": 1, "old": 5}, 1)
    assert steps == [1, 2] and out == {"format_version": 3, "old": 5, "renamed": 5, "twice": True}
    assert upgrade.to_current_format({"format_version": 3}, 3) == {"format_version": 3}
    monkeypatch.delitem(upgrade.FORMAT_UPGRADERS, 2)
    with pytest.raises(SerializationError, match="No upgrader from format version 2"):
        upgrade.to_current_format({"format_version": 1, "old": 5}, 1)


def test_every_readable_older_version_has_an_upgrader():
    for version in schema.READABLE_VERSIONS:
        if version < schema.FORMAT_VERSION:
            assert version in upgrade.FORMAT_UPGRADERS, f"format version {version} has no upgrader"
