"""Guards on a single dynamic dim that its traced range does not show (a slice then a
broadcast, a derived dim tied back to its root) must not be lost: they narrow the
range, become a suggested fix, or are asserted, and module() refuses what breaks them."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim


class SliceThenBroadcast(torch.nn.Module):
    def forward(self, x, z):
        return x[:3] * z


@pytest.mark.parametrize("hint", [Dim.AUTO, Dim.DYNAMIC])
def test_a_hint_dim_gets_the_bound_a_slice_needs(hint):
    model = SliceThenBroadcast()
    ep = graphcap.export(model, (torch.randn(4), torch.randn(3)), dynamic_shapes=({0: hint}, None))
    (vr,) = ep.range_constraints.values()
    assert int(vr.lower) == 3
    x = torch.randn(7)
    z = torch.randn(3)
    torch.testing.assert_close(ep.module()(x, z), model(x, z))
    with pytest.raises(AssertionError, match=r"Guard failed: x\.size\(\)\[0\] >= 3"):
        ep.module()(torch.randn(2), z)


def test_a_declared_dim_gets_a_suggested_bound():
    with pytest.raises(graphcap.ConstraintViolationError, match=r"dx = Dim\('dx', min=3\)"):
        graphcap.export(SliceThenBroadcast(), (torch.randn(4), torch.randn(3)),
                        dynamic_shapes=({0: Dim("dx")}, None))


def test_a_derived_dim_tied_to_its_root_is_a_specialization():
    class FlatAdd(torch.nn.Module):
        def forward(self, x, y):
            return x.reshape([-1]) + y

    dy = Dim("dy", min=6)
    with pytest.raises(graphcap.ConstraintViolationError,
                       match=r"(?s)Specializations unexpectedly required \(dy\)!.*generated for dy - 6 "
                             r"resulted in a specialized value of 6.*Suggested fixes:\n  dy = 12"):
        graphcap.export(FlatAdd(), (torch.randn(6, 2), torch.randn(12)),
                        dynamic_shapes={"x": (dy - 6, 2), "y": (dy,)})


def test_refused_inputs_name_the_failed_guard_in_torch_words():
    class Three(torch.nn.Module):
        def forward(self, x, ys, n):
            return x + ys[0] * n

    ep = graphcap.export(Three(), (torch.randn(4), [torch.randn(4)], 2),
                         dynamic_shapes={"x": {0: Dim("b", max=8)}, "ys": [{0: Dim("b", max=8)}], "n": None})
    with pytest.raises(AssertionError, match=r"Guard failed: x\.size\(\)\[0\] <= 8"):
        ep.module()(torch.randn(9), [torch.randn(9)], 2)
    with pytest.raises(AssertionError, match=r"Guard failed: ys\[0\]\.size\(\)\[0\] == x\.size\(\)\[0\]"):
        ep.module()(torch.randn(5), [torch.randn(6)], 2)
    with pytest.raises(AssertionError, match=r"Guard failed: n == 2"):
        ep.module()(torch.randn(5), [torch.randn(5)], 3)
    with pytest.raises(graphcap.RuntimeInputError):  # still graphcap's own type too
        ep.module()(torch.randn(5), [torch.randn(5)], 3)


def test_a_refused_derived_size_names_the_input_with_the_same_size():
    class ThreeWay(torch.nn.Module):
        def forward(self, x, y, y1):
            return x[1:] + y + y1

    d = Dim("d", min=3)
    ep = graphcap.export(ThreeWay(), (torch.randn(6), torch.randn(5), torch.randn(5)),
                         dynamic_shapes={"x": (d + 1,), "y": (d,), "y1": (d,)})
    with pytest.raises(AssertionError, match=r"Guard failed: y1\.size\(\)\[0\] == y\.size\(\)\[0\]"):
        ep.module()(torch.randn(6), torch.randn(5), torch.randn(4))
