"""A static dimension's error suggests the spec entry for that input and that dimension (issue 24, defect 10).

Before: every static-dim refusal suggested ``{0: Dim('batch')}``, whatever
the dimension. Relations between dims name the Dim, not the symbol.
"""
from __future__ import annotations

import re

import pytest
import torch

import graphcap
from graphcap import Dim


class SumLast(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(2) + y.sum()


def test_static_dim_fix_names_the_dim_and_keeps_the_declared_ones():
    ep = graphcap.export(SumLast(), (torch.ones(2, 3, 4), torch.ones(5)),
                         dynamic_shapes={"x": {0: Dim("batch")}, "y": None})
    with pytest.raises(graphcap.RuntimeInputError) as info:
        ep.module()(torch.ones(2, 3, 6), torch.ones(5))
    fix = info.value.fix
    assert "{'x': {0: batch, 2: Dim('x_dim2')}}" in fix, fix
    assert "{0: Dim('batch')}" not in fix


def test_static_dim_fix_of_a_static_program():
    ep = graphcap.export(SumLast(), (torch.ones(2, 3, 4), torch.ones(5)))
    with pytest.raises(graphcap.RuntimeInputError) as info:
        ep.module()(torch.ones(2, 3, 4), torch.ones(7))
    assert "dynamic_shapes={'y': {0: Dim('y_dim0')}}" in info.value.fix


def test_pasted_fix_exports_a_program_that_accepts_the_size():
    ep = graphcap.export(SumLast(), (torch.ones(2, 3, 4), torch.ones(5)),
                         dynamic_shapes={"x": {0: Dim("batch")}, "y": None})
    with pytest.raises(graphcap.RuntimeInputError) as info:
        ep.module()(torch.ones(2, 3, 6), torch.ones(5))
    spec_text = re.search(r"dynamic_shapes=(\{.*?\}\})", info.value.fix).group(1)
    spec = eval(spec_text, {"Dim": Dim, "batch": Dim("batch")})  # what the user pastes
    spec["y"] = None
    fixed = graphcap.export(SumLast(), (torch.ones(2, 3, 4), torch.ones(5)), dynamic_shapes=spec)
    torch.testing.assert_close(fixed.module()(torch.ones(2, 3, 6), torch.ones(5)),
                               SumLast()(torch.ones(2, 3, 6), torch.ones(5)))


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def test_shared_dim_mismatch_names_the_dim():
    ep = graphcap.export(Add(), (torch.ones(2, 3), torch.ones(2, 3)),
                         dynamic_shapes={"x": {0: Dim("batch")}, "y": {0: Dim("batch")}})
    with pytest.raises(graphcap.RuntimeInputError) as info:
        ep.module()(torch.ones(2, 3), torch.ones(4, 3))
    assert "Dim batch" in info.value.fix and not re.search(r"\bs\d+\b", info.value.fix)
