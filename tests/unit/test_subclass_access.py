"""Reads of a tensor subclass's inner tensors are recorded, not baked in as trace values."""
from __future__ import annotations

import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from graphcap import ir_checks

ACCESS = torch.ops.export.access_subclass_inner_tensor.default


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p1 = torch.nn.Parameter(torch.ones(3, 4))
        self.p2 = torch.nn.Parameter(TwoTensor(torch.ones(3, 4), 2 * torch.ones(3, 4)))
        self.b1 = torch.nn.Buffer(TwoTensor(TwoTensor(torch.ones(3, 4), torch.zeros(3, 4)),
                                            TwoTensor(3 * torch.ones(3, 4), torch.ones(3, 4))))

    def forward(self, x):
        res = (2 * self.p1 + self.p2 + self.b1).sum()
        return x + res.a.b


def test_inner_tensor_reads_become_nodes_and_the_program_computes_them():
    m = Nested()
    ep = graphcap.export(m, (torch.randn(3, 4),))
    reads = [n for n in ep.graph.nodes if n.target is ACCESS]
    assert [n.args[1] for n in reads] == ["a", "b"]  # unused reads the tracer made are gone
    assert ep.constants == {} and ir_checks.violations(ep) == []
    x = torch.randn(3, 4)
    torch.testing.assert_close(ep.module()(x), m(x))
    # the hook is gone after the export
    assert "__getattribute__" not in TwoTensor.__dict__


def test_subclass_constructor_in_forward_is_captured():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.buffer = torch.nn.Buffer(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))

        def forward(self, x):
            return (x + TwoTensor(x, TwoTensor(x, x)) + self.buffer).b.a

    m = M()
    ep = graphcap.export(m, (torch.randn(4, 4),))
    assert ir_checks.violations(ep) == []
    x = torch.randn(4, 4)
    torch.testing.assert_close(ep.module()(x), m(x))


def test_decomposing_a_program_that_reads_inner_tensors_splits_the_subclasses():
    """The reads survive run_decompositions as plain operators on the inner tensors (see test_subclass_flatten)."""
    m = Nested()
    ep = graphcap.export(m, (torch.randn(3, 4),)).run_decompositions({})
    assert not [n for n in ep.graph.nodes if n.target is ACCESS]
    assert len(ep.state_dict) == 1 + 2 + 4 and ir_checks.violations(ep) == []
    x = torch.randn(3, 4)
    torch.testing.assert_close(ep.module()(x), m(x))
