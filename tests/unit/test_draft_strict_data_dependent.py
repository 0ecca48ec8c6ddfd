"""draft_export with ``strict=True`` gets past a branch on tensor data as non-strict does: dynamo
answers the question with the example's real value, the program asserts that answer at runtime
(data taking the other path is refused before a wrong number is computed), and the report names
the question and the user's line. torch.export.draft_export exports these programs too."""
from __future__ import annotations

import inspect

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import graphcap


class _ScaleAbove(torch.nn.Module):
    def forward(self, x, *, scale):
        n = scale.item()
        if n > 1:
            return x * n
        return x - n


class _TwoQuestions(torch.nn.Module):
    def forward(self, x, k):
        n = k.item()
        if n % 2 == 0:
            x = x + n
        if x.sum().item() < 100:
            return x * 2
        return x


def _line(cls, text):
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_strict_branch_on_item_is_reported_and_asserted():
    x = torch.randn(3)
    ep = graphcap.draft_export(_ScaleAbove(), (x,), {"scale": torch.tensor(3)}, strict=True)
    (f,) = ep._report.failures
    assert f.failure_type.name == "DATA_DEPENDENT_ERROR"
    assert f.data["user_stack"][-1]["line"] == _line(_ScaleAbove, "if n > 1")
    assert "torch._check(" in f.fix
    m = ep.module()
    for s in (2, 5):  # the example's path
        assert torch.allclose(m(x, scale=torch.tensor(s)), _ScaleAbove()(x, scale=torch.tensor(s)))
    for s in (1, 0, -4):  # the other path: refused, never x * s
        with pytest.raises(RuntimeError, match=f"line {_line(_ScaleAbove, 'if n > 1')}"):
            m(x, scale=torch.tensor(s))
    # torch's draft_export reports the same one problem
    theirs = torch.export.draft_export(_ScaleAbove(), (x,), {"scale": torch.tensor(3)}, strict=True)._report
    assert [t.failure_type.name for t in theirs.failures] == ["DATA_DEPENDENT_ERROR"]


def test_strict_two_questions_in_order_and_decomposed():
    x, k = torch.ones(4), torch.tensor(2)
    ep = graphcap.draft_export(_TwoQuestions(), (x, k), strict=True)
    lines = [f.data["user_stack"][-1]["line"] for f in ep._report.failures]
    assert lines == [_line(_TwoQuestions, "n % 2 == 0"), _line(_TwoQuestions, "< 100")]
    for program in (ep, ep.run_decompositions()):
        m = program.module()
        assert torch.equal(m(x * 3, torch.tensor(6)), _TwoQuestions()(x * 3, torch.tensor(6)))
        with pytest.raises(RuntimeError):
            m(x, torch.tensor(3))  # odd: the other path of the first question
        with pytest.raises(RuntimeError):
            m(x * 50, torch.tensor(2))  # the sum is not below 100


def test_strict_draft_without_questions_is_successful_and_leaves_torch_as_found():
    before = ShapeEnv._log_real_tensor_propagation
    ep = graphcap.draft_export(torch.nn.Linear(3, 2), (torch.randn(4, 3),), strict=True)
    assert ep._report.successful()
    assert ShapeEnv._log_real_tensor_propagation is before
    # export (not draft) still refuses the data-dependent branch in strict mode
    with pytest.raises(Exception, match="data-dependent|torch._check"):
        graphcap.export(_ScaleAbove(), (torch.randn(3),), {"scale": torch.tensor(3)}, strict=True)
