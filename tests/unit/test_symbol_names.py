"""Symbols read as the user's Dim names wherever a user reads them (issue 24, item 3).

``dim_names(ep)`` maps a program's symbols to the spec's Dim names (or, where
the export recorded none, to the input dimension they are); errors quoting
torch's text and ``graphcap inspect`` use it. ``print(ep)`` keeps torch's
symbols, as torch.export prints them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.dynamic.symbol_names import dim_names, with_dim_names


class TwoDims(torch.nn.Module):
    def forward(self, x, mask):
        return x * mask.sum() + x.shape[1]


def _export():
    batch, seq = Dim("batch", min=2, max=64), Dim("seq", min=2, max=128)
    return graphcap.export(TwoDims(), (torch.randn(4, 6), torch.ones(4, 6)),
                           dynamic_shapes={"x": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}})


def test_dim_names_of_a_program():
    ep = _export()
    names = dim_names(ep)
    assert sorted(names.values()) == ["batch", "seq"]
    assert set(names) == set(ep.range_constraints)
    x_shape = next(n for n in ep.graph.nodes if n.name == "x").meta["val"].shape
    assert with_dim_names(x_shape[0].node.expr * 2 + 1, names) == "2*batch + 1"


def test_dim_names_survive_run_decompositions():
    ep = _export().run_decompositions()
    assert sorted(dim_names(ep).values()) == ["batch", "seq"]


def test_program_without_record_names_input_dimensions(tmp_path: Path):
    ep = _export()
    ep.export_dim_names = {}  # what a file that does not keep the record gives
    assert sorted(dim_names(ep).values()) == ["x.shape[0]", "x.shape[1]"]


def test_dim_names_survive_save_and_load(tmp_path: Path):
    path = tmp_path / "two_dims.pt2"
    graphcap.save(_export(), path)
    for mmap in (False, True):
        loaded = graphcap.load(path, mmap=mmap)
        assert sorted(dim_names(loaded).values()) == ["batch", "seq"]
        assert set(dim_names(loaded)) == set(loaded.range_constraints)


def test_auto_dims_are_named_by_their_input():
    ep = graphcap.export(TwoDims(), (torch.randn(4, 6), torch.ones(4, 6)),
                         dynamic_shapes={"x": {0: Dim.AUTO}, "mask": {0: Dim.AUTO}})
    assert sorted(dim_names(ep).values()) == ["mask.shape[0]", "x.shape[0]"]


def test_printed_program_keeps_torch_symbols():
    text = str(_export())
    assert re.search(r"\bs\d+\b", text) and "batch" not in text


class ReshapeBug(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], 2, 3)


def test_trace_error_quotes_dim_names_not_symbols():
    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(ReshapeBug(), (torch.ones(4, 6, 3),),
                        dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("seq")}})
    what = info.value.what
    # torch's text stays as torch wrote it (torch's own tests match its symbols); a line repeats it
    # in the user's Dim names
    assert re.search(r"shape '\[s\d+, 2, 3\]' is invalid", what)
    named = what.splitlines()[-1]
    assert named.startswith("In your Dim names: shape '[batch, 2, 3]' is invalid") and "seq" in named, what
    assert not re.search(r"\bs\d+\b", named)


def test_inspect_shows_dim_names(tmp_path: Path, capsys, monkeypatch):
    from graphcap.cli import main
    path = tmp_path / "p.pt2"
    graphcap.save(_export(), path)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    # loaded from a file: named by the input dimension unless the file keeps the Dim names
    assert ("batch" in out and "seq" in out) or ("x.shape[0]" in out and "x.shape[1]" in out), out
