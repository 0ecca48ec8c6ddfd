"""A program's symbolic sizes must not go below 0 anywhere its ranges allow.

graphcap keeps sizes 0 and 1 symbolic; torch's shape formulas answer some questions for the
general size (as if a size were 2 or more), so a slice can record a size that is -1 at size 0
(``x[1:1 + n]`` records ``Min(m, n + 1) - 1``). ``module()`` runs real kernels and is right there,
but a consumer sizing buffers from the program's sizes would be given -1. Such sizes are cut out of
a hint's range and refused for a declared Dim, with the fix; sizes right at 0 and 1 are kept."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError


class SliceByAnotherSize(torch.nn.Module):
    def forward(self, x, y):
        return x[1:1 + y.shape[0]] * 2


class DropLast(torch.nn.Module):
    def forward(self, x):
        return x[:-1] + 1


class Differences(torch.nn.Module):
    def forward(self, x):
        return x[1:] - x[:-1]


class RightAtZero(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x[:3], x[-2:], x[2:]]) * 2


def _sizes(ep):
    return {n.name: tuple(n.meta["val"].shape) for n in ep.graph.nodes
            if isinstance(n.meta.get("val"), torch.Tensor)}


@pytest.mark.parametrize("strict", [False, True])
def test_a_declared_dim_is_refused_with_the_min_that_keeps_sizes_non_negative(strict):
    model, args = SliceByAnotherSize(), (torch.randn(6, 3), torch.randn(3))
    spec = {"x": {0: Dim("m", min=0, max=10)}, "y": {0: Dim("n", min=0, max=10)}}
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(model, args, dynamic_shapes=spec, strict=strict)
    text = str(info.value)
    assert "Constraints violated (m)!" in text
    assert "Min(m, n + 1) - 1, which is -1 at m = 0" in text
    assert "return x[1:1 + y.shape[0]] * 2" in text  # the user's line
    assert "m = Dim('m', min=1, max=10)" in text
    # the suggested fix, applied by the refine helper, exports; its program refuses m = 0 first
    fixed = graphcap.refine_dynamic_shapes_from_suggested_fixes(text, spec)
    ep = graphcap.export(model, args, dynamic_shapes=fixed, strict=strict)
    for m, n in [(1, 0), (1, 3), (2, 5), (10, 10)]:
        x, y = torch.randn(m, 3), torch.randn(n)
        torch.testing.assert_close(ep.module()(x, y), model(x, y))
    with pytest.raises(graphcap.errors.InputGuardError, match=r"to be >= 1, but got 0"):
        ep.module()(torch.randn(0, 3), torch.randn(3))


@pytest.mark.parametrize("model", [DropLast(), Differences()], ids=["drop_last", "differences"])
@pytest.mark.parametrize("hint", [Dim.AUTO, Dim.DYNAMIC])
def test_a_hint_loses_the_sizes_where_the_program_would_go_negative(model, hint):
    ep = graphcap.export(model, (torch.randn(6, 3),), dynamic_shapes={"x": {0: hint}})
    (vr,) = ep.range_constraints.values()
    assert int(vr.lower) == 1  # 0 is cut; 1 stays: x[:-1] is empty there, as in eager
    for m in (1, 2, 9):
        x = torch.randn(m, 3)
        torch.testing.assert_close(ep.module()(x), model(x))
    with pytest.raises(graphcap.errors.InputGuardError):
        ep.module()(torch.randn(0, 3))
    # every size the program records is 0 or more at the range's lower end
    (sym,) = ep.range_constraints
    sizes = {s[0].node.expr for s in _sizes(ep).values()}
    assert sizes == {sym, sym - 1}
    assert all(int(e.subs(sym, 1)) >= 0 for e in sizes)


@pytest.mark.parametrize("strict", [False, True])
def test_sizes_right_at_zero_and_one_keep_the_whole_range(strict):
    model = RightAtZero()
    ep = graphcap.export(model, (torch.randn(6, 3),), dynamic_shapes={"x": {0: Dim("m", min=0, max=10)}},
                         strict=strict)
    (vr,) = ep.range_constraints.values()
    assert (int(vr.lower), int(vr.upper)) == (0, 10)
    for m in (0, 1, 2, 3, 10):
        x = torch.randn(m, 3)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_a_size_negative_from_two_up_is_not_taken_for_a_small_size_answer():
    """x[:, :n - k] is negative wherever n < k, not only at 0 or 1: no Dim's 0/1 is to blame,
    so nothing is cut (what eager does there is eager's slice clamping, and the program's)."""
    import sympy

    from graphcap.dynamic.negative_sizes import _small_sizes_below_zero
    from graphcap.torch_private.symbolic import ValueRanges
    n, k = sympy.symbols("n k", integer=True, positive=True)
    ranges = {n: ValueRanges(0, 10), k: ValueRanges(0, 10)}
    roots = {n: object(), k: object()}
    assert _small_sizes_below_zero(n - k, ranges, roots) == []
    assert _small_sizes_below_zero(sympy.Min(n, k + 1) - 1, ranges, roots) == [(n, 0)]
    assert _small_sizes_below_zero(sympy.Max(0, n - 2), ranges, roots) == []
