"""A size the program holds fixed: module()'s advice is true whichever way the size got fixed.

A dim can be static in a program because the spec left it static, or because the spec marked it
(``Dim.AUTO``, or any Dim under ``draft_export``) and the model's code fixed the size while
tracing. The advice names both, and following it (a named Dim) either gives a program that takes
other sizes or an export error naming the line that fixes the size.
"""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import graphcap
from graphcap.errors import InputGuardError


class FixesItsBatch(torch.nn.Module):
    def forward(self, a):
        assert a.shape[0] == 3
        return a * a


class Plain(torch.nn.Module):
    def forward(self, a):
        return a * 2


def _advice(ep, bad) -> str:
    with pytest.raises(InputGuardError) as info:
        ep.module()(bad)
    return str(info.value)


@pytest.mark.parametrize("how", ["auto", "draft"])
def test_advice_for_a_size_the_code_fixed_names_that_cause(how):
    x = torch.ones(3, 3)
    if how == "auto":
        ep = graphcap.export(FixesItsBatch(), (x,), dynamic_shapes={"a": {0: Dim.AUTO}})
    else:
        ep = graphcap.draft_export(FixesItsBatch(), (x,), dynamic_shapes={"a": {0: Dim("a0")}})
    text = _advice(ep, torch.ones(4, 3))
    assert "*args[0].shape[0]" in text and "got 4" in text
    assert "fixed the size while tracing" in text
    assert "dynamic_shapes={'a': {0: Dim('a_dim0')}}" in text
    # following the advice: the export stops at the line that fixes the size
    with pytest.raises(Exception) as info:
        graphcap.export(FixesItsBatch(), (x,), dynamic_shapes={"a": {0: Dim("a_dim0")}})
    assert "assert a.shape[0] == 3" in str(info.value)


def test_advice_for_a_size_the_spec_left_static_gives_a_program_that_takes_other_sizes():
    x = torch.ones(3, 3)
    text = _advice(graphcap.export(Plain(), (x,)), torch.ones(4, 3))
    assert "dynamic_shapes left it static" in text
    ep = graphcap.export(Plain(), (x,), dynamic_shapes={"a": {0: Dim("a_dim0")}})
    torch.testing.assert_close(ep.module()(torch.ones(4, 3)), torch.full((4, 3), 2.0))
