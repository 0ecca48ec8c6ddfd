"""Guards decided over the declared range (floor division, modulo, Min/Max), not only by
simplification: accepted when true for every size in range, still refused when false for one."""
from __future__ import annotations

import pytest
import sympy
import torch

import graphcap
from graphcap import Dim
from graphcap.dynamic.range_decide import holds_over_ranges
from graphcap.torch_private.symbolic import ValueRanges, int_oo
from graphcap.torch_private.symbolic import functions as sym_fns

b = sympy.Symbol("b", integer=True, positive=True)
c = sympy.Symbol("c", integer=True, positive=True)


def _floordiv(x, y):
    return sym_fns.FloorDiv(x, y)


def _mod(x, y):
    return sym_fns.Mod(x, y)


@pytest.mark.parametrize("guard, lo, hi, expected", [
    (lambda: sympy.Eq(_floordiv(3 * b - 1, b), 2), 1, 16, True),      # chunk(cat([a, b]), 2)
    (lambda: sympy.Eq(_floordiv(3 * b - 1, b), 2), 1, 100_000, True),  # too wide to list: split
    (lambda: sympy.Eq(_floordiv(3 * b - 1, b), 2), 1, int_oo, True),  # proved as 2*b <= 3*b - 1 < 3*b
    (lambda: sympy.Eq(_floordiv(b * b, 3), 1), 1, int_oo, False),  # unbounded and false
    (lambda: sympy.Eq(_floordiv(4 * b, 3), b), 1, 3, False),          # false at b = 3
    (lambda: sympy.Eq(_mod(2 * b + 2, 2), 0), 1, 64, True),
    (lambda: sympy.Eq(_mod(b, 2), 0), 2, 64, False),                   # odd sizes break it
    (lambda: sympy.Eq(sympy.Min(b, 8), b), 1, 8, True),
    (lambda: sympy.Eq(sympy.Min(b, 8), b), 1, 9, False),               # only the last size breaks it
    (lambda: sympy.Ne(b, 5), 1, 16, False),
])
def test_guard_decided_over_one_range(guard, lo, hi, expected):
    assert holds_over_ranges(guard(), {b: ValueRanges(lo, hi)}) is expected


def test_guard_over_two_ranges_found_false_at_one_corner():
    g = sympy.Eq(_floordiv(b + c, c), 1 + _floordiv(b, c))
    assert holds_over_ranges(g, {b: ValueRanges(1, 20), c: ValueRanges(1, 20)})
    g2 = sympy.Le(_floordiv(b, c), 3)
    assert not holds_over_ranges(g2, {b: ValueRanges(1, 20), c: ValueRanges(1, 20)})


class ChunkOfCat(torch.nn.Module):
    def forward(self, a, b):
        x, y = torch.chunk(torch.cat([a, b]), 2)
        return x * 2 + y


def test_chunk_of_cat_exports_for_every_batch_and_matches_eager():
    batch = Dim("batch", min=1, max=16)
    m = ChunkOfCat()
    ep = graphcap.export(m, (torch.randn(3, 4), torch.randn(3, 4)), dynamic_shapes=({0: batch}, {0: batch}))
    (vr,) = ep.range_constraints.values()
    assert (int(vr.lower), int(vr.upper)) == (1, 16)
    for n in (1, 2, 7, 16):
        a, bb = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(ep.module()(a, bb), m(a, bb))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(17, 4), torch.randn(17, 4))


def test_guard_false_for_some_size_in_range_still_refused():
    class EvenOnly(torch.nn.Module):
        def forward(self, x):
            # a reshape into pairs: needs an even size
            return x.reshape(-1, 2).sum(1)

    with pytest.raises(graphcap.ConstraintViolationError):
        graphcap.export(EvenOnly(), (torch.randn(8),), dynamic_shapes=({0: Dim("n", min=2, max=16)},))


def test_floor_division_branch_true_over_the_range_is_accepted():
    class Halves(torch.nn.Module):
        def forward(self, x):
            n = x.shape[0]
            if (2 * n + 1) // 2 == n:  # true for every n >= 0: not a specialization
                return x * 2
            return x

    ep = graphcap.export(Halves(), (torch.randn(5),), dynamic_shapes=({0: Dim("n", min=1, max=40)},))
    for n in (1, 40):
        x = torch.randn(n)
        torch.testing.assert_close(ep.module()(x), x * 2)


def test_floor_division_branch_false_at_the_top_of_the_range_is_refused():
    class Small(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] // 10 == 0:  # only sizes below 10
                return x * 2
            return x

    with pytest.raises(graphcap.ConstraintViolationError):
        graphcap.export(Small(), (torch.randn(5),), dynamic_shapes=({0: Dim("n", min=1, max=10)},))
