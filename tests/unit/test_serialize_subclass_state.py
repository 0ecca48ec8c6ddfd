"""Tensor-subclass parameters and buffers survive save/load (format 4).

A module may hold a traceable wrapper subclass (``__tensor_flatten__``) as a
parameter or buffer. The file stores it as its class's name, its flatten
context and its inner tensors; loading rebuilds it with the class's
``__tensor_unflatten__``, so the loaded program holds the same subclass, runs
as eager does, and decomposes (the subclass split into its inner tensors) as
the program it was saved from.
"""
from __future__ import annotations

import io
import json

import pytest
import torch
from torch.testing._internal.custom_tensor import CustomTensorPlainOut
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive


class SubclassState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = torch.nn.Parameter(torch.randn(3, 4))
        self.custom = torch.nn.Parameter(CustomTensorPlainOut(torch.randn(3, 4), torch.randn(3, 4)))
        shared = torch.randn(4)
        # nested, and two inner tensors over one storage
        self.register_buffer("nested", TwoTensor(TwoTensor(shared, shared), torch.randn(4)))
        self.register_buffer("pair", TwoTensor(torch.randn(3, 4), torch.randn(3, 4)), persistent=False)

    def forward(self, x):
        s = (2 * self.plain + self.custom).sum()
        return x * s + self.pair.b + self.nested.a.b.sum()


def _leaves(t):
    """The plain inner tensors of a subclass value, depth first, as (path, values) pairs."""
    if type(t) in (torch.Tensor, torch.nn.Parameter):
        return [((), t.detach().tolist())]
    return [((attr, *path), v) for attr in t.__tensor_flatten__()[0] for path, v in _leaves(getattr(t, attr))]


def _round_trip(ep, **load_kwargs):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return graphcap.load(io.BytesIO(buf.getvalue()), **load_kwargs), buf.getvalue()


def test_subclass_state_loads_as_the_same_classes_and_runs():
    torch.manual_seed(0)
    model = SubclassState()
    x = torch.randn(3, 4)
    ep = graphcap.export(model, (x,))
    loaded, _ = _round_trip(ep)
    assert str(loaded.graph) == str(ep.graph)
    custom = loaded.state_dict["custom"]
    assert type(custom) is CustomTensorPlainOut and isinstance(custom, torch.nn.Parameter)
    nested = loaded.state_dict["nested"]
    assert type(nested) is TwoTensor and type(nested.a) is TwoTensor
    assert nested.a.a.untyped_storage().data_ptr() == nested.a.b.untyped_storage().data_ptr()
    assert type(loaded.constants["pair"]) is TwoTensor
    for name in ("custom", "nested"):
        assert _leaves(loaded.state_dict[name]) == _leaves(ep.state_dict[name])
    vals = {n.name: n.meta["val"] for n in loaded.graph.nodes if n.op == "placeholder"}
    assert type(vals["p_custom"]) is CustomTensorPlainOut and vals["p_custom"].requires_grad
    assert type(vals["b_nested"]) is TwoTensor and type(vals["b_nested"].a) is TwoTensor
    for x in (torch.randn(3, 4), torch.ones(3, 4)):
        torch.testing.assert_close(loaded.module()(x), model(x))


def test_loaded_subclass_program_decomposes_as_the_original():
    model = SubclassState()
    ep = graphcap.export(model, (torch.randn(3, 4),))
    loaded, _ = _round_trip(ep)
    original, again = ep.run_decompositions({}), loaded.run_decompositions({})
    assert str(again.graph) == str(original.graph)
    assert "p_parametrizations_custom_original0" in str(again.graph)
    x = torch.randn(3, 4)
    torch.testing.assert_close(again.module()(x), model(x))


def test_subclass_state_loads_memory_mapped(tmp_path):
    model = SubclassState()
    ep = graphcap.export(model, (torch.randn(3, 4),))
    path = tmp_path / "sub.pt2"
    graphcap.save(ep, path)
    loaded = graphcap.load(path, mmap=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded.module()(x), model(x))


class LocalSubclassModel(torch.nn.Module):
    def __init__(self, cls):
        super().__init__()
        self.w = torch.nn.Parameter(cls(torch.ones(2), torch.ones(2)))

    def forward(self, x):
        return x + self.w.a


def test_subclass_defined_in_a_function_is_refused_at_save():
    class LocalTwo(TwoTensor):
        pass

    ep = graphcap.export(LocalSubclassModel(LocalTwo), (torch.ones(2),))
    with pytest.raises(SerializationError, match="defined inside a function") as info:
        graphcap.save(ep, io.BytesIO())
    assert "top level of a module" in str(info.value)


def _edit_program(data: bytes, edit) -> bytes:
    entries = read_entries(io.BytesIO(data))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    edit(program)
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    return out.getvalue()


def test_a_subclass_the_process_cannot_find_is_named_with_the_fix():
    ep = graphcap.export(SubclassState(), (torch.randn(3, 4),))
    _, data = _round_trip(ep)

    def rename(program):
        program["state"]["weights"]["custom"]["subclass"] = "gc_not_imported_lib.tensors.Packed"
        for node in program["graph_module"]["nodes"]:
            sub = node["meta"].get("val", {}).get("tensor", {}).get("subclass") \
                if isinstance(node["meta"].get("val"), dict) else None
            if sub and sub["class"].endswith("CustomTensorPlainOut"):
                sub["class"] = "gc_not_imported_lib.tensors.Packed"
    with pytest.raises(SerializationError, match="gc_not_imported_lib.tensors.Packed") as info:
        graphcap.load(io.BytesIO(_edit_program(data, rename)))
    assert "import_modules=['gc_not_imported_lib.tensors']" in str(info.value)


@pytest.mark.parametrize("name", ["builtins.dict", "torch.nn.Linear", "os.system"])
def test_a_file_cannot_name_a_class_that_is_not_a_tensor_subclass(name):
    ep = graphcap.export(SubclassState(), (torch.randn(3, 4),))
    _, data = _round_trip(ep)

    def rename(program):
        program["state"]["weights"]["custom"]["subclass"] = name
    with pytest.raises(SerializationError):
        graphcap.load(io.BytesIO(_edit_program(data, rename)))


def test_inner_tensors_that_do_not_fit_the_class_are_refused():
    ep = graphcap.export(SubclassState(), (torch.randn(3, 4),))
    _, data = _round_trip(ep)

    def drop_inner(program):
        program["state"]["weights"]["custom"]["inner"].pop("elem2")
    with pytest.raises(SerializationError, match="__tensor_unflatten__"):
        graphcap.load(io.BytesIO(_edit_program(data, drop_inner)))


def test_fake_weights_are_refused_as_weights_without_data():
    """A FakeTensor is a tensor subclass too, but not one with inner tensors: save says it has no data."""
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        model = torch.nn.Linear(4, 4)
    ep = graphcap.export(model, (torch.randn(2, 4),))
    with pytest.raises(SerializationError, match="has no data") as info:
        graphcap.save(ep, io.BytesIO())
    assert "weights=False" in str(info.value)
