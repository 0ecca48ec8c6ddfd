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
