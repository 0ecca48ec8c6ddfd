"""In-place writes to fresh intermediates are replayed out of place, and only those."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap.ir_checks import verify
from graphcap.passes import simple_inplace

aten = torch.ops.aten


class Chain(torch.nn.Module):
    def forward(self, x):
        a = x * 2
        b = a.relu_()
        b.add_(1)
        return a, b * 3  # a sees both writes


class Viewed(torch.nn.Module):
    def forward(self, x):
        a = x * 2
        v = a.view(-1)
        a.add_(1)  # v must see this write: needs functionalization
        return v + 0


class Promotes(torch.nn.Module):
    def forward(self, x, y):
        a = x.half() * 1
        a.add_(y)  # float32 into float16: in place keeps float16
        return a


CASES = [
    (Chain(), (torch.randn(3, 4),), False),
    (Viewed(), (torch.randn(3, 4),), True),
    (Promotes(), (torch.randn(3, 4), torch.randn(3, 4)), False),
]


@pytest.mark.parametrize("model,args,needs", CASES, ids=["chain", "viewed", "promotes"])
def test_plan_and_results(model, args, needs):
    ep = graphcap.export(model, args)
    plan = simple_inplace.plan(ep.graph_module, has_declared_mutations=False)
    assert plan.needs_functionalization is needs
    dep = ep.run_decompositions()
    verify(dep)
    assert not simple_inplace.has_mutation(dep.graph_module)
    expected = model(*[a.clone() for a in args])
    got = dep.module()(*[a.clone() for a in args])
    for e, g in zip(expected if isinstance(expected, tuple) else (expected,),
                    got if isinstance(got, tuple) else (got,)):
        assert e.dtype == g.dtype
        torch.testing.assert_close(g, e)


def test_functional_variant():
    assert simple_inplace.functional_variant(aten.add_.Tensor) is aten.add.Tensor
    assert simple_inplace.functional_variant(aten.relu_.default) is aten.relu.default
    assert simple_inplace.functional_variant(aten.add.Tensor) is None
    assert simple_inplace.functional_variant(aten.__iand__.Tensor) is None


def test_inputs_and_buffers_still_need_functionalization():
    class M(torch.nn.Module):
        def forward(self, x):
            x.relu_()
            return x + 1

    ep = graphcap.export(M(), (torch.randn(3),))
    assert simple_inplace.plan(ep.graph_module, has_declared_mutations=True).needs_functionalization
    assert not simple_inplace.plan(ep.graph_module, has_declared_mutations=False).replace
