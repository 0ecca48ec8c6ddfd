"""save / load of deep programs do each repeated piece of work once, and write and read the same thing.

A deep model's program.json repeats a few symbolic expressions and layouts tens of thousands of
times. ``save`` writes each expression's text once (``_Writer._expr_text``), ``load`` works each
symbolic layout's storage extent out once (``SymbolTable._extents``), and the schema check
chooses a union's options once per kind of value and writes a JSON path only for a mismatch.
Each case compares against the same work done every time: the same bytes written, the same
values loaded, the same verdicts and error paths.
"""
from __future__ import annotations

import io
import json

import pytest
import torch

import graphcap
from graphcap.serialize import encode, schema, symbol_table
from graphcap.serialize.archive import read_entries
from graphcap.serialize.typed_json import Int, ListOf, MapOf, Record, SchemaMismatch, Str, Tagged, Union


class _Forgetful(dict):
    """A memo that keeps nothing: the work is done every time."""

    def __setitem__(self, key, value):
        pass


def _llama_program():
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, use_cache=False)
    torch.manual_seed(0)
    model = LlamaModel(cfg).eval()
    return graphcap.export(model, (torch.randint(0, 100, (1, 8)),),
                           dynamic_shapes=({1: graphcap.Dim("s", min=2, max=64)},))


@pytest.fixture(scope="module")
def program():
    return _llama_program()


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    graphcap.save(ep, buf, weights=False)
    return buf.getvalue()


def _program_json(data: bytes) -> bytes:
    return read_entries(io.BytesIO(data))[schema.PROGRAM_ENTRY]


def test_expression_texts_written_once_give_the_same_file(program, monkeypatch):
    remembered = _program_json(_saved(program))
    original_init = encode._Writer.__init__

    def forgetful_init(self, ep):
        original_init(self, ep)
        self._expr_text = _Forgetful()
    monkeypatch.setattr(encode._Writer, "__init__", forgetful_init)
    assert _program_json(_saved(program)) == remembered
    assert b"s" in remembered and len(json.loads(remembered)["symbols"]) >= 1


def _values(ep) -> list:
    out = []
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        for t in val if isinstance(val, (tuple, list)) else (val,):
            if isinstance(t, torch.Tensor):
                out.append((node.name, str(tuple(t.shape)), str(t.stride()), str(t.storage_offset()), str(t.dtype),
                            t.requires_grad, str(t.untyped_storage().nbytes())))
    return out


def test_layout_extents_worked_out_once_give_the_same_values(program, monkeypatch):
    data = _saved(program)
    once = graphcap.load(io.BytesIO(data), weights=False)
    original_init = symbol_table.SymbolTable.__init__

    def forgetful_init(self, table):
        original_init(self, table)
        self._extents = _Forgetful()
    monkeypatch.setattr(symbol_table.SymbolTable, "__init__", forgetful_init)
    every_time = graphcap.load(io.BytesIO(data), weights=False)
    assert _values(once) == _values(every_time)
    assert str(once.graph) == str(every_time.graph)
    assert sum("s" in v[1] for v in _values(once)) > 20  # symbolic layouts, repeated per layer
    # and both are the exported program's layouts
    assert [v[:6] for v in _values(once)] == [v[:6] for v in _values(program)]


def _union() -> Union:
    point = Record("point", {"x": Int, "y": Int})
    named = Record("named", {"name": Str}, {"x": Int})
    tagged = Tagged("boxed", {"box": Int, "list": ListOf(Int)})
    return Union("thing", Int, Str, point, named, tagged, MapOf(Str))


_VALUES = [3, "a", {"x": 1, "y": 2}, {"name": "n"}, {"name": "n", "x": 4}, {"box": 1}, {"list": [1, 2]},
           {"k": "v"}, {"x": "bad", "y": 2}, {"name": 3}, {"box": "no"}, {"list": [1, "no"]}, 2.5, None, [1],
           {"x": 1}, {"x": 1, "y": 2, "z": 3}, {"k": 1}, True]


def _verdict(union: Union, value) -> tuple:
    try:
        union.check(value, ("", "doc"))
        return ("fits",)
    except SchemaMismatch as e:
        return (e.path, e.expected, e.found)


def test_union_choices_made_once_per_kind_give_the_same_verdicts():
    cached = _union()
    for _ in range(2):  # the second pass reads the kinds the first one stored
        for value in _VALUES:
            assert _verdict(cached, value) == _verdict(_union(), value), value
    assert _verdict(cached, {"x": "bad", "y": 2}) == ("doc", cached.expected, "an object with the keys 'x', 'y'")
    # one option of that kind: its own, precise error, the path written out only now
    boxed = Union("boxed_or_int", Int, Tagged("boxed", {"box": Int, "list": ListOf(Int)}))
    for _ in range(2):
        assert _verdict(boxed, {"list": [1, "no"]}) == ("doc.list[1]", "an integer", "the string 'no'")
