"""A user branch on ``size > 1`` / ``size >= 2`` narrows a Dim's range only by sizes 0/1: like
``Ne(b, 1)``, it is kept for those sizes when the general branch gives eager's result there
(checked on the program), and refused when the program would really differ."""
from __future__ import annotations

import pytest
import torch
from size_one_models import CountsBigBatches, DiffersAtOne, FlattenUnlessOne

import graphcap
from graphcap import Dim


class DoubleUnlessOne(torch.nn.Module):
    def forward(self, x):
        if x.size(0) >= 2:
            return x * 2
        return x + x


@pytest.mark.parametrize("model", [FlattenUnlessOne(), DoubleUnlessOne()])
def test_general_branch_valid_at_one_keeps_one(model):
    ep = graphcap.export(model, (torch.randn(3, 2, 2),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    ranges = sorted((int(v.lower), int(v.upper)) for v in ep.range_constraints.values())
    assert (1, 8) in ranges
    for n in (1, 2, 8):
        x = torch.randn(n, 2, 2)
        torch.testing.assert_close(ep.module()(x), model(x))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(9, 2, 2))


def test_cut_of_zero_and_one_checks_both_sizes():
    m = DoubleUnlessOne()
    ep = graphcap.export(m, (torch.randn(3, 2),), dynamic_shapes=({0: Dim("b", min=0, max=8)},))
    for n in (0, 1, 5):
        x = torch.randn(n, 2)
        torch.testing.assert_close(ep.module()(x), m(x))


@pytest.mark.parametrize("model", [DiffersAtOne(), CountsBigBatches()])
def test_branch_that_differs_at_one_is_refused(model):
    with pytest.raises(graphcap.ConstraintViolationError, match=r"b = 1 the general branch") as info:
        graphcap.export(model, (torch.randn(3, 2),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    assert "Dim('b', min=2, max=8)" in str(info.value)


def test_range_cut_above_one_is_still_refused():
    class SmallOnly(torch.nn.Module):
        def forward(self, x):
            if x.size(0) > 2:
                return x * 2
            return x * 2

    with pytest.raises(graphcap.ConstraintViolationError, match="3 <= b <= 8"):
        graphcap.export(SmallOnly(), (torch.randn(4, 2),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
