"""Damaged, foreign and hostile files (audit 2026-11-27 late morning, bench/probes/damaged_files_audit.py).

A crafted file has matching hashes (the archive is rewritten around the edit), so
these reach the decoder: it must refuse with a graphcap error naming where, never
run code, never load a program different from what the file's parts agree on.
"""
from __future__ import annotations

import functools
import io
import json
import sys

import pytest
import torch

import graphcap
from conftest import program_json_edited
from graphcap.errors import SerializationError
from graphcap.serialize import class_lookup, schema
from graphcap.serialize.archive import read_entries, write_archive


class _Dict(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return {"a": self.lin(x).relu()}


@functools.lru_cache(maxsize=1)
def _saved() -> bytes:
    torch.manual_seed(0)
    buf = io.BytesIO()
    graphcap.save(graphcap.export(_Dict(), (torch.randn(2, 3),)), buf)
    return buf.getvalue()


def _crafted(edit) -> io.BytesIO:
    return program_json_edited(_saved(), edit)


def _set_out_type(name):
    def edit(program):
        program["module_call_graph"][0]["signature"]["out_spec"]["type"] = name
    return edit


@pytest.mark.parametrize("name", ["unittest.__main__.X", "json.__main__.X", "torch.__main__.X",
                                  "torch.utils.bottleneck.__main__.X"])
def test_a_class_named_below_a_main_module_never_imports_that_script(name):
    # unittest/__main__.py runs a test discovery and exits when imported: before the audit a
    # crafted structure class name made graphcap.load raise SystemExit from inside unittest
    module = name.rsplit(".", 1)[0]
    assert module not in sys.modules
    with pytest.raises(SerializationError, match="not registered") as info:
        graphcap.load(_crafted(_set_out_type(name)))
    assert "pytree specs" in str(info.value)
    assert module not in sys.modules


def test_dunder_modules_are_not_imported_even_below_a_module_the_user_named():
    with class_lookup.options(import_modules=["unittest"]):
        assert class_lookup.find_class("unittest.__main__.TestProgram") is None
    assert "unittest.__main__" not in sys.modules
    with class_lookup.options(import_modules=["unittest"]):  # the named package's own classes still are
        assert class_lookup.find_class("unittest.case.TestCase") is not None


def test_a_standard_library_module_not_yet_imported_is_not_imported_for_a_file():
    # the standard library is not the user's library: a file naming one of its unloaded modules
    # does not load it (some act on import); one the user names for the load is imported
    for module in ("json.tool", "http.server", "xml.dom.minidom", "email.mime.audio"):
        if module in sys.modules:
            continue
        assert class_lookup.find_class(f"{module}.Anything") is None
        assert module not in sys.modules
    assert class_lookup.find_class("collections.OrderedDict") is collections_ordered_dict()


def collections_ordered_dict():
    import collections
    return collections.OrderedDict


def test_a_class_in_an_imported_library_submodule_is_still_found():
    # the rule the audit keeps: below a (non standard library) package the process imported
    assert class_lookup.find_class("torch.nn.modules.linear.Linear") is torch.nn.Linear


@pytest.mark.parametrize("field, value", [("stride", [2**63, 1]), ("shape", [2, -2**63 - 1]),
                                          ("offset", 2**64), ("shape", [2**100, 3])])
def test_integers_beyond_64_bits_are_refused_at_their_json_path(field, value):
    def edit(program):
        program["graph_module"]["nodes"][0]["meta"]["val"]["tensor"][field] = value
    with pytest.raises(SerializationError, match="fits 64 bits") as info:
        graphcap.load(_crafted(edit))
    assert f"graph_module.nodes[0].meta.val.tensor.{field}" in str(info.value).replace("'", "")


def test_in_range_integers_still_load_and_run():
    ep = graphcap.load(io.BytesIO(_saved()))
    x = torch.randn(2, 3)
    assert torch.equal(ep.module()(x)["a"], graphcap.load(io.BytesIO(_saved())).module()(x)["a"])


def _call_node(program, op):
    return next(n for n in program["graph_module"]["nodes"]
                if n["op"] == "call_function" and n["target"] == {"op": op})


@pytest.mark.parametrize("change, match", [
    (lambda n: n.__setitem__("args", []), "required argument 'input'"),
    (lambda n: n.__setitem__("args", n["args"][:1]), "required argument 'weight'"),
    (lambda n: n.__setitem__("args", n["args"] + [None, 3]), "passes 5 positional arguments"),
    (lambda n: n.__setitem__("kwargs", {"alpha": 2}), "keyword 'alpha'"),
    (lambda n: n.__setitem__("kwargs", {"input": n["args"][0]}), "'input' twice"),
])
def test_a_call_whose_arguments_do_not_fit_the_schema_is_refused_at_load(change, match):
    # before the audit such a graph loaded and failed only when run, with torch's RuntimeError
    def edit(program):
        change(_call_node(program, "aten::linear.default"))
    with pytest.raises(SerializationError, match=match) as info:
        graphcap.load(_crafted(edit))
    assert "Where: program.json graph_module.nodes[3]" in str(info.value)


def test_arguments_given_by_keyword_or_left_to_their_default_still_load():
    def edit(program):
        node = _call_node(program, "aten::linear.default")
        x, w, b = node["args"]
        node["args"], node["kwargs"] = [x], {"weight": w, "bias": b}
    x = torch.randn(2, 3)
    ep = graphcap.load(_crafted(edit))
    assert torch.equal(ep.module()(x)["a"], graphcap.load(io.BytesIO(_saved())).module()(x)["a"])


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(3))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x * self.a + self.b


