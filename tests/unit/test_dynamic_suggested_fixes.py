"""Suggested fixes torch.export's own refine_dynamic_shapes_from_suggested_fixes can apply
(a multiple of a new root, a derived dim on the example's side of a slice), and
relations an operator needs that are asserted rather than refused."""
from __future__ import annotations

import pytest
import torch
from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes as torch_refine

import graphcap
from graphcap import Dim


def _refined(model, inputs, spec, refine):
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(model, inputs, dynamic_shapes=spec)
    new = refine(str(info.value), spec)
    return str(info.value), new, graphcap.export(model, inputs, dynamic_shapes=new)


class ReshapeBy3(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] >= 9:
            return x.reshape([-1, 3])
        return x.reshape([-1, 1])


@pytest.mark.parametrize("refine, dim", [(torch_refine, torch.export.Dim),
                                         (graphcap.refine_dynamic_shapes_from_suggested_fixes, Dim)])
def test_a_multiple_gets_a_new_root(refine, dim):
    msg, new, ep = _refined(ReshapeBy3(), (torch.randn(15),), ({0: dim("dx")},), refine)
    assert "_dx = Dim('_dx', min=3)" in msg and "dx = 3*_dx" in msg
    assert "satisfy the generated guard" in msg
    assert ep.module()(torch.ones(12)).shape == (4, 3)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.ones(13))


class OffBy4(torch.nn.Module):
    def forward(self, x, y):
        return x + y[4:]


def test_a_slice_ties_dims_on_the_example_side():
    D = torch.export.Dim
    spec = {"x": (D("dx0"), D("dx1")), "y": (D("dy0"), D("dy1"))}
    msg, new, ep = _refined(OffBy4(), (torch.randn(6, 4), torch.randn(10, 4)), spec, torch_refine)
    assert "dy0 = dx0 + 4" in msg and "dy1 = dx1" in msg
    assert new["y"][0].fn(5) == 9
    x, y = torch.randn(3, 2), torch.randn(7, 2)
    torch.testing.assert_close(ep.module()(x, y), OffBy4()(x, y))


def test_an_operator_relation_between_declared_dims_is_asserted():
    class MaskFill(torch.nn.Module):
        def forward(self, mask, value):
            mask = mask.clone()
            mask[:, :, :, :value.shape[-1]] = value
            return mask

    model = MaskFill()
    ep = graphcap.export(model, (torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 3)),
                         dynamic_shapes={"mask": {3: Dim("M")}, "value": {3: Dim("N")}})
    m, v = torch.randn(2, 2, 3, 6), torch.randn(2, 2, 3, 5)
    torch.testing.assert_close(ep.module()(m, v), model(m, v))
    with pytest.raises(graphcap.RuntimeInputError):  # refused before computing
        ep.module()(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 6))


def test_a_check_on_data_does_not_narrow_the_declared_range():
    class Take(torch.nn.Module):
        def forward(self, x, y):
            b = x.item()
            torch._check(b >= 0)
            torch._check(b < y.size(0))
            return y[:b]

    ep = graphcap.export(Take(), (torch.tensor(3), torch.randn(10)), dynamic_shapes={"x": None, "y": (Dim("moo"),)})
    (vr,) = [v for k, v in ep.range_constraints.items() if str(k).startswith("s")]
    assert int(vr.lower) == 0  # the declared range; the check stays an assert in the graph
    assert ep.module()(torch.tensor(2), torch.arange(5.0)).tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError):
        ep.module()(torch.tensor(7), torch.arange(5.0))


class ShiftedMultiple(torch.nn.Module):
    """dy = dx + 1 and dz = dx + 3 from the slices; (dx + 1) % 3 == 0 from the branch."""

    def forward(self, x, y, z):
        if x.shape[0] >= 5 and x.shape[0] <= 36 and y.shape[0] % 3 == 0:
            return x + y[1:] + z[3:]
        return x


