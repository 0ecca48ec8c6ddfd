"""Strict mode records ``t.add_(other, alpha=a)`` as one ``add_`` on every torch line.

torch 2.10 / 2.11's dynamo split a plain-number alpha into ``mul`` then ``add_``
(``torch_private.dynamo._scalar_alpha_kept_whole`` gives those lines 2.12's rule while a
strict capture runs on the exporting thread); a tensor alpha keeps dynamo's own rule.
"""
from __future__ import annotations

import torch

import graphcap


class Accumulate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(4))

    def forward(self, x):
        self.acc.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return x - self.acc


def _targets(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_scalar_alpha_stays_one_add_in_strict_and_non_strict():
    x = torch.randn(3, 4)
    strict = graphcap.export(Accumulate(), (x,), strict=True)
    plain = graphcap.export(Accumulate(), (x,))
    assert _targets(strict) == _targets(plain)
    assert "aten.mul.Tensor" not in _targets(strict)
    add = next(n for n in strict.graph.nodes if str(n.target) == "aten.add_.Tensor")
    assert add.kwargs.get("alpha") == 0.1
    torch.testing.assert_close(strict.module()(x), Accumulate()(x), rtol=0, atol=0)


def test_dynamos_rule_is_back_after_a_strict_export():
    from torch._dynamo.variables.tensor import TensorVariable
    before = TensorVariable.method_add_
    graphcap.export(Accumulate(), (torch.randn(3, 4),), strict=True)
    assert TensorVariable.method_add_ is before
