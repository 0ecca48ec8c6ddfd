"""Errors say what, where (user file:line, input path) and how to fix."""
from __future__ import annotations

import pytest
import torch

import graphcap


def test_user_exception_during_trace_names_user_line():
    def f(x):
        raise ValueError("boom in user code")

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(f, (torch.ones(1),))
    text = str(info.value)
    assert "boom in user code" in text
    assert "test_errors.py" in text and "Where:" in text and "How to fix:" in text


def test_data_dependent_branch_is_explained():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    with pytest.raises(graphcap.GraphcapError) as info:
        graphcap.export(f, (torch.ones(2),))
    text = str(info.value)
    assert "test_errors.py" in text
    assert "torch.cond" in text or "torch._check" in text


def test_not_callable():
    with pytest.raises(graphcap.ExportInputError, match="nn.Module"):
        graphcap.export(42, (torch.ones(1),))


def test_strict_is_available():
    # strict mode's own errors are tested in test_strict_errors.py
    ep = graphcap.export(torch.nn.ReLU(), (torch.ones(1),), strict=True)
    assert torch.equal(ep.module()(-torch.ones(1)), torch.zeros(1))


def test_program_is_not_callable():
    ep = graphcap.export(torch.nn.ReLU(), (torch.ones(1),))
    with pytest.raises(RuntimeError, match=r"ep.module\(\)"):
        ep(torch.ones(1))


def test_an_exact_type_check_on_a_tensor_is_explained():
    class ChecksType(torch.nn.Module):
        def forward(self, x):
            assert type(x) is torch.Tensor
            return x + 1

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(ChecksType(), (torch.ones(2),))
    text = str(info.value)
    assert "assert type(x) is torch.Tensor" in text  # the user's line
    assert "isinstance(x, torch.Tensor)" in text  # the fix
