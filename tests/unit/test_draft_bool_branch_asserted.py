"""A draft's branch on a bool read from data is asserted at runtime, on every torch line.

``if x.sum() > 0:`` reads a bool from tensor data (``Eq(u0, 1)``). draft_export takes the
example's branch and must keep a runtime assert for it: an input whose data takes the other
branch is refused. On torch 2.10 / 2.11 torch stored the bool's real value as the integer 1,
the guard became the constant false and the assert was dropped
(``torch_private.real_values.keep_real_truth_values_boolean`` corrects it). A decision that
still comes out as the constant false is refused, never returned as a program.
"""
from __future__ import annotations

import pytest
import sympy
import torch

import graphcap
from graphcap.capture.draft import _refuse_unasserted_decisions
from graphcap.capture.draft_conditions import Decision
from graphcap.capture.draft_report import SourceLine
from graphcap.errors import UnsupportedError
from graphcap.torch_private.real_values import keep_real_truth_values_boolean
from graphcap.torch_private.shapes import new_shape_env, real_unbacked_values


class SignBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


class AnyBranch(torch.nn.Module):
    def forward(self, x, y):
        if (x > 2).any():
            return x * y
        return x + y


@pytest.mark.parametrize("example, other", [(torch.ones(3), -torch.ones(3)), (-torch.ones(3), torch.ones(3))])
def test_the_other_branch_is_refused(example, other):
    m = SignBranch()
    ep = graphcap.draft_export(m, (example,))
    torch.testing.assert_close(ep.module()(example * 2), m(example * 2))
    with pytest.raises(RuntimeError, match="x.sum"):
        ep.module()(other)


def test_two_inputs_any_branch_is_refused():
    m = AnyBranch()
    x, y = torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.0])
    ep = graphcap.draft_export(m, (x, y))
    torch.testing.assert_close(ep.module()(x + 1, y), m(x + 1, y))
    with pytest.raises(RuntimeError):
        ep.module()(torch.zeros(2), y)


def test_a_bools_real_value_is_stored_as_a_truth_value():
    env = new_shape_env()
    keep_real_truth_values_boolean(env)
    u0 = sympy.Symbol("u0", integer=True)
    setter = getattr(env, "set_real_tensor_prop_unbacked_vals", None) or env.set_unbacked_var_to_val
    setter(sympy.Eq(u0, 1), 1)
    setter(u0, 5)
    values = real_unbacked_values(env)
    assert values[sympy.Eq(u0, 1)] is sympy.true
    assert values[u0] == 5
    assert sympy.Eq(u0, 1).xreplace(values) is sympy.true


def test_a_decision_recorded_as_false_is_refused():
    where = SourceLine("model.py", 7, "forward", "if x.sum() > 0:")
    with pytest.raises(UnsupportedError, match="could not record the runtime assert") as info:
        _refuse_unasserted_decisions([Decision(sympy.false, where)])
    assert "model.py" in str(info.value) and "torch.cond" in str(info.value)
    u0 = sympy.Symbol("u0", integer=True)
    _refuse_unasserted_decisions([Decision(sympy.Eq(u0, 1), where)])
