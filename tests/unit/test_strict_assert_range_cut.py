"""A user assert that cuts sizes 0 and 1 off a named Dim, in strict and non-strict mode.

torch.export (the reference) exports these with the Dim's range left at [0, 9] and its
program runs at size 1 without the assert (eager raises there). graphcap refuses with a
ConstraintViolationError (also torch's UserError) whose suggested fix, applied by the refine
helper, gives a program equal to eager over the new range. The fix appears once per Dim
even when sizes 0 and 1 both fail.
"""
import pytest
import torch
from torch._dynamo.exc import UserError
from torch.export import Dim

import graphcap
from graphcap.errors import InputGuardError


class AssertAtLeastTwo(torch.nn.Module):
    def forward(self, x):
        assert x.shape[0] > 1, "need two rows"
        return x.sum(0) * 2


class CheckAtLeastTwo(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[0] >= 2)
        return x.cumsum(0)[-1]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("model", [AssertAtLeastTwo, CheckAtLeastTwo])
def test_range_cut_refused_once_then_fixed(model, strict):
    spec = {"x": {0: Dim("rows", max=9)}}
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(model(), (torch.randn(5, 3),), dynamic_shapes=spec, strict=strict)
    assert isinstance(info.value, UserError)
    fixes = str(info.value).split("Suggested fixes:\n", 1)[1].splitlines()
    fix_lines = [line for line in fixes if line.strip().startswith("rows =")]
    assert fix_lines == ["  rows = Dim('rows', min=2, max=9)"]

    fixed = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    ep = graphcap.export(model(), (torch.randn(5, 3),), dynamic_shapes=fixed, strict=strict)
    program = ep.module()
    for rows in (2, 5, 9):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(program(x), model()(x))
    with pytest.raises(InputGuardError):
        program(torch.randn(1, 3))


def test_torch_reference_range_is_wider_than_the_program():
    """The reference behaviour graphcap improves on: torch keeps [0, 9] and skips the assert at 1."""
    ep = torch.export.export(AssertAtLeastTwo(), (torch.randn(5, 3),),
                             dynamic_shapes={"x": {0: Dim("rows", max=9)}}, strict=True)
    (vr,) = ep.range_constraints.values()
    assert vr.lower == 0
    with pytest.raises(AssertionError):
        AssertAtLeastTwo()(torch.randn(1, 3))
