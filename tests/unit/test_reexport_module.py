"""Re-exporting ``ep.module()`` gives the program again.

``module()`` checks every input before computing. When a tracer runs it (export of
``ep.module()``), sizes are SymInts: each check is asked as a condition the tracer decides
from its own spec, or records as a guard that spec must satisfy, never made concrete.
``module()`` holds the program's state under every name the program knows it by, so the
re-export lifts the same state.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap.errors import ConstraintViolationError, InputGuardError

Dim = torch.export.Dim


class EvenHalves(torch.nn.Module):
    def forward(self, w):
        if w.shape[0] % 2 == 0:
            return w[::2]
        return w[1:-1:2]


class Shifted(torch.nn.Module):
    """y is one longer than x."""

    def forward(self, x, y):
        return x + y[1:]


@pytest.mark.parametrize("strict", [False, True])
def test_derived_dim_program_re_exports(strict):
    d = Dim("d", min=3, max=6)
    ep = graphcap.export(EvenHalves(), (torch.randn(10),), dynamic_shapes=({0: 2 * d},), strict=strict)
    again = graphcap.export(ep.module(), (torch.randn(10),), dynamic_shapes=({0: 2 * d},), strict=strict)
    for n in (6, 8, 12):
        w = torch.randn(n)
        torch.testing.assert_close(again.module()(w), EvenHalves()(w))
    with pytest.raises(InputGuardError, match="of the form 2\\*"):
        again.module()(torch.randn(9))


def test_relation_between_inputs_re_exports():
    d = Dim("d", min=2, max=20)
    spec = ({0: d}, {0: d + 1})
    ep = graphcap.export(Shifted(), (torch.randn(5), torch.randn(6)), dynamic_shapes=spec)
    again = graphcap.export(ep.module(), (torch.randn(5), torch.randn(6)), dynamic_shapes=spec)
    x, y = torch.randn(7), torch.randn(8)
    torch.testing.assert_close(again.module()(x, y), Shifted()(x, y))
    with pytest.raises(InputGuardError):
        again.module()(torch.randn(7), torch.randn(9))


def test_a_spec_wider_than_the_program_is_refused_when_re_exporting():
    """The program only takes even sizes: a plain Dim over every size is not its spec."""
    d = Dim("d", min=3, max=6)
    ep = graphcap.export(EvenHalves(), (torch.randn(10),), dynamic_shapes=({0: 2 * d},))
    with pytest.raises(ConstraintViolationError):
        graphcap.export(ep.module(), (torch.randn(10),), dynamic_shapes=({0: Dim("n", min=6, max=12)},))


class SharedConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Module()
        self.inner.table = torch.arange(9.0).reshape(3, 3).requires_grad_()
        self.table = self.inner.table  # one tensor, two names
        self.other = torch.ones(3)

    def forward(self, x):
        return x + self.table + self.inner.table * self.other


def test_a_constant_known_by_two_names_keeps_both_through_module():
    model = SharedConstant()
    ep = graphcap.export(model, (torch.ones(3, 3),))
    assert sorted(ep.constants) == ["inner.table", "other", "table"]
    module = ep.module()
    assert module.table is module.inner.table and "table" not in module.state_dict()
    again = graphcap.export(module, (torch.ones(3, 3),))
    assert sorted(again.constants) == sorted(ep.constants)
    assert again.constants["table"] is again.constants["inner.table"]
    x = torch.randn(3, 3)
    torch.testing.assert_close(again.module()(x), model(x))


class NarrowedInt(torch.nn.Module):
    def forward(self, n, y):
        assert n > 3
        assert n <= 5
        return y * n


def test_a_dynamic_int_input_keeps_its_range_through_module():
    spec = (Dim.DYNAMIC(min=3, max=10), None)
    ep = graphcap.export(NarrowedInt(), (4, torch.randn(2)), dynamic_shapes=spec)
    again = graphcap.export(ep.module(), (4, torch.randn(2)), dynamic_shapes=spec)
    assert [(int(r.lower), int(r.upper)) for r in again.range_constraints.values()] == [(4, 5)]
    with pytest.raises(InputGuardError, match=">= 4"):
        again.module()(3, torch.randn(2))
    with pytest.raises(ConstraintViolationError, match="4 <= n <= 5"):
        graphcap.export(ep.module(), (4, torch.randn(2)), dynamic_shapes=(Dim("n", min=3, max=10), None))


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, k: int):
        return self.lin(x) * k, k + 1


def test_strict_re_export_of_module_runs_its_graph_with_the_metadata():
    """strict=True on a graph module: no user bytecode for dynamo to read; the graph is replayed
    with its nodes' metadata (an int input and an int output included)."""
    ep = graphcap.export(Scaled(), (torch.randn(2, 4), 3), strict=True)
    again = graphcap.export(ep.module(), (torch.randn(2, 4), 3), strict=True)
    linear = next(n for n in again.graph.nodes if n.target is torch.ops.aten.linear.default)
    assert "self.lin(x)" in linear.meta["stack_trace"]
    assert [v[1] for v in linear.meta["nn_module_stack"].values()][-1].endswith("Linear")
    x = torch.randn(2, 4)
    for a, b in zip(again.module()(x, 3), ep.module()(x, 3)):
        torch.testing.assert_close(a, b)
    with pytest.raises(InputGuardError, match="equal to 3"):
        again.module()(x, 4)


def test_strict_re_export_of_a_program_without_tensor_computation():
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    ep = graphcap.export(Add(), (4, 5), strict=True)
    again = graphcap.export(ep.module(), (4, 5), strict=True)
    assert again.module()(4, 5) == 9


def test_a_spec_with_one_entry_for_two_inputs_says_so_in_torchs_words_too():
    """module() of a program whose forward took *args takes the inputs one by one; a spec that
    still wraps them in one entry is refused with graphcap's message and torch.export's sentence."""
    class Star(torch.nn.Module):
        def forward(self, *args):
            return args[0] + args[1]

    args = (torch.randn(2, 5), torch.randn(2, 5))
    ep = graphcap.export(Star(), args, dynamic_shapes={"args": ({0: Dim.DYNAMIC}, {0: Dim.DYNAMIC})})
    with pytest.raises(torch._dynamo.exc.UserError, match="has 1 entries, but there are 2 inputs") as info:
        graphcap.export(ep.module(), args, dynamic_shapes=(({0: Dim.DYNAMIC}, {0: Dim.DYNAMIC}),))
    assert "`inputs` has 2 elements, but `dynamic_shapes` has 1 elements" in str(info.value)