@pytest.mark.parametrize("refine, dims", [(torch_refine, torch.export.dims),
                                          (graphcap.refine_dynamic_shapes_from_suggested_fixes, graphcap.dims)])
def test_relations_and_a_multiple_meet_in_one_new_root(refine, dims):
    dx, dy, dz = dims("dx", "dy", "dz")
    inputs = (torch.randn(11), torch.randn(12), torch.randn(14))
    msg, new, ep = _refined(ShiftedMultiple(), inputs, {"x": (dx,), "y": (dy,), "z": (dz,)}, refine)
    fixes = msg.split("Suggested fixes:\n")[1].splitlines()
    # one round: the new root first (its range keeps 5 <= dx <= 36), every dim expressed through it
    assert [f.strip() for f in fixes] == ["_dx = Dim('_dx', min=2, max=12)", "dx = 3*_dx - 1",
                                          "dy = 3*_dx", "dz = 3*_dx + 2"]
    assert "Constraints violated (dx, dy, dz)!" in msg
    assert "Eq(Mod(dx + 1, 3), 0)" in msg
    model = ShiftedMultiple()
    for n in (2, 5, 12):
        args = (torch.randn(3 * n - 1), torch.randn(3 * n), torch.randn(3 * n + 2))
        torch.testing.assert_close(ep.module()(*args), model(*args))
    for n in (1, 13):  # outside the root's range: refused before computing
        with pytest.raises(graphcap.RuntimeInputError):
            ep.module()(torch.randn(3 * n - 1), torch.randn(3 * n), torch.randn(3 * n + 2))
    with pytest.raises(graphcap.RuntimeInputError):  # the relation broken
        ep.module()(torch.randn(11), torch.randn(13), torch.randn(14))


def test_the_spec_written_from_the_new_root_exports():
    _dx = Dim("_dx", min=2, max=12)
    ep = graphcap.export(ShiftedMultiple(), (torch.randn(11), torch.randn(12), torch.randn(14)),
                         dynamic_shapes={"x": (3 * _dx - 1,), "y": (3 * _dx,), "z": (3 * _dx + 2,)})
    args = (torch.randn(20), torch.randn(21), torch.randn(23))
    torch.testing.assert_close(ep.module()(*args), ShiftedMultiple()(*args))


class OddTimesTwoPlusOne(torch.nn.Module):
    def forward(self, x):
        if (2 * x.shape[0] + 1) % 3 == 0:
            return x * 2
        return x


def test_a_scaled_residue_class_picks_the_examples_class():
    # (2*d + 1) % 3 == 0 holds exactly for d = 1 (mod 3): d = 3*_d - 2
    msg, new, ep = _refined(OddTimesTwoPlusOne(), (torch.randn(7),), ({0: Dim("d")},),
                            graphcap.refine_dynamic_shapes_from_suggested_fixes)
    assert "d = 3*_d - 2" in msg and "_d = Dim('_d', min=1)" in msg
    torch.testing.assert_close(ep.module()(torch.ones(10)), torch.full((10,), 2.0))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.ones(9))


class BatchBelow16AndKBy3(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] < 16 and y.shape[1] % 3 == 0:
            return torch.matmul(x, y)
        return x


def test_fixes_keep_their_order_with_a_new_root():
    batch, M, K, N = graphcap.dims("batch", "M", "K", "N")
    msg, new, ep = _refined(BatchBelow16AndKBy3(), (torch.randn(10, 2, 3), torch.randn(10, 3, 4)),
                            {"x": (batch, M, K), "y": (batch, K, N)},
                            graphcap.refine_dynamic_shapes_from_suggested_fixes)
    fixes = [f.strip() for f in msg.split("Suggested fixes:\n")[1].splitlines()]
    assert fixes == ["batch = Dim('batch', max=15)", "_K = Dim('_K')", "K = 3*_K"]
    x, y = torch.randn(4, 5, 6), torch.randn(4, 6, 2)
    torch.testing.assert_close(ep.module()(x, y), BatchBelow16AndKBy3()(x, y))
