"""Hints (Dim.AUTO / Dim.DYNAMIC / Dim.STATIC with bounds) and named Dims the program equates:
accepted in either operand order, bounds kept when dims unify, examples outside the bounds
refused at export (torch's UserError)."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.exc import UserError

import graphcap
from graphcap import Dim


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _range(ep):
    (vr,) = set(ep.range_constraints.values())
    return int(vr.lower), int(vr.upper)


@pytest.mark.parametrize("hint", [Dim.AUTO, Dim.DYNAMIC, Dim.AUTO(max=20), Dim.DYNAMIC(min=1)])
@pytest.mark.parametrize("named_first", [True, False])
def test_named_dim_equated_with_a_hint_in_either_order(hint, named_first):
    b = Dim("b", min=2, max=10)
    spec = ({0: b}, {0: hint}) if named_first else ({0: hint}, {0: b})
    ep = graphcap.export(Add(), (torch.randn(4), torch.randn(4)), dynamic_shapes=spec)
    assert _range(ep) == (2, 10)
    for n in (2, 10):
        x = torch.randn(n)
        torch.testing.assert_close(ep.module()(x, x), x + x)
    for n in (1, 11):
        with pytest.raises(graphcap.RuntimeInputError):
            ep.module()(torch.randn(n), torch.randn(n))


def test_named_dim_narrowed_by_the_bounds_of_the_hint_it_equals():
    b = Dim("b", min=2, max=10)
    ep = graphcap.export(Add(), (torch.randn(4), torch.randn(4)), dynamic_shapes=({0: b}, {0: Dim.AUTO(max=6)}))
    assert _range(ep) == (2, 6)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(7), torch.randn(7))


@pytest.mark.parametrize("kind", ["AUTO", "DYNAMIC"])
def test_bounds_of_unified_hints_are_met_not_dropped(kind):
    h = getattr(Dim, kind)
    ep = graphcap.export(Add(), (torch.randn(4), torch.randn(4)),
                         dynamic_shapes=({0: h(min=3, max=6)}, {0: h(min=2, max=5)}))
    assert _range(ep) == (3, 5)
    for n in (2, 6):  # each is allowed by one hint and excluded by the other
        with pytest.raises(graphcap.RuntimeInputError):
            ep.module()(torch.randn(n), torch.randn(n))
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x, x), x + x)


def test_three_unified_hints_keep_every_bound():
    class Add3(torch.nn.Module):
        def forward(self, x, y, z):
            return x + y + z

    args = (torch.randn(5), torch.randn(5), torch.randn(5))
    ep = graphcap.export(Add3(), args, dynamic_shapes=({0: Dim.AUTO(min=2)}, {0: Dim.AUTO(max=9)},
                                                       {0: Dim.AUTO(min=4, max=12)}))
    assert _range(ep) == (4, 9)


@pytest.mark.parametrize("spec, size", [
    (Dim.DYNAMIC(max=5), 8),
    (Dim.AUTO(min=6), 4),
    (Dim.AUTO(min=2, max=3), 1),
])
def test_example_outside_the_hint_bounds_is_refused_at_export(spec, size):
    with pytest.raises(UserError) as info:
        graphcap.export(Twice(), (torch.randn(size),), dynamic_shapes=({0: spec},))
    assert isinstance(info.value, graphcap.ExportInputError)
    text = str(info.value)
    assert f"size {size}" in text and "inputs['x'].shape[0]" in text and "would refuse" in text


@pytest.mark.parametrize("spec, size, bounds", [(Dim.STATIC(min=6, max=8), 4, "[6, 8]"),
                                                 (Dim.STATIC(max=2), 3, "[None, 2]")])
def test_static_hint_whose_bounds_exclude_the_example_is_refused(spec, size, bounds):
    with pytest.raises(UserError) as info:
        graphcap.export(Twice(), (torch.randn(size),), dynamic_shapes=({0: spec},))
    assert isinstance(info.value, graphcap.ExportInputError)
    assert f"{bounds}, conflicting with the inferred min/max range of [{size}, {size}]" in str(info.value)


def test_trace_conflict_and_example_outside_are_both_listed():
    class Small(torch.nn.Module):
        def forward(self, x):
            assert x.shape[0] <= 32
            return x + 2

    with pytest.raises(UserError) as info:
        graphcap.export(Small(), (torch.randn(16),), dynamic_shapes=({0: Dim.DYNAMIC(min=33)},))
    text = str(info.value)
    assert "conflicting with the inferred min/max range of [0, 32]" in text
    assert "example input has size 16" in text


def test_static_hint_with_bounds_admitting_the_example_stays_static():
    ep = graphcap.export(Twice(), (torch.randn(7),), dynamic_shapes=({0: Dim.STATIC(min=6, max=8)},))
    assert not ep.range_constraints
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(6))


def test_int_input_outside_its_hint_bounds_is_refused():
    class Scale(torch.nn.Module):
        def forward(self, x, n):
            return x * n

    with pytest.raises(UserError):
        graphcap.export(Scale(), (torch.randn(3), 9), dynamic_shapes=(None, Dim.DYNAMIC(max=5)))
