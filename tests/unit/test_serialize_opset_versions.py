"""torch.export's save/load keywords: opset_version, pickle_protocol, expected_opset_version.

Code written for torch.export passes them; after switching the import it must
still run. Each case compares with what torch.export does with the same
program and arguments, and pins down what graphcap does beyond it (it records
the versions and checks them; torch 2.14 drops both).
"""
from __future__ import annotations

import inspect
import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize.archive import read_entries

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


@pytest.fixture(scope="module")
def args():
    return (torch.randn(2, 4),)


@pytest.fixture(scope="module")
def ep(args):
    torch.manual_seed(0)
    return graphcap.export(Small(), args)


@pytest.fixture(scope="module")
def torch_ep(args):
    torch.manual_seed(0)
    return torch.export.export(Small(), args)


def _saved(ep, **kwargs) -> bytes:
    buf = io.BytesIO()
    graphcap.save(ep, buf, **kwargs)
    return buf.getvalue()


def _recorded(data: bytes) -> dict:
    return json.loads(read_entries(io.BytesIO(data))["program.json"])["opset_version"]


def _torch_recorded(torch_ep) -> dict:
    buf = io.BytesIO()
    torch.export.save(torch_ep, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        name = next(n for n in z.namelist() if n.endswith("models/model.json"))
        return json.loads(z.read(name))["opset_version"]


@pytest.mark.parametrize("name", ["save", "load"])
def test_every_keyword_torch_takes_is_taken(name):
    theirs = inspect.signature(getattr(torch.export, name)).parameters
    ours = inspect.signature(getattr(graphcap, name)).parameters
    for param in theirs.values():
        assert param.name in ours, f"graphcap.{name} lacks torch.export.{name}'s {param.name}="
        assert ours[param.name].kind is param.kind
        if param.default is not inspect.Parameter.empty:
            assert ours[param.name].default == param.default


def test_run_decompositions_takes_torchs_arguments():
    theirs = inspect.signature(torch.export.ExportedProgram.run_decompositions).parameters
    from graphcap.multi_method import MultiMethodProgram
    for cls in (graphcap.ExportedProgram, MultiMethodProgram):
        ours = inspect.signature(cls.run_decompositions).parameters
        assert list(ours) == list(theirs)
        assert all(ours[n].default == theirs[n].default for n in theirs)


def test_aten_version_is_the_one_torch_records(ep, torch_ep):
    recorded = _recorded(_saved(ep))
    assert recorded == {"aten": _torch_recorded(torch_ep)["aten"]}


def test_user_namespaces_are_recorded_loaded_and_written_again(ep, args):
    data = _saved(ep, opset_version={"mylib": 3, "other_ns": 0})
    assert _recorded(data) == {"aten": _recorded(_saved(ep))["aten"], "mylib": 3, "other_ns": 0}
    loaded = graphcap.load(io.BytesIO(data))
    assert loaded.opset_version == _recorded(data)
    torch.testing.assert_close(loaded.module()(*args), ep.module()(*args))
    # saved again: the file's namespaces stay; the caller's win; derived programs keep them
    assert _recorded(_saved(loaded)) == _recorded(data)
    assert _recorded(_saved(loaded, opset_version={"mylib": 4}))["mylib"] == 4
    assert _recorded(_saved(loaded.run_decompositions()))["mylib"] == 3
    # the caller may state the aten version too, as torch's serializer lets them
    assert _recorded(_saved(ep, opset_version={"aten": 7}))["aten"] == 7


def test_expected_versions_equal_or_newer_than_the_files_load(ep, torch_ep, args):
    data = _saved(ep, opset_version={"mylib": 3})
    aten = _recorded(data)["aten"]
    for expected in (None, {}, {"aten": aten}, {"aten": aten + 1}, {"mylib": 3}, {"mylib": 9},
                     {"unrecorded_ns": 0}):
        loaded = graphcap.load(io.BytesIO(data), expected_opset_version=expected)
        torch.testing.assert_close(loaded.module()(*args), ep.module()(*args))
        buf = io.BytesIO()  # torch.export loads its file with the same argument too
        torch.export.save(torch_ep, buf)
        buf.seek(0)
        torch.export.load(buf, expected_opset_version=expected)


@pytest.mark.parametrize("namespace", ["aten", "mylib"])
def test_a_file_newer_than_expected_is_refused_with_the_fix(ep, namespace):
    data = _saved(ep, opset_version={"mylib": 3})
    found = _recorded(data)[namespace]
    with pytest.raises(SerializationError) as info:
        graphcap.load(io.BytesIO(data), expected_opset_version={namespace: found - 1})
    e = info.value
    assert f"opset_version[{namespace!r}]" in e.where and "program.json" in e.where
    assert f"version {found}" in e.what and f"expects version {found - 1}" in e.what
    assert f"expected_opset_version={{{namespace!r}: {found}}}" in e.fix
    # the fix works
    graphcap.load(io.BytesIO(data), expected_opset_version={namespace: found})


def test_a_file_from_a_newer_aten_than_this_torchs_is_refused_by_default(ep, args):
    """Without expected_opset_version, aten is compared with this process's version (torch.export's loader
    fills its expectation the same way): a file claiming newer ATen operators than this torch has is
    refused, naming the versions; saying the program is fine with that version loads it."""
    newer = _recorded(_saved(ep))["aten"] + 1
    data = _saved(ep, opset_version={"aten": newer})
    with pytest.raises(SerializationError) as info:
        graphcap.load(io.BytesIO(data))
    e = info.value
    assert f"version {newer} of ATen" in e.what and f"version {newer - 1}" in e.what
    assert e.where.endswith("opset_version['aten']") and f"expected_opset_version={{'aten': {newer}}}" in e.fix
    for expected in ({"aten": newer}, {"aten": newer, "mylib": 0}):
        loaded = graphcap.load(io.BytesIO(data), expected_opset_version=expected)
        torch.testing.assert_close(loaded.module()(*args), ep.module()(*args))
    with pytest.raises(SerializationError, match="ATen"):  # naming another namespace keeps aten's default
        graphcap.load(io.BytesIO(data), expected_opset_version={"mylib": 0})


def test_refused_before_anything_is_decoded(ep):
    """A file from a newer operator set may name operators this process lacks: the version check
    comes first, so the caller reads why rather than which operator is missing."""
    entries = read_entries(io.BytesIO(_saved(ep, opset_version={"aten": 99})))
    program = json.loads(entries["program.json"])
    program["operators"]["aten::not_yet_invented.default"] = "aten::not_yet_invented(Tensor x) -> Tensor"
    node = next(n for n in program["graph_module"]["nodes"] if n["op"] == "call_function")
    node["target"] = {"op": "aten::not_yet_invented.default"}
    entries["program.json"] = json.dumps(program).encode()
    from graphcap.serialize.archive import write_archive
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match="operator set"):
        graphcap.load(io.BytesIO(out.getvalue()), expected_opset_version={"aten": 10})
    with pytest.raises(SerializationError, match="operator set"):  # this torch's version, by default
        graphcap.load(io.BytesIO(out.getvalue()))
    with pytest.raises(SerializationError, match="not_yet_invented"):  # told to accept it: the operator
        graphcap.load(io.BytesIO(out.getvalue()), expected_opset_version={"aten": 99})


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("format_v[1-4].pt2")), ids=lambda p: p.name)
def test_files_recording_no_versions_load_whatever_is_expected(path):
    loaded = graphcap.load(path, expected_opset_version={"aten": 0, "mylib": 0})
    assert loaded.opset_version == {}


