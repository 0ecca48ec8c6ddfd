"""strict=True keeps an int input its spec marks dynamic symbolic, as non-strict does.

dynamo (strict mode's front end) bakes Python ints into its graph. A program whose spec
promises any value of the int but whose graph holds the example's value computes the wrong
number for every other value; graphcap hands such an int to dynamo marked, so the graph
computes with the input, and dynamo's branches on it become guards of graphcap's spec check.
"""
from __future__ import annotations

import pytest
import torch
import torch.export as te

import graphcap
from graphcap import Dim


class ScaleShift(torch.nn.Module):
    def forward(self, t, n):
        return t * n + n


class IsIn(torch.nn.Module):
    def forward(self, x):
        return torch.isin(x, torch.tensor(0))


class Branch(torch.nn.Module):
    def forward(self, t, n):
        if n > 3:
            return t * n
        return t - n


@pytest.mark.parametrize("example", [0, 1, 5])
@pytest.mark.parametrize("hint", [Dim.DYNAMIC, Dim.AUTO, te.Dim.AUTO, Dim("n")])
def test_a_dynamic_int_is_computed_with_not_baked_in(example, hint):
    ep = graphcap.export(ScaleShift(), (torch.ones(2), example), dynamic_shapes=(None, hint), strict=True)
    n_placeholder = [n for n in ep.graph.nodes if n.op == "placeholder"][1]
    assert isinstance(n_placeholder.meta["val"], torch.SymInt)
    assert len(ep.range_constraints) == 1
    for n in (0, 1, 2, 7, example):
        torch.testing.assert_close(ep.module()(torch.ones(2), n), torch.ones(2) * n + n)


def test_a_size_one_example_int_does_not_decide_the_result():
    # torch.isin(0, 0) is True; with the example's 0 baked in every value would answer True
    ep = graphcap.export(IsIn(), (0,), dynamic_shapes=(Dim.DYNAMIC,), strict=True)
    m = ep.module()
    assert bool(m(0)) and not bool(m(1)) and not bool(m(5))


@pytest.mark.parametrize("strict", [False, True])
def test_a_branch_on_a_dynamic_int_narrows_its_range_in_both_modes(strict):
    ep = graphcap.export(Branch(), (torch.ones(2), 5), dynamic_shapes=(None, Dim.AUTO), strict=strict)
    (bounds,) = ep.range_constraints.values()
    assert int(bounds.lower) == 4
    torch.testing.assert_close(ep.module()(torch.ones(2), 9), torch.ones(2) * 9)
    with pytest.raises(graphcap.RuntimeInputError, match=">= 4, but got 2"):
        ep.module()(torch.ones(2), 2)


@pytest.mark.parametrize("strict", [False, True])
def test_a_branch_outside_a_named_dims_range_is_a_constraint_violation(strict):
    with pytest.raises(graphcap.ConstraintViolationError, match="4 <= n <= 10"):
        graphcap.export(Branch(), (torch.ones(2), 5), dynamic_shapes=(None, Dim("n", min=0, max=10)),
                        strict=strict)


def test_unmarked_ints_stay_constants_in_strict_mode():
    ep = graphcap.export(ScaleShift(), (torch.ones(2), 5), strict=True)
    assert ep.range_constraints == {}
    with pytest.raises(graphcap.RuntimeInputError, match="equal to 5, but got 6"):
        ep.module()(torch.ones(2), 6)