@pytest.mark.parametrize("mmap", [False, True])
def test_a_weights_entry_holding_storages_no_tensor_uses_is_refused(tmp_path, mmap):
    # program.json of one save with the weights of another (hashes made to agree) loaded before
    # the audit, silently ignoring the storages no tensor of the program described
    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save
    entries = read_entries(io.BytesIO(_saved()))
    blobs = st_load(entries[schema.WEIGHTS_ENTRY])
    entries[schema.WEIGHTS_ENTRY] = st_save({**blobs, "other.weight": torch.randn(5)})
    path = tmp_path / "mixed.pt2"
    write_archive(str(path), entries)
    with pytest.raises(SerializationError) as info:
        graphcap.load(str(path), mmap=mmap)
    assert "weights.safetensors" in str(info.value)
    if not mmap:  # (memory-mapped, the per-storage checksums already differ)
        assert "'other.weight', which no tensor program.json describes uses" in str(info.value)


@pytest.mark.parametrize("name", ["../evil.txt", "/tmp/evil.txt", "extra/../../evil", "extra/..", "",
                                  "C:\\evil", "weights2.safetensors", "program.json/x", "extra/a/b",
                                  "methods/0.pt2", "state.safetensors"])
def test_an_entry_no_save_writes_is_refused_even_when_the_manifest_lists_it(name):
    # the hashes agree (the manifest is rewritten): before the audit such files loaded as if whole
    entries = read_entries(io.BytesIO(_saved()))
    entries[name] = b"x"
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match="which no graphcap.save writes in a program's file") as info:
        graphcap.load(io.BytesIO(out.getvalue()), extra_files={"notes.txt": None})
    assert "Where:" in str(info.value)


def test_extra_files_with_allowed_names_still_load():
    buf = io.BytesIO()
    graphcap.save(graphcap.load(io.BytesIO(_saved())), buf, extra_files={"notes.txt": "v3", "a-b_c.0": b"\xff"})
    extra = {"notes.txt": None, "a-b_c.0": None}
    graphcap.load(io.BytesIO(buf.getvalue()), extra_files=extra)
    assert extra == {"notes.txt": "v3", "a-b_c.0": b"\xff"}


def test_a_multi_method_file_with_an_entry_no_save_writes_is_refused():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * self.w

        def other(self, x):
            return x + self.w

    programs = graphcap.export_methods(Two(), {"forward": (torch.randn(3),), "other": (torch.randn(3),)})
    buf = io.BytesIO()
    graphcap.save(programs, buf)
    entries = read_entries(io.BytesIO(buf.getvalue()))
    assert "multi_method.json" in entries
    graphcap.load(io.BytesIO(buf.getvalue()))  # as saved: loads
    entries["methods/2.pt2"] = entries["methods/0.pt2"]
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match="in a multi-method file"):
        graphcap.load(io.BytesIO(out.getvalue()))


