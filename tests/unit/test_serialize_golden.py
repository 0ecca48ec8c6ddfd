"""Golden files: every released format version keeps loading and running.

``tests/golden/format_v<N>.pt2`` was written by the release that introduced
format version N (``tests/golden/make_golden.py``); ``format_v<N>_io.safetensors``
holds inputs and the eager outputs. A change that breaks these breaks users'
files: add an upgrader in ``graphcap.serialize`` instead.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import graphcap
from graphcap.errors import RuntimeInputError
from graphcap.serialize import schema

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FILES = sorted(GOLDEN.glob("format_v*.pt2"))


def test_every_released_version_has_a_golden_file():
    versions = {int(re.fullmatch(r"format_v(\d+)\.pt2", f.name).group(1)) for f in FILES}
    assert versions == set(schema.CHANGELOG)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_golden_file_loads_and_runs(path):
    ep = graphcap.load(path)
    io = load_file(path.with_name(path.stem + "_io.safetensors"))
    assert [str(k) for k in ep.range_constraints] and ep.graph_signature.input_specs
    assert any(isinstance(getattr(ep.graph_module, n.target, None), torch.fx.GraphModule)
               for n in ep.graph.nodes if n.op == "get_attr"), "the golden program has a cond subgraph"
    module = ep.module()
    for case in ("case0", "case1"):
        with torch.no_grad():
            out = module(io[f"{case}.images"], [io[f"{case}.extras0"], io[f"{case}.extras1"]],
                         gain=io[f"{case}.gain"])
        torch.testing.assert_close(out["out"], io[f"{case}.out"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out["aux"][0], io[f"{case}.aux0"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out["aux"][1], io[f"{case}.aux1"], rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeInputError):
        module(io["case0.images"][:1], [io["case0.extras0"][:1], io["case0.extras1"]], gain=io["case0.gain"])


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_golden_file_resaves_identically(path, tmp_path):
    ep = graphcap.load(path)
    graphcap.save(ep, tmp_path / "again.pt2")
    again = graphcap.load(tmp_path / "again.pt2")
    assert str(again) == str(ep)
