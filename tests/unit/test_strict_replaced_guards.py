"""strict=True keeps dynamo's guard on a size dynamo found equal to another one.

dynamo replaces a size by another it proved equal (``y.shape[1]`` by ``x.shape[2]`` once a
matmul ties them); a guard it recorded before on the replaced size (``y.shape[1] % 3 == 0``)
must reach graphcap's spec check over the size that stands for it, or the program takes one
branch for every size and gives the wrong result for the others.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim


class MatmulWhenDivisible(torch.nn.Module):
    def forward(self, x, y):
        if y.shape[1] % 3 == 0:
            return torch.matmul(x, y)
        return x.sum() + y.sum()


INPUTS = (torch.randn(10, 2, 3), torch.randn(10, 3, 4))


@pytest.mark.parametrize("strict", [False, True])
def test_a_guard_on_a_replaced_size_is_a_constraint_violation(strict):
    k = Dim("K")
    with pytest.raises(graphcap.ConstraintViolationError, match=r"Mod\(K, 3\)"):
        graphcap.export(MatmulWhenDivisible(), INPUTS, dynamic_shapes={"x": (None, None, k), "y": (None, k, None)},
                        strict=strict)


@pytest.mark.parametrize("strict", [False, True])
def test_with_auto_the_program_refuses_sizes_that_take_the_other_branch(strict):
    auto = Dim.AUTO
    ep = graphcap.export(MatmulWhenDivisible(), INPUTS, dynamic_shapes={"x": (None, None, auto),
                                                                        "y": (None, auto, None)}, strict=strict)
    x, y = torch.randn(10, 2, 6), torch.randn(10, 6, 4)
    torch.testing.assert_close(ep.module()(x, y), MatmulWhenDivisible()(x, y))
    with pytest.raises(RuntimeError):  # eager would take the other branch: refused, not miscomputed
        ep.module()(torch.randn(10, 2, 4), torch.randn(10, 4, 4))