@pytest.mark.parametrize("name", ["../evil.txt", "", "extra/notes.txt"])
def test_a_member_the_manifest_does_not_list_is_named_in_where(name):
    import zipfile
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(_saved())) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), b"x")
    with pytest.raises(SerializationError, match="which its manifest does not list") as info:
        graphcap.load(io.BytesIO(out.getvalue()))
    assert f"Where: {name or '(an entry with an empty name)'}" in str(info.value)


class _Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,))


@functools.lru_cache(maxsize=1)
def _saved_cond() -> bytes:
    buf = io.BytesIO()
    graphcap.save(graphcap.export(_Cond(), (torch.randn(3),)), buf)
    return buf.getvalue()


@pytest.mark.parametrize("operands", [None, 3, "x", [], "delete"])
def test_a_control_flow_call_of_the_wrong_form_is_refused_naming_the_node(operands):
    # before the audit: "The file could not be decoded (TypeError: 'NoneType' object is not
    # iterable)" from inside the IR verifier, no Where; an empty list still reached the verifier
    entries = read_entries(io.BytesIO(_saved_cond()))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    node = next(n for n in program["graph_module"]["nodes"] if n["op"] == "call_function" and "hop" in n["target"])
    if operands == "delete":
        node["args"].pop()
    else:
        node["args"][3] = operands
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError) as info:
        graphcap.load(io.BytesIO(out.getvalue()))
    text = str(info.value)
    assert "graph_module.nodes[" in text
    x = torch.randn(3)
    assert torch.equal(graphcap.load(io.BytesIO(_saved_cond())).module()(x), _Cond()(x))


def test_a_program_breaking_the_ir_invariants_is_refused_with_where():
    def edit(program):
        output = program["graph_module"]["nodes"][-1]
        output["args"] = [{"tuple": [None]}]
    with pytest.raises(SerializationError, match="IR invariants") as info:
        graphcap.load(_crafted(edit))
    assert "Where: program.json" in str(info.value)


@pytest.mark.parametrize("spec", [None, {"type": "builtins.list", "context": None, "children": [None]},
                                  {"type": "builtins.tuple", "context": None, "children": [None, None]}])
def test_an_input_structure_that_is_not_args_and_kwargs_is_refused_at_load(spec):
    # before the audit it loaded, and every call then failed with InputStructureError
    def edit(program):
        program["module_call_graph"][0]["signature"]["in_spec"] = spec
    with pytest.raises(SerializationError, match=r"not \(args, kwargs\)") as info:
        graphcap.load(_crafted(edit))
    assert "Where: program.json module_call_graph[0].signature.in_spec" in str(info.value)


@pytest.mark.parametrize("val", [None, True, -1, 1.5, "os.system"])
def test_a_tensor_input_whose_graph_value_is_a_constant_is_refused(val):
    # before the audit it loaded; every call then failed: "Expected input at *args[0] to be equal to ..."
    def edit(program):
        node = next(n for n in program["graph_module"]["nodes"] if n["name"] == "x")
        node["meta"]["val"] = val
        node["meta"].pop("tensor_meta", None)
    # refused where the graph first reads it (linear's 'input'), else by the signature check
    with pytest.raises(SerializationError, match=r"Input x is a tensor in the signature|"
                                                 r"as aten.linear.default's argument 'input', which is a Tensor"):
        graphcap.load(_crafted(edit))


class _Identity(torch.nn.Module):
    def forward(self, x, y):
        return x, y + 1


def test_a_tensor_input_no_operator_reads_is_checked_against_the_signature():
    buf = io.BytesIO()
    graphcap.save(graphcap.export(_Identity(), (torch.randn(2), torch.randn(2))), buf)
    entries = read_entries(io.BytesIO(buf.getvalue()))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    node = next(n for n in program["graph_module"]["nodes"] if n["name"] == "x")
    node["meta"]["val"] = "os.system"
    node["meta"].pop("tensor_meta", None)
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match="Input x is a tensor in the signature, but its value in the "
                                                 "graph is str") as info:
        graphcap.load(io.BytesIO(out.getvalue()))
    assert "Where: program.json signature.inputs[0]" in str(info.value)


