"""The size-0/1 check compares what eager and the program write into buffers, not only their outputs.

A branch that special-cases size 1 (``if b != 1``) is kept in the program's range only when the
general branch the program took does at 1 what eager does (graphcap.dynamic.size_one_checks).
"What it does" includes the state it leaves: a special case that only updates a buffer
differently returns the same outputs, and keeping size 1 would let the program's state drift
from eager's silently at every batch-1 call.
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError

BATCH = ({0: Dim("b", min=1, max=8)},)


class CountsSpecialAtOne(torch.nn.Module):
    """Same output at every size; the general branch counts the batch, the size-1 special case adds
    ``at_one`` (1: what the general branch adds there; 100: something else)."""

    def __init__(self, at_one: int, persistent: bool = True):
        super().__init__()
        self.at_one = at_one
        self.register_buffer("seen", torch.zeros(1), persistent=persistent)

    def forward(self, x):
        if x.shape[0] != 1:
            self.seen.add_(x.shape[0])
        else:
            self.seen.add_(self.at_one)
        return x * 2


class RunningMeanSpecialCase(torch.nn.Module):
    """A running mean whose size-1 update is skipped (a "too small to estimate" special case)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        if x.shape[0] != 1:
            self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x * 2  # the mean is read by another method (eval), not here


@pytest.mark.parametrize("make, buffer", [
    (lambda: CountsSpecialAtOne(100), "seen"), (RunningMeanSpecialCase, "mean"),
    (lambda: CountsSpecialAtOne(100, persistent=False), "seen")], ids=["counts", "running_mean", "non_persistent"])
def test_a_special_case_that_only_writes_state_otherwise_is_refused(make, buffer):
    model = make()
    before = {k: v.clone() for k, v in model.named_buffers()}
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=BATCH)
    text = str(info.value)
    assert f"writes buffer {buffer} differently from eager" in text
    assert "At b = 1" in text
    # the check ran eager and the program and put the model's state back
    for k, v in model.named_buffers():
        assert torch.equal(v, before[k])


def test_a_special_case_writing_what_the_general_branch_writes_keeps_size_one():
    model = CountsSpecialAtOne(1)
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(3, 4),), dynamic_shapes=BATCH)
    assert [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()] == [(1, 8)]
    assert torch.equal(model.seen, torch.zeros(1))
    program = ep.module()
    for batch in (1, 3, 1):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(program(x), model(x))
        torch.testing.assert_close(program.seen, model.seen)


def test_the_refused_spec_suggests_the_range_without_one():
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(CountsSpecialAtOne(100), (torch.randn(3, 4),), dynamic_shapes=BATCH)
    fixed = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(info.value), BATCH)
    ep = graphcap.export(CountsSpecialAtOne(100), (torch.randn(3, 4),), dynamic_shapes=fixed)
    assert [int(r.lower) for r in ep.range_constraints.values()] == [2]
    with pytest.raises(Exception, match="b|x"):
        ep.module()(torch.randn(1, 4))


class UpdatesWeightOtherwiseAtOne(torch.nn.Module):
    """A weight updated in place under no_grad (an EMA, a codebook): +100 at size 1 in eager."""

    def __init__(self, special: float = 100.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.special = special

    def forward(self, x):
        with torch.no_grad():
            if x.shape[0] != 1:
                self.w.add_(x.shape[0])
            else:
                self.w.add_(self.special)
        return x * 2


def test_a_special_case_writing_a_parameter_otherwise_is_refused_and_the_weight_kept():
    model = UpdatesWeightOtherwiseAtOne()
    with pytest.raises(ConstraintViolationError, match="writes parameter w differently from eager"):
        graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=BATCH)
    assert torch.equal(model.w.detach(), torch.zeros(4))  # the check put the weight back


def test_a_parameter_written_alike_keeps_size_one_and_export_leaves_the_weight():
    model = UpdatesWeightOtherwiseAtOne(special=1.0)
    ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=BATCH)
    assert [int(r.lower) for r in ep.range_constraints.values()] == [1]
    assert torch.equal(model.w.detach(), torch.zeros(4))
