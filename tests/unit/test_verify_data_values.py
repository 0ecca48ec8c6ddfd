"""verify and run vary values the program reads from data across their checked range (issue 24, defect 6).

Before: a model reading an int with ``n.item()`` checked to [0, 10] got the
example's n=3 in every input set, and out-of-range values were never tried.
"""
from __future__ import annotations

import torch

import graphcap
from graphcap import Dim
from graphcap.verification.generate import make_inputs, size_plans
from graphcap.verification.signature_inputs import ProgramInputs


class ReadsN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seen: list[int] = []

    def forward(self, x, n):
        if not torch.compiler.is_compiling() and not isinstance(n, torch._subclasses.FakeTensor):
            self.seen.append(int(n))
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 10)
        return x * k


def test_read_value_is_generated_across_its_range_and_refused_outside():
    model = ReadsN()
    ep = graphcap.export(model, (torch.ones(3), torch.tensor(3)))
    model.seen.clear()
    result = graphcap.verify(ep, model, samples=4)
    assert result.passed, result.summary()
    assert {0, 10, 5} <= set(model.seen), model.seen
    assert all(0 <= v <= 10 for v in model.seen)
    assert len(set(model.seen)) > 3  # random sets vary it too
    refused = {r.label: r for r in result.refusals}
    below = [r for label, r in refused.items() if label.startswith("n holding -1")]
    above = [r for label, r in refused.items() if label.startswith("n holding 11")]
    assert below and above and below[0].refused and above[0].refused, list(refused)


def test_run_plans_carry_the_values():
    ep = graphcap.export(ReadsN(), (torch.ones(3), torch.tensor(3)))
    inputs = ProgramInputs(ep)
    plans = size_plans(inputs, 0)
    values = [int(make_inputs(inputs, p.bindings, 0, p.values)[0][1]) for p in plans]
    assert values[0] == 3 and {0, 5, 10} <= set(values)


class IntInput(torch.nn.Module):
    def forward(self, x, n):
        torch._check(n >= 0)
        torch._check(n <= 10)
        return x * n


def test_dynamic_int_input_uses_its_example_and_is_refused_below_zero():
    ep = graphcap.export(IntInput(), (torch.ones(3), 3), dynamic_shapes={"x": None, "n": Dim("n", min=0, max=10)})
    result = graphcap.verify(ep, IntInput(), samples=2)
    assert result.passed, result.summary()
    assert list(result.input_sets[0].sizes.values()) == [3]
    labels = [r.label for r in result.refusals]
    assert any(label.startswith("n = -1") for label in labels), labels