def test_a_save_failing_midway_keeps_the_old_file_and_leaves_nothing(tmp_path, monkeypatch):
    # held before the audit; kept as the audit's check of atomic saves
    import graphcap.serialize.archive as archive
    ep = graphcap.load(io.BytesIO(_saved()))
    good = tmp_path / "m.pt2"
    graphcap.save(ep, str(good))
    before = good.read_bytes()
    broken = graphcap.load(io.BytesIO(_saved()))
    broken.state_dict["lin.weight"] = torch.randn(2, 3).to_sparse()
    with pytest.raises(SerializationError, match="sparse"):
        graphcap.save(broken, str(good))

    def full_disk(fileobj, entries):
        fileobj.write(b"PK\x03\x04 half an archive")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(archive, "_write_zip", full_disk)
    with pytest.raises(OSError):
        graphcap.save(ep, str(good))
    with pytest.raises(OSError):
        graphcap.save(ep, str(tmp_path / "new.pt2"))
    assert good.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]


@pytest.mark.parametrize("version", ["", "10", 1.5, [10], True])
def test_an_operator_set_version_that_is_no_integer_is_refused_naming_it(version):
    # before the audit: "The file could not be decoded (TypeError: '<=' not supported ...)", no Where
    def edit(program):
        program["opset_version"]["aten"] = version
    with pytest.raises(SerializationError, match="not an integer") as info:
        graphcap.load(_crafted(edit))
    assert "Where: program.json: opset_version['aten']" in str(info.value)


@pytest.mark.parametrize("position, value, match", [(0, None, "NoneType as aten.linear.default's argument 'input'"),
                                                    (1, {"dtype": "torch.float32"},
                                                     "dtype as aten.linear.default's argument 'weight'"),
                                                    (2, "x", "str as aten.linear.default's argument 'bias'")])
def test_a_non_tensor_where_the_schema_takes_a_tensor_is_refused(position, value, match):
    # before the audit it loaded; the call then failed with torch's "Expected a proper Tensor but got None"
    def edit(program):
        _call_node(program, "aten::linear.default")["args"][position] = value
    with pytest.raises(SerializationError, match=match):
        graphcap.load(_crafted(edit))


def test_an_optional_tensor_left_out_still_loads_as_the_file_says():
    # bias None is a consistent program (linear without bias): it loads, and computes that
    def edit(program):
        _call_node(program, "aten::linear.default")["args"][2] = None
    ep = graphcap.load(_crafted(edit))
    x = torch.randn(2, 3)
    weight = graphcap.load(io.BytesIO(_saved())).state_dict["lin.weight"]
    assert torch.equal(ep.module()(x)["a"], torch.nn.functional.linear(x, weight).relu())


@pytest.mark.parametrize("args", [[], [None, 0], [{"node": "cond"}, None], [{"node": "cond"}, True],
                                  [{"node": "cond"}, ""]])
def test_an_item_read_of_the_wrong_form_is_refused_naming_the_node(args):
    # before the audit these loaded and the call failed with TypeError / IndexError, or failed in codegen
    entries = read_entries(io.BytesIO(_saved_cond()))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    node = next(n for n in program["graph_module"]["nodes"] if n["target"] == {"python": "_operator.getitem"})
    node["args"] = args
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match="not of the form \\(node, index\\)") as info:
        graphcap.load(io.BytesIO(out.getvalue()))
    assert "Where: program.json graph_module.nodes[" in str(info.value)


@pytest.mark.parametrize("pred", [None, 0, "x"])
def test_a_cond_predicate_that_is_no_node_or_bool_is_refused(pred):
    # before the audit None loaded, and cond took the false branch: different numbers, silently
    entries = read_entries(io.BytesIO(_saved_cond()))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    node = next(n for n in program["graph_module"]["nodes"] if n["op"] == "call_function" and "hop" in n["target"])
    node["args"][0] = pred
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    # (the load_hop_args audit names the argument: "passes NoneType as cond's predicate")
    with pytest.raises(SerializationError, match="as cond's predicate, which is a bool or a one-element tensor"):
        graphcap.load(io.BytesIO(out.getvalue()))



def test_a_number_in_place_of_self_is_refused_while_numbers_elsewhere_load():
    # `add(x, 1)` made `add(-1, 1)` loaded before the audit and computed a 0-d tensor
    def edit(program):
        node = _call_node(program, "aten::relu.default")
        node["args"][0] = -1
    with pytest.raises(SerializationError, match="int as aten.relu.default's argument 'self'"):
        graphcap.load(_crafted(edit))
