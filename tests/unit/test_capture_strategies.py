"""graphcap.capture: the strategies tried in order, one record per attempt.

The tests hold whether or not ``strict=True`` is available: a model with a
graph break is one strict capture must refuse either way, and a branch on data
is one neither export mode can take.
"""
from __future__ import annotations

import inspect

import pytest
import torch
from test_draft_export import BranchOnItem  # only draft gets past its branch on .item()

import graphcap
from graphcap import CaptureError, CaptureResult


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


class Plain(torch.nn.Module):
    def forward(self, x):
        return x.sin() + 1


class GraphBreak(torch.nn.Module):
    """Runs as plain Python; dynamo's full-graph capture refuses the explicit graph break."""

    def forward(self, x):
        torch._dynamo.graph_break()
        return x * 3


class FailsEagerly(torch.nn.Module):
    def forward(self, x):
        raise ValueError("this model never runs")


def test_first_strategy_that_works_is_kept_and_the_rest_not_tried():
    result = graphcap.capture(Plain(), (torch.randn(4),))
    assert isinstance(result, CaptureResult)
    assert result.strategy == "non_strict"
    (attempt,) = result.attempts
    assert attempt.success and attempt.error_type is None and attempt.seconds > 0
    x = torch.randn(4)
    torch.testing.assert_close(result.program.module()(x), Plain()(x))


def test_only_draft_takes_a_branch_on_data():
    result = graphcap.capture(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    assert [a.strategy for a in result.attempts] == ["non_strict", "strict", "draft"]
    assert [a.success for a in result.attempts] == [False, False, True]
    non_strict = result.attempts[0]
    assert non_strict.error_type == "DataDependentError"
    assert f"line {_line_of(BranchOnItem.forward, 'if n > 2')}" in non_strict.error_where
    assert "data-dependent" in result.attempts[2].relaxed
    assert result.program.report.of_kind("data_dependent")
    x = torch.randn(8)
    torch.testing.assert_close(result.program.module()(x, torch.tensor(4)), BranchOnItem()(x, torch.tensor(4)))


def test_only_non_strict_takes_a_graph_break():
    result = graphcap.capture(GraphBreak(), (torch.randn(3),), strategies=("strict", "non_strict", "draft"))
    assert [a.strategy for a in result.attempts] == ["strict", "non_strict"]
    assert not result.attempts[0].success and result.attempts[0].error_type
    assert result.strategy == "non_strict"
    x = torch.randn(3)
    torch.testing.assert_close(result.program.module()(x), GraphBreak()(x))


def test_unpacks_as_program_and_attempts():
    program, attempts = graphcap.capture(Plain(), (torch.randn(2),), strategies=("non_strict",))
    assert isinstance(program, graphcap.ExportedProgram) and len(attempts) == 1


def test_when_every_strategy_fails_the_error_lists_each_attempt():
    with pytest.raises(CaptureError) as info:
        graphcap.capture(FailsEagerly(), (torch.randn(2),), strategies=("non_strict", "draft"))
    attempts = info.value.attempts
    assert [a.strategy for a in attempts] == ["non_strict", "draft"]
    assert not any(a.success for a in attempts)
    assert all("this model never runs" in a.error_message for a in attempts)
    assert f"line {_line_of(FailsEagerly.forward, 'raise ValueError')}" in attempts[0].error_where
    assert "1. non_strict" in str(info.value) and "2. draft" in str(info.value)


def test_unknown_strategy_is_refused():
    with pytest.raises(graphcap.ExportInputError, match="Unknown capture strategies"):
        graphcap.capture(Plain(), (torch.randn(2),), strategies=("fast",))


def test_record_prints_and_is_data(capsys):
    result = graphcap.capture(BranchOnItem(), (torch.randn(8), torch.tensor(5)), progress=False)
    assert capsys.readouterr().err == ""  # no progress line off a terminal
    text = str(result)
    assert text.startswith("capture of BranchOnItem: draft gave a verified program (3 attempt(s)")
    assert "1. non_strict failed" in text and "DataDependentError" in text and "3. draft      ok" in text
    data = result.as_data()
    assert data["strategy"] == "draft"
    assert [a["success"] for a in data["attempts"]] == [False, False, True]
    assert set(data["attempts"][0]) >= {"strategy", "success", "seconds", "error_type", "error_message",
                                        "error_where", "relaxed"}


class ThroughNumpy(torch.nn.Module):
    """NumPy on the tensor's values: non-strict cannot read a fake tensor's data, dynamo traces NumPy calls."""

    def forward(self, x):
        import numpy as np
        return torch.from_numpy(np.sin(x.numpy())) + 1


def test_a_model_only_strict_can_take_is_captured_by_strict():
    x = torch.randn(3, 4)
    result = graphcap.capture(ThroughNumpy(), (x,), strategies=("non_strict", "strict"))
    assert result.strategy == "strict"
    first, second = result.attempts
    assert first.strategy == "non_strict" and not first.success and first.error_type
    assert second.strategy == "strict" and second.success
    y = torch.randn(3, 4)
    torch.testing.assert_close(result.program.module()(y), ThroughNumpy()(y))
