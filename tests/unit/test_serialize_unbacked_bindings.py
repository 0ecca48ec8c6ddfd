"""Data-dependent sizes keep their bindings through save/load (format 4).

``meta["unbacked_bindings"]`` says, for each unbacked symbol a node introduces, where in the
node's value the size is read (``u0 -> size()[0] // 10``); compilers of a program read it. A
loaded program carries it again, over the loaded symbols, and a trace of the loaded program
(``run_decompositions``) makes new unbacked symbols with names the program does not use yet.
"""
from __future__ import annotations

import io
import json

import pytest
import torch

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive


@torch.library.custom_op("gc_bindings_test::tens", mutates_args={})
def tens(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[: int(b.item()) * 10].clone()


@tens.register_fake
def _(a, b):
    size = torch.library.get_ctx().new_dynamic_size(min=0, max=len(a) // 10) * 10
    return a.new_empty(size, a.shape[1])


class DataSizes(torch.nn.Module):
    def forward(self, a, b, flags):
        n = flags.sum().item()
        torch._check(n >= 0)
        torch._check(n <= a.shape[0])
        return torch.ops.gc_bindings_test.tens(a, b), a.nonzero(), a[:n]


def _inputs():
    return torch.randn(40, 4), torch.tensor(2), torch.tensor([1, 0, 1, 1])


def _bindings(ep):
    return {n.name: {str(s): [str(k) for k in p] for s, p in n.meta["unbacked_bindings"].items()}
            for n in ep.graph.nodes if n.meta.get("unbacked_bindings")}


def _round_trip(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return buf.getvalue(), graphcap.load(io.BytesIO(buf.getvalue()))


def test_bindings_and_their_paths_round_trip():
    ep = graphcap.export(DataSizes(), _inputs())
    _, loaded = _round_trip(ep)
    assert _bindings(loaded) == _bindings(ep)
    (tens_path,) = _bindings(loaded)["tens"].values()
    assert tens_path == [".size()", "[0]", ".__floordiv__(10)"]  # the size, divided by what the fake kernel multiplied
    symbols = {str(s) for n in loaded.graph.nodes for s in (n.meta.get("unbacked_bindings") or {})}
    vals = {str(s) for n in loaded.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
            for s in n.meta["val"].shape if isinstance(s, torch.SymInt) for s in s.node.expr.free_symbols}
    assert symbols <= vals | {str(s) for s in loaded.range_constraints}
    inputs = _inputs()
    for got, want in zip(loaded.module()(*inputs), DataSizes()(*inputs)):
        torch.testing.assert_close(got, want)


def test_a_trace_of_the_loaded_program_makes_fresh_unbacked_names():
    ep = graphcap.export(DataSizes(), _inputs())
    _, loaded = _round_trip(ep)
    env = next(n.meta["val"] for n in loaded.graph.nodes if n.op == "placeholder").fake_mode.shape_env
    used = {int(str(s)[1:]) for n in loaded.graph.nodes for s in (n.meta.get("unbacked_bindings") or {})}
    assert env.unbacked_symint_counter > max(used)
    assert str(loaded.run_decompositions().graph) == str(ep.run_decompositions().graph)


@pytest.mark.parametrize("key", [{"method": "__class__"}, {"divide": 0}, {"index": -1}, {"exec": "x"}])
def test_a_crafted_binding_path_is_refused(key):
    ep = graphcap.export(DataSizes(), _inputs())
    data, _ = _round_trip(ep)
    entries = read_entries(io.BytesIO(data))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    node = next(n for n in program["graph_module"]["nodes"] if n["name"] == "tens")
    node["meta"]["unbacked_bindings"][0][1][0] = key
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError):
        graphcap.load(io.BytesIO(out.getvalue()))
