"""Second save/load audit (2026-11-27 midday): each call's arguments against its operator's schema
types, torch's own operators missing in an older torch, format versions, copies of loaded programs.

``bench/probes/serialize_audit2.py`` is the probe; docs/torch-suite.md has the table.
"""
from __future__ import annotations

import copy
import functools
import io

import pytest
import torch

import graphcap
from conftest import program_json_edited
from graphcap.errors import SerializationError
from graphcap.serialize import schema
from graphcap.serialize.call_types import misfit


class _Calls(torch.nn.Module):
    def forward(self, x, y):
        z = torch.mm(x, y) + 1
        return z.view(-1).sum(dim=0, keepdim=True), torch.select(z, 0, 1).to(torch.float64)


def _args():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(4, 3)


@functools.lru_cache(maxsize=1)
def _saved() -> bytes:
    buf = io.BytesIO()
    graphcap.save(graphcap.export(_Calls(), _args()), buf)
    return buf.getvalue()


def _crafted(edit) -> io.BytesIO:
    return program_json_edited(_saved(), edit)


def _node(program, op):
    return next(n for n in program["graph_module"]["nodes"]
                if n["op"] == "call_function" and n["target"] == {"op": op})


def _set(op, position, value):
    def edit(program):
        _node(program, op)["args"][position] = value
    return edit


@pytest.mark.parametrize("op, position, value, match", [
    # a number where an operator that does not wrap numbers takes a Tensor (mm, not add)
    ("aten::mm.default", 1, 3, "passes int as aten.mm.default's argument 'mat2', which is a Tensor"),
    ("aten::mm.default", 1, 0.5, "passes float as aten.mm.default's argument 'mat2'"),
    # a lone int, a string, a tensor where a size list goes (view's size has no length)
    ("aten::view.default", 1, 12, "passes int as aten.view.default's argument 'size', which is a List\\[int\\]"),
    ("aten::view.default", 1, "x", "passes str as aten.view.default's argument 'size'"),
    ("aten::view.default", 1, {"node": "x"}, "passes node x \\(FakeTensor\\) as aten.view.default's argument 'size'"),
    ("aten::view.default", 1, {"list": [1.5]}, "passes a list holding float as aten.view.default's argument 'size'"),
    ("aten::view.default", 1, {"list": [{"node": "x"}]}, "a list holding node x"),
    # a list, a float, None where one int goes
    ("aten::select.int", 1, {"list": [0]}, "passes list as aten.select.int's argument 'dim', which is a int"),
    ("aten::select.int", 2, 1.5, "passes float as aten.select.int's argument 'index'"),
    ("aten::select.int", 2, None, "passes NoneType as aten.select.int's argument 'index'"),
    # a string, a dtype, a tensor where a bool goes; a tensor where a dtype goes
    ("aten::sum.dim_IntList", 2, "yes", "passes str as aten.sum.dim_IntList's argument 'keepdim', which is a bool"),
    ("aten::sum.dim_IntList", 2, {"dtype": "torch.float32"}, "passes dtype as aten.sum.dim_IntList's argument"),
    ("aten::to.dtype", 1, {"node": "x"}, "argument 'dtype', which is a ScalarType"),
    ("aten::to.dtype", 1, "float64", "passes str as aten.to.dtype's argument 'dtype'"),
])
def test_an_argument_of_another_kind_than_the_schema_is_refused_naming_the_node(op, position, value, match):
    # before the audit each of these loaded, and the call failed only when run, with torch's
    # "aten::mm() Expected a value of type 'Tensor' for argument 'mat2' but instead found type 'int'"
    with pytest.raises(SerializationError, match=match) as info:
        graphcap.load(_crafted(_set(op, position, value)))
    assert "Where: program.json graph_module.nodes[" in str(info.value)


