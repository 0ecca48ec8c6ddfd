"""Programs that use values read from tensor data (.item(), nonzero()) where torch.export's do."""
from __future__ import annotations

import builtins
import math
import re

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

import graphcap


def _targets(ep) -> list:
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def test_min_max_and_math_pow_on_an_item_are_recorded_symbolically():
    class M(torch.nn.Module):
        def forward(self, x, y):
            n = x.item()
            return torch.ones(max(n, 2)) * math.pow(min(n, 10), 2) + y.sum()

    ep = graphcap.export(M(), (torch.tensor(4), torch.randn(3)))
    assert torch.sym_max in _targets(ep) and torch.sym_min in _targets(ep)
    for v in (1, 4, 12):
        args = (torch.tensor(v), torch.ones(3))
        torch.testing.assert_close(ep.module()(*args), M()(*args))


def test_min_max_of_tensors_become_maximum_minimum_and_clamp():
    # eager compares one-element tensors with bool(); elementwise ops give the same values
    class M(torch.nn.Module):
        def forward(self, x):
            return max([x, x * 2]) + min(x, x - 1) + max(x, 0.5) + min(3, x)

    ep = graphcap.export(M(), (torch.randn(()),))
    ops = _targets(ep)
    assert torch.ops.aten.maximum.default in ops and torch.ops.aten.minimum.default in ops
    assert ops.count(torch.ops.aten.clamp.default) == 2
    for v in (-3.0, 0.25, 0.75, 5.0):
        x = torch.tensor(v)
        torch.testing.assert_close(ep.module()(x), M()(x))


def test_builtins_are_restored_and_plain_values_keep_python_semantics():
    class M(torch.nn.Module):
        def forward(self, x):
            assert max([3, 1, 2]) == 3 and min(iter([4, 2])) == 2 and max("ab") == "b"
            assert max([], default=7) == 7 and math.pow(2, 3) == 8.0
            return x + max(1, 2)

    ep = graphcap.export(M(), (torch.randn(2),))
    assert builtins.max is max and builtins.min is min and math.pow.__module__ == "math"
    torch.testing.assert_close(ep.module()(torch.zeros(2)), torch.full((2,), 2.0))


def test_symbolic_indices_and_slices_use_select_and_slice():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.arange(20.0).reshape(4, 5)

        def forward(self, pos, x):
            i = pos.item()
            torch._check(i >= 0)
            torch._check(i < 4)
            return self.table[i] * self.table[i], x[:i + 1], x[None, ..., pos]

    ep = graphcap.export(M(), (torch.tensor(1), torch.randn(6, 6)))
    x = torch.randn(6, 6)
    for p in (0, 3):
        for got, want in zip(ep.module()(torch.tensor(p), x), M()(torch.tensor(p), x)):
            torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        ep.module()(torch.tensor(4), x)


def test_int_returned_by_cond_indexes_a_tensor():
    class M(torch.nn.Module):
        def forward(self, x):
            idx = torch.cond(x.sum() > 3, lambda: 0, lambda: 1, ())
            return x[idx]

    ep = graphcap.export(M(), (torch.randn(3, 3),))
    for x in (torch.ones(3, 3), -torch.ones(3, 3)):
        torch.testing.assert_close(ep.module()(x), M()(x))


def test_tensor_constructor_from_item_values():
    class M(torch.nn.Module):
        def forward(self, u, f):
            return torch.tensor([u.item()]), torch.tensor([f.item()])

    ep = graphcap.export(M(), (torch.tensor([3]), torch.tensor([3.5])))
    for args in ((torch.tensor([5]), torch.tensor([-1.25])), (torch.tensor([0]), torch.tensor([2.0]))):
        for got, want in zip(ep.module()(*args), M()(*args)):
            torch.testing.assert_close(got, want)


_ASSERTING_FORWARD = """
def forward(self, x):
    n = x.item()
    assert n > 2
    return torch.zeros(n)
"""


def test_python_assert_on_an_item_becomes_a_runtime_assert():
    # compiled here, not in this file: pytest rewrites the asserts of test modules
    namespace = {"torch": torch}
    exec(compile(_ASSERTING_FORWARD, "<user model>", "exec"), namespace)
    M = type("M", (torch.nn.Module,), {"forward": namespace["forward"]})

    ep = graphcap.export(M(), (torch.tensor(4),))
    assert ep.module()(torch.tensor(6)).shape == (6,)
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        ep.module()(torch.tensor(1))


