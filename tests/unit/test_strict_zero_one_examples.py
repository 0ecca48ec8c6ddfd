"""strict=True with an example size 0 or 1 on a dynamic dim gives the program non-strict gives.

dynamo, strict mode's front end, fixes a size-0/1 example to that number by default; graphcap
reads the program with those sizes symbolic, as non-strict does, so a program valid for every
size in the range is dynamic whichever mode captured it, and a program that really needs the
size (the user's own ``if x.shape[0] == 1``, a broadcast against another size) is refused with
a constraint violation, as in non-strict.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2 + x.sum(0)


class Pair(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, y.flip(0)], dim=1).reshape(x.shape[0], -1)


class Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).flatten(1).softmax(-1)


class ChecksOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            return x * 2
        return x + 1


class BroadcastsAgainstFour(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _range_of_each_dynamic_dim(ep):
    return sorted((vr.lower, vr.upper) for vr in ep.range_constraints.values())


@pytest.mark.parametrize("size", [0, 1])
@pytest.mark.parametrize("spec", [Dim("b"), Dim.DYNAMIC, Dim("b", min=0, max=9)])
def test_a_size_0_or_1_example_stays_dynamic_in_strict_as_in_non_strict(size, spec):
    x = torch.randn(size, 3)
    eps = {strict: graphcap.export(Scale(), (x,), dynamic_shapes=({0: spec},), strict=strict)
           for strict in (False, True)}
    assert _range_of_each_dynamic_dim(eps[True]) == _range_of_each_dynamic_dim(eps[False])
    assert len(eps[True].range_constraints) == 1
    for n in (0, 1, 2, 5):
        sample = torch.randn(n, 3)
        torch.testing.assert_close(eps[True].module()(sample), Scale()(sample))


def test_two_inputs_sharing_a_dim_with_example_one():
    b = Dim("b", min=1, max=16)
    x, y = torch.randn(1, 2), torch.randn(1, 3)
    ep = graphcap.export(Pair(), (x, y), dynamic_shapes=({0: b}, {0: b}), strict=True)
    for n in (1, 4, 16):
        a, c = torch.randn(n, 2), torch.randn(n, 3)
        torch.testing.assert_close(ep.module()(a, c), Pair()(a, c))
    with pytest.raises(Exception, match="shape"):
        ep.module()(torch.randn(2, 2), torch.randn(3, 3))  # the shared dim must agree


def test_batch_of_one_through_a_module_in_strict():
    torch.manual_seed(0)
    model = Conv().eval()
    ep = graphcap.export(model, (torch.randn(1, 2, 5, 5),),
                         dynamic_shapes=({0: Dim("batch", min=1, max=8)},), strict=True)
    for n in (1, 3, 8):
        x = torch.randn(n, 2, 5, 5)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_the_users_own_check_against_one_is_still_a_constraint_violation():
    with pytest.raises(ConstraintViolationError, match=r"specialized it to be a constant \(1\)"):
        graphcap.export(ChecksOne(), (torch.randn(1, 3),), dynamic_shapes=({0: Dim("b")},), strict=True)


def test_a_program_that_needs_the_size_one_is_refused_with_the_specialization():
    args = (torch.randn(1, 3), torch.randn(4, 3))
    with pytest.raises(ConstraintViolationError, match=r"b = 1") as info:
        graphcap.export(BroadcastsAgainstFour(), args, dynamic_shapes=({0: Dim("b")}, None), strict=True)
    assert "strict=True" in str(info.value)
