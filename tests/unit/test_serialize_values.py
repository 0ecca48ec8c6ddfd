"""The JSON encodings under program.json: argument values, symbolic sizes in
node values, and pytree specs (namedtuples, dataclasses, auto-flattened classes)."""
from __future__ import annotations

import collections
import dataclasses
import io
import json

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize.pytree_specs import json_to_spec, spec_to_json
from graphcap.serialize.values import decode_value, encode_value

ARGUMENTS = [
    None, True, False, 0, -7, 2**62, 1.5, float("inf"), float("-inf"), "text", [1, 2], (3, [4, None]),
    {"a": 1, 2: "b"}, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.device("cpu"),
    torch.device("cuda", 1), torch.strided, torch.sparse_coo, torch.channels_last, torch.preserve_format,
    torch.contiguous_format, 1 + 2j, slice(1, None, 2), Ellipsis, torch.Size([2, 3]),
]


@pytest.mark.parametrize("value", ARGUMENTS, ids=[repr(v)[:30] for v in ARGUMENTS])
def test_argument_values_round_trip(value):
    j = json.loads(json.dumps(encode_value(value), allow_nan=False))
    back = decode_value(j)
    assert back == value and type(back) is type(value)


def test_nan_round_trips():
    back = decode_value(json.loads(json.dumps(encode_value(float("nan")), allow_nan=False)))
    assert back != back


@pytest.mark.parametrize("bad", [[1, 2], {"tuple": 3}, {"dtype": "torch.Tensor"}, {"device": "cpu; rm"},
                                 {"memory_format": "x"}, {"a": 1, "b": 2}, {"float": "1e400"}, 2**80])
def test_malformed_values_are_serialization_errors(bad):
    with pytest.raises(SerializationError):
        decode_value(bad)


Point = collections.namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


class Holder:
    def __init__(self, a, b):
        self.a, self.b, self.tag = a, b, "kept"


def test_program_with_namedtuple_dataclass_and_auto_class_outputs():
    graphcap.register_dataclass(Pair)

    class M(torch.nn.Module):
        def forward(self, p: Point, x):
            return Pair(p.x + x, p.y * x), Holder(x.sin(), [x.cos()]), Point(x, x + 1)

    args = (Point(torch.randn(3), torch.randn(3)), torch.randn(3))
    with pytest.warns(UserWarning, match="Holder"):
        ep = graphcap.export(M(), args)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    ep2 = graphcap.load(io.BytesIO(buf.getvalue()))
    assert ep2.call_spec == ep.call_spec
    out, expected = ep2.module()(*args), ep.module()(*args)
    assert type(out[0]) is Pair and type(out[1]) is Holder and type(out[2]) is Point
    assert out[1].tag == "kept" and torch.equal(out[1].b[0], expected[1].b[0])


def test_unregistered_class_is_named_with_the_fix():
    j = {"type": "mylib.outputs.Result", "context": None, "children": [None]}
    with pytest.raises(SerializationError, match="mylib.outputs.Result.*not registered") as info:
        json_to_spec(j)
    assert "register_pytree_node" in str(info.value)


def test_unregistered_namedtuple_is_named():
    j = {"type": "collections.namedtuple", "context": {"namedtuple": ["elsewhere.Gone", ["a"]]}, "children": [None]}
    with pytest.raises(SerializationError, match="elsewhere.Gone"):
        json_to_spec(j)


def test_spec_json_round_trip_of_builtin_containers():
    tree = ({"a": [1, (2, 3)], "b": collections.OrderedDict(c=4)}, [None, 5])
    spec = pytree.tree_flatten(tree)[1]
    assert json_to_spec(json.loads(json.dumps(spec_to_json(spec)))) == spec


def test_context_holding_an_object_is_refused_at_save():
    class Opaque:
        pass

    class Box:
        def __init__(self, t):
            self.t, self.obj = t, Opaque()

    def flatten(b):
        return [b.t], b.obj

    pytree.register_pytree_node(Box, flatten, lambda v, c: Box(v[0]), serialized_type_name="test.Box")
    try:
        spec = pytree.tree_flatten(Box(torch.zeros(1)))[1]
        with pytest.raises(SerializationError, match="test.Box.*context holds"):
            spec_to_json(spec)
    finally:
        pytree._deregister_pytree_node(Box)


def test_symbolic_sizes_in_node_values():
    built_model = torch.nn.Linear(4, 2)
    x = torch.randn(5, 4)
    tep = torch.export.export(built_model, (x,), dynamic_shapes=({0: torch.export.Dim("n", min=2, max=50)},))
    ep = graphcap.from_torch(tep)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    ep2 = graphcap.load(io.BytesIO(buf.getvalue()))
    user_input = ep2.graph_signature.user_inputs[0]
    val = next(n for n in ep2.graph.nodes if n.name == user_input).meta["val"]
    assert isinstance(val.shape[0], torch.SymInt) and str(val.shape[0]) in {str(k) for k in ep2.range_constraints}
    assert ep2.range_constraints == ep.range_constraints
    torch.testing.assert_close(ep2.module()(torch.randn(7, 4)).shape, torch.Size([7, 2]))
    with pytest.raises(graphcap.RuntimeInputError, match=">= 2"):
        ep2.module()(torch.randn(1, 4))