def test_undecidable_branch_names_the_line_and_the_check_in_the_users_names():
    class M(torch.nn.Module):
        def forward(self, x, y):
            n = x.item()
            z = y.nonzero()
            if n > z.shape[0]:
                return torch.zeros(n)
            return y

    with pytest.raises(GuardOnDataDependentSymNode,
                       match="Could not guard on data-dependent expression u0 > u1") as info:
        graphcap.export(M(), (torch.tensor(4), torch.tensor([1, 0, 1])))
    err = info.value
    assert isinstance(err, graphcap.errors.UnsupportedError)
    assert "if n > z.shape[0]:" in err.where
    assert "torch._check(n > z.shape[0])" in err.fix and "torch._check(n <= z.shape[0])" in err.fix
    assert err.cond is not None


def test_condition_without_a_local_name_names_the_value_it_reads():
    # the value is read on the line itself: the fix names it (reading it again would give a new value)
    class M(torch.nn.Module):
        def forward(self, y):
            if y.item() < 0:
                return y - 1
            return y + 1

    with pytest.raises(GuardOnDataDependentSymNode) as info:
        graphcap.export(M(), (torch.tensor(2),))
    fix = info.value.fix
    assert "value = y.item()" in fix and "torch._check(value < 0)" in fix and "if value < 0:" in fix
    assert not re.search(r"\bu\d+\b", fix)


def test_real_tensor_propagation_mismatch_keeps_torchs_error_type():
    from torch._subclasses.fake_tensor import MetadataMismatchError

    @torch.library.custom_op("graphcap_test_dd::bad_fake", mutates_args=())
    def bad_fake(a: torch.Tensor) -> torch.Tensor:
        return a + 1

    @bad_fake.register_fake
    def _(a):
        return torch.empty(a.shape[1], a.shape[0])

    class M(torch.nn.Module):
        def forward(self, a):
            return bad_fake(a)

    import torch._functorch.config as functorch_config

    with functorch_config.patch(fake_tensor_propagate_real_tensors=True):
        with pytest.raises(MetadataMismatchError, match="Real tensor propagation found") as info:
            graphcap.export(M(), (torch.randn(4, 8),))
    assert isinstance(info.value, graphcap.errors.TraceError) and info.value.where is not None


def test_trace_error_like_keeps_the_type_and_attributes():
    original = KeyError("k")
    original.extra = 5
    err = graphcap.errors.TraceError.like(original, "what happened", where="here", fix="do this")
    assert isinstance(err, KeyError) and isinstance(err, graphcap.errors.TraceError)
    assert err.extra == 5 and str(err).startswith("what happened") and "How to fix: do this" in str(err)


def test_max_and_min_inside_a_cond_branch_keep_their_meaning():
    # dynamo captures the branch; it must see Python's builtins, or max is recorded as min
    class M(torch.nn.Module):
        def forward(self, x, y):
            def small(x, y):
                n = max(x.shape[0], 2)
                return x[: min(n, 3)].sum() + y[0]

            def large(x, y):
                return x.sum() - y[0]

            return torch.cond(x.sum() > 0, small, large, (x, y))

    y = torch.randn(3)
    ep = graphcap.export(M(), (torch.randn(5), y), dynamic_shapes=({0: graphcap.Dim("n", min=2)}, None))
    for x in (torch.ones(5), -torch.ones(4), torch.ones(2), torch.ones(7)):
        torch.testing.assert_close(ep.module()(x, y), M()(x, y))
    assert builtins.max is max


def test_math_pow_of_an_int_item_is_a_float_as_in_python():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return y * math.pow(min(x.item(), 10), 2)

    ep = graphcap.export(M(), (torch.tensor(5), torch.arange(5)))
    args = (torch.tensor(3), torch.arange(5))
    got, want = ep.module()(*args), M()(*args)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_real_tensor_propagation_decides_branches_and_asserts_the_decision():
    import torch._functorch.config as functorch_config

    class M(torch.nn.Module):
        def forward(self, x, y):
            if y.item() > 2:
                return x.cos()
            return x.sin()

    with functorch_config.patch(fake_tensor_propagate_real_tensors=True):
        ep = graphcap.export(M(), (torch.randn(3), torch.tensor(5)))
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x, torch.tensor(7)), x.cos())
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        ep.module()(x, torch.tensor(1))