@pytest.mark.parametrize("op, position, value", [
    ("aten::add.Tensor", 1, 2.5),                  # numbers where torch wraps them (add, mul, sub, div, ...)
    ("aten::add.Tensor", 1, True),
    ("aten::sum.dim_IntList", 1, 0),               # a lone int where the schema gives the list a length (int[1])
    ("aten::sum.dim_IntList", 2, None),            # None and numbers have a truth value: a bool takes them
    ("aten::sum.dim_IntList", 2, 0),
    ("aten::select.int", 2, True),                 # a bool is an int
    ("aten::select.int", 1, {"dtype": "torch.int8"}),  # dtypes convert to ints (as torch's binding does)
])
def test_values_torchs_call_takes_still_load_and_compute_what_torch_computes(op, position, value):
    ep = graphcap.load(_crafted(_set(op, position, value)))
    x, y = _args()
    ep.module()(x, y)  # runs: torch's own call takes the value


def test_a_number_in_add_still_loads_and_gives_torchs_numbers():
    ep = graphcap.load(_crafted(_set("aten::add.Tensor", 1, 2.5)))
    x, y = _args()
    assert torch.equal(ep.module()(x, y)[0], (torch.mm(x, y) + 2.5).view(-1).sum(dim=0, keepdim=True))


class _Kinds(torch.nn.Module):
    """Numbers in Tensor slots, symbolic sizes in int and list slots, dtypes, devices, strings, indices."""

    def forward(self, x, idx):
        n = x.shape[0]
        y = (x + 1) * 0.5 - n
        z = torch.where(y > 0, y, 0.0)
        w = torch.cat([z, x], dim=1).view(n, -1).to(torch.float64).float()
        s = w.sum(dim=[1], keepdim=True) + torch.arange(n, device=x.device).unsqueeze(1)
        return (torch.nn.functional.gelu(s, approximate="tanh"), x[idx, :2],
                torch.full((2,), 3.0).clamp(min=1, max=2), x.new_zeros(n, 2, dtype=torch.int64))


class _Cond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x).relu(), lambda x: self.lin(x) - 1, (x,))


def _roundtrip(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return graphcap.load(buf)


@pytest.mark.parametrize("decompose", [False, True])
@pytest.mark.parametrize("exporter", ["graphcap", "torch"])
def test_programs_holding_every_argument_kind_still_load(exporter, decompose):
    torch.manual_seed(0)
    model, x, idx = _Kinds(), torch.randn(3, 4), torch.tensor([0, 2])
    dims = {"x": {0: torch.export.Dim("n", min=2, max=16)}, "idx": None}
    ep = (graphcap.export(model, (x, idx), dynamic_shapes=dims) if exporter == "graphcap"
          else graphcap.from_torch(torch.export.export(model, (x, idx), dynamic_shapes=dims)))
    if decompose:
        ep = ep.run_decompositions()
    loaded = _roundtrip(ep)
    for args in [(x, idx), (torch.randn(7, 4), torch.tensor([1, 5]))]:
        for a, b in zip(loaded.module()(*args), model(*args)):
            assert torch.allclose(a, b)


def test_control_flow_programs_still_load():
    torch.manual_seed(0)
    model, x = _Cond(), torch.randn(3, 4)
    loaded = _roundtrip(graphcap.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("b", max=16)}}))
    for arg in (x, -x.abs(), x.abs()):
        assert torch.allclose(loaded.module()(arg), model(arg))


# The check against torch's own call binding: for each value the check refuses, torch's call refuses it
# too (or fails before any kernel runs), so no file torch would run is refused.
_X = torch.randn(3, 4)
_VALUES = [2, True, 2.0, 1j, "cpu", None, torch.float32, torch.strided, torch.contiguous_format, torch.device("cpu"),
           _X, torch.tensor(2), torch.tensor(2.0), [1], [_X], [None], (1,), [1.0], [True], [], ["a"]]