def test_current_golden_file_records_its_versions():
    loaded = graphcap.load(GOLDEN / "format_v5.pt2")
    assert loaded.opset_version["golden"] == 1 and loaded.opset_version["aten"] >= 10
    with pytest.raises(SerializationError, match="'golden' operator set"):
        graphcap.load(GOLDEN / "format_v5.pt2", expected_opset_version={"golden": 0})


@pytest.mark.parametrize("bad", [[("mylib", 1)], {"my lib": 1}, {3: 1}, {"mylib": -1}, {"mylib": "3"},
                                 {"mylib": True}, {"mylib": 1.0}],
                         ids=["list", "not-a-name", "int-key", "negative", "str", "bool", "float"])
def test_malformed_versions_are_refused(ep, bad):
    with pytest.raises(SerializationError) as info:
        graphcap.save(ep, io.BytesIO(), opset_version=bad)
    assert "opset_version" in info.value.where and info.value.fix
    data = _saved(ep)
    with pytest.raises(SerializationError) as info:
        graphcap.load(io.BytesIO(data), expected_opset_version=bad)
    assert "expected_opset_version" in info.value.where and info.value.fix


def test_highest_pickle_protocol_is_this_pythons():
    from graphcap.serialize.opsets import HIGHEST_PICKLE_PROTOCOL
    assert HIGHEST_PICKLE_PROTOCOL == pickle.HIGHEST_PROTOCOL


def _torch_accepts_protocol(torch_ep, protocol) -> bool:
    try:
        torch.export.save(torch_ep, io.BytesIO(), pickle_protocol=protocol)
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("protocol", [0, 1, 2, pickle.HIGHEST_PROTOCOL, -1, None, True,
                                      pickle.HIGHEST_PROTOCOL + 1, 99, "2", 2.0])
def test_pickle_protocol_accepted_and_refused_as_torch_does(ep, torch_ep, args, protocol):
    if _torch_accepts_protocol(torch_ep, protocol):
        data = _saved(ep, pickle_protocol=protocol)
        assert data == _saved(ep), "pickle_protocol changes nothing in a file that holds no pickle"
        torch.testing.assert_close(graphcap.load(io.BytesIO(data)).module()(*args), ep.module()(*args))
    else:
        with pytest.raises(SerializationError) as info:
            graphcap.save(ep, io.BytesIO(), pickle_protocol=protocol)
        assert "pickle_protocol" in info.value.where and "no effect" in info.value.fix


def test_multi_method_files(args):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

        def other(self, x):
            return self.lin(x).sigmoid()

    progs = graphcap.export_methods(Two(), {"forward": args, "other": args})
    buf = io.BytesIO()
    graphcap.save(progs, buf, opset_version={"mylib": 2}, pickle_protocol=2)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()), expected_opset_version={"mylib": 2})
    assert all(ep.opset_version["mylib"] == 2 for ep in loaded.values())
    with pytest.raises(SerializationError, match="'mylib' operator set"):
        graphcap.load(io.BytesIO(buf.getvalue()), expected_opset_version={"mylib": 1})
    with pytest.raises(SerializationError, match="pickle_protocol"):
        graphcap.save(progs, io.BytesIO(), pickle_protocol=pickle.HIGHEST_PROTOCOL + 1)
