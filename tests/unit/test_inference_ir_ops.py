"""The inference IR records operators as torch.export's does: a lifted tensor
literal's copy is a ``clone``; a plain table keeps whole the composites it
does not list, also those its own functions call."""
from __future__ import annotations

import torch

import graphcap


def _targets(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def test_lift_fresh_copy_becomes_clone_even_with_an_empty_table():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.lift_fresh_copy(x)

    x = torch.randn(6, 4)
    ep = graphcap.export(M(), (x,)).run_decompositions({})
    assert _targets(ep) == [torch.ops.aten.clone.default]
    out = ep.module()(x)
    torch.testing.assert_close(out, x)
    assert out.data_ptr() != x.data_ptr()


def test_composite_called_by_a_users_decomposition_stays_whole():
    class Foo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.lin(x).cos()

    def linear_by_matmul(x, weight, bias):
        return torch.matmul(x, weight.T) + 2 * bias

    m, x = Foo(), torch.randn(3, 8)
    ep = graphcap.export(m, (x,)).run_decompositions({torch.ops.aten.linear.default: linear_by_matmul})
    targets = _targets(ep)
    assert torch.ops.aten.matmul.default in targets and torch.ops.aten.linear.default not in targets
    expected = (torch.matmul(x, m.lin.weight.T) + 2 * m.lin.bias).cos()
    torch.testing.assert_close(ep.module()(x), expected)
    # the default table still breaks matmul down to core ATen
    assert torch.ops.aten.matmul.default not in _targets(graphcap.export(m, (x,)).run_decompositions())


def test_in_place_detach_of_a_tensor_literal_leaves_no_node():
    class M(torch.nn.Module):
        def forward(self, x):
            torch.ops.aten._assert_async.msg(torch.tensor(True), "Fail")
            return x + 1

    x = torch.randn(2, 2)
    training = graphcap.export(M(), (x,))
    assert torch.ops.aten.detach_.default in _targets(training)
    ep = training.run_decompositions({})
    assert _targets(ep)[:2] == [torch.ops.aten.clone.default, torch.ops.aten._assert_async.msg]
    assert torch.ops.aten.detach.default not in _targets(ep)
    torch.testing.assert_close(ep.module()(x), x + 1)