_SLOTS = [
    (torch.ops.aten.mm.default, [_X, _X.t()], "mat2"), (torch.ops.aten.add.Tensor, [_X, _X], "other"),
    (torch.ops.aten.add.Tensor, [_X, _X], "alpha"), (torch.ops.aten.linear.default, [_X, torch.randn(2, 4)], "bias"),
    (torch.ops.aten.cat.default, [[_X, _X], 0], "tensors"),
    (torch.ops.aten.index.Tensor, [_X, [torch.tensor([0])]], "indices"),
    (torch.ops.aten.select.int, [_X, 0, 1], "dim"), (torch.ops.aten.select.int, [_X, 0, 1], "index"),
    (torch.ops.aten.sum.dim_IntList, [_X, [0]], "dim"), (torch.ops.aten.sum.dim_IntList, [_X, [0]], "keepdim"),
    (torch.ops.aten.view.default, [_X, [12]], "size"), (torch.ops.aten.mul.Scalar, [_X, 2], "other"),
    (torch.ops.aten.dropout.default, [_X, 0.1, False], "p"), (torch.ops.aten._to_copy.default, [_X], "dtype"),
    (torch.ops.aten.gelu.default, [_X], "approximate"), (torch.ops.aten.full.default, [[2], 1.0], "device"),
    (torch.ops.aten.clone.default, [_X], "memory_format"), (torch.ops.aten.where.self, [_X > 0, _X, _X], "other"),
    (torch.ops.aten.clamp.default, [_X, 0.0, 1.0], "min"), (torch.ops.aten.repeat.default, [_X, [1, 2]], "repeats"),
]


def _as_graph_value(graph, v):
    if isinstance(v, list):
        return [_as_graph_value(graph, i) for i in v]
    if isinstance(v, torch.Tensor):
        node = graph.placeholder(f"v{len(graph.nodes)}")
        node.meta["val"] = v
        return node
    return v


@pytest.mark.parametrize("op, args, slot", _SLOTS, ids=[f"{op}-{slot}" for op, _, slot in _SLOTS])
def test_the_check_refuses_only_what_torchs_call_refuses(op, args, slot):
    names = [a.name for a in op._schema.arguments]
    graph = torch.fx.Graph()
    for value in _VALUES:
        call = dict(zip(names, args))
        call[slot] = value
        wrong = misfit(op, {k: _as_graph_value(graph, v) for k, v in call.items()})
        if wrong is None:
            continue
        assert wrong[0] == slot
        with pytest.raises((RuntimeError, TypeError)) as info:
            op(**call)
        text = str(info.value)
        assert ("Expected a value of type" in text or "instead found type" in text
                or "Expected a proper Tensor but got None" in text), (value, text)


def test_an_aten_operator_this_torch_lacks_names_both_torch_versions():
    # before the audit: "Import or load the library that defines the 'aten' operators", as for a custom library
    def edit(program):
        program["producer"] = {"torch": "9.9.0"}
        _node(program, "aten::mm.default")["target"] = {"op": "aten::gc_future_mm.default"}
    with pytest.raises(SerializationError) as info:
        graphcap.load(_crafted(edit))
    text = str(info.value)
    assert f"which this torch ({torch.__version__}) does not have" in text
    assert "saved with torch 9.9.0" in text
    assert "Where: program.json operator aten::gc_future_mm.default" in text
    assert "export the program again with this torch" in text


def test_program_json_of_another_format_version_than_the_archive_is_refused_naming_the_field():
    def edit(program):
        program["format_version"] = schema.FORMAT_VERSION + 1
    with pytest.raises(SerializationError, match="records the format version 7") as info:
        graphcap.load(_crafted(edit))
    assert "Where: program.json: format_version" in str(info.value)


def test_copies_of_a_loaded_control_flow_program_run_and_save_again():
    torch.manual_seed(0)
    model, x = _Cond(), torch.randn(3, 4)
    loaded = _roundtrip(graphcap.export(model, (x,)))
    for copied in (copy.deepcopy(loaded), copy.copy(loaded)):
        for arg in (x.abs(), -x.abs()):
            assert torch.allclose(copied.module()(arg), model(arg))
            assert torch.allclose(_roundtrip(copied).module()(arg), model(arg))
    assert torch.allclose(copy.deepcopy(loaded.module())(x), model(x))
