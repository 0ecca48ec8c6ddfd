"""Shape guards raised inside a ``cond`` branch hold only where that branch runs.

Each model branches on a dynamic size; the branches do things that, traced
as if both ran for every size, would narrow or refuse the dim (re-checking
the predicate, slicing to the predicate's bound). Every test runs the program
on sizes that take each branch and compares with eager, on the training IR,
after ``run_decompositions`` and after a save/load round trip; refused sizes
get an error before computing.
"""
from __future__ import annotations

import io
import re
import sys
import warnings

import pytest
import sympy
import torch
from functorch.experimental.control_flow import map as ft_map
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._higher_order_ops.while_loop import while_loop
from torch.utils._sympy.numbers import int_oo

import graphcap
from conftest import assert_same_outputs
from graphcap.trace.control_flow import symbol_intervals


def _export(model, example, dim):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, (example,), dynamic_shapes={"x": {0: dim}})


def _variants(ep):
    """The program, its inference IR and its saved-and-loaded copy."""
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return {"training": ep, "decomposed": ep.run_decompositions(), "loaded": graphcap.load(buf)}


def _same(expected, got, where: str) -> None:
    try:
        assert_same_outputs(expected, got)
    except AssertionError as e:
        raise AssertionError(f"{where}: {e}") from None


def _check_sizes(model, ep, sizes):
    for name, program in _variants(ep).items():
        for n in sizes:
            x = torch.randn(n, 3)
            with torch.no_grad():
                _same(model(x), program.module()(x), f"{name} at size {n}")


def _range(ep):
    (vr,) = ep.range_constraints.values()
    return vr.lower, vr.upper


class Recheck(torch.nn.Module):
    """Each branch relies on the predicate: the true one slices to its bound, the false one re-checks it."""

    def forward(self, x):
        def small(x):
            if x.shape[0] > 4:  # never true where this branch runs
                return x[:4].sum(0) * 5
            return x.sum(0) * 3
        return torch.cond(x.shape[0] > 4, lambda x: x[:4].sum(0) * 2, small, (x,))


@pytest.mark.parametrize("example", [6, 3], ids=["example-takes-true", "example-takes-false"])
def test_branch_guards_implied_by_the_predicate_leave_the_declared_range(example):
    ep = _export(Recheck(), torch.randn(example, 3), graphcap.Dim("b", min=2, max=20))
    assert _range(ep) == (2, 20)  # torch.export narrows this to 5..20 (or 2..3) and refuses the spec
    _check_sizes(Recheck(), ep, [2, 3, 4, 5, 6, 20])


class Nested(torch.nn.Module):
    def forward(self, x):
        def big(x):
            return torch.cond(x.shape[0] > 8, lambda x: x[:8].sum(0), lambda x: x[:4].sum(0) * 2, (x,))

        def small(x):
            if x.shape[0] <= 4:
                return x.sum(0) * 3
            return x.sum(0)
        return torch.cond(x.shape[0] > 4, big, small, (x,))


@pytest.mark.parametrize("example", [6, 9, 3])
def test_nested_conds_scope_guards_to_each_level(example):
    ep = _export(Nested(), torch.randn(example, 3), graphcap.Dim("b", min=2, max=20))
    assert _range(ep) == (2, 20)
    _check_sizes(Nested(), ep, [2, 4, 5, 8, 9, 20])


class CondInMap(torch.nn.Module):
    """The cond is inside a map body: its predicate is over the slice's dim."""

    def forward(self, xs):
        def body(x):
            return Recheck()(x)
        return ft_map(body, xs)


def test_cond_inside_a_map_body_is_scoped_too():
    model = CondInMap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, (torch.randn(2, 6, 3),),
                             dynamic_shapes={"xs": {1: graphcap.Dim("b", min=2, max=20)}})
    assert _range(ep) == (2, 20)
    for name, program in _variants(ep).items():
        for n in (2, 4, 5, 20):
            xs = torch.randn(2, n, 3)
            with torch.no_grad():
                _same(model(xs), program.module()(xs), f"{name} at size {n}")


class CondInLoop(torch.nn.Module):
    def forward(self, x):
        def body(i, x):
            return i + 1, Recheck()(x) + x
        return while_loop(lambda i, x: i < 3, body, (torch.tensor(0), x))[1]


@pytest.mark.parametrize("example", [6, 3])
def test_cond_inside_a_while_loop_body_is_scoped_too(example):
    ep = _export(CondInLoop(), torch.randn(example, 3), graphcap.Dim("b", min=2, max=20))
    assert _range(ep) == (2, 20)
    _check_sizes(CondInLoop(), ep, [2, 4, 5, 20])


class NotTaken(torch.nn.Module):
    """The false branch (sizes <= 4) branches again in Python; the example (6) decides that path."""

    def forward(self, x):
        def small(x):
            if x.shape[0] > 2:
                return x[:2].sum(0)
            return x.sum(0) * 3
        return torch.cond(x.shape[0] > 4, lambda x: x.sum(0), small, (x,))


def test_guard_of_the_branch_the_example_skips_narrows_only_that_branch_sizes():
    """The false branch was traced for sizes > 2 only: 2 must be refused (sound), 3..20 accepted."""
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        _export(NotTaken(), torch.randn(6, 3), graphcap.Dim("b", min=2, max=20))
    message = str(info.value)
    assert "needs 3 <= b <= 20" in message
    assert re.search(r"test_branch_guards\.py:\d+ in small: if x\.shape\[0\] > 2:", message)
    assert "b = Dim('b', min=3, max=20)" in message

    ep = _export(NotTaken(), torch.randn(6, 3), graphcap.Dim.AUTO)
    assert _range(ep) == (3, int_oo)
    _check_sizes(NotTaken(), ep, [3, 4, 5, 20])
    with pytest.raises(graphcap.RuntimeInputError, match=r"shape\[0\] to be >= 3, but got 2"):
        ep.module()(torch.randn(2, 3))


class Hole(torch.nn.Module):
    """The true branch (sizes > 4) is traced for sizes >= 6: size 5 has no correct trace."""

    def forward(self, x):
        def big(x):
            if x.shape[0] >= 6:
                return x.sum(0)
            return x.sum(0) * 7
        return torch.cond(x.shape[0] > 4, big, lambda x: x.sum(0) * 2, (x,))


def test_an_implication_that_is_not_an_interval_keeps_the_part_around_the_example():
    ep = _export(Hole(), torch.randn(6, 3), graphcap.Dim.AUTO)
    assert _range(ep) == (6, int_oo)
    _check_sizes(Hole(), ep, [6, 7, 30])
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(5, 3))


class LongerThan(torch.nn.Module):
    """A predicate over two dims: the branch's guard (x <= 10) binds only where x > y."""

    def forward(self, x, y):
        def longer(x, y):
            if x.shape[0] > 10:
                return x[:10].sum(0) + y.sum(0)
            return x.sum(0) * 3 + y.sum(0)
        return torch.cond(x.shape[0] > y.shape[0], longer, lambda x, y: x.sum(0) + y.sum(0) * 2, (x, y))


def test_an_implication_over_two_dims_is_a_runtime_assert_for_auto_dims():
    model = LongerThan()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, (torch.randn(6, 3), torch.randn(4, 3)),
                             dynamic_shapes={"x": {0: graphcap.Dim.AUTO}, "y": {0: graphcap.Dim.AUTO}})
    for name, program in _variants(ep).items():
        for a, b in [(6, 4), (3, 4), (12, 14), (10, 2)]:
            x, y = torch.randn(a, 3), torch.randn(b, 3)
            with torch.no_grad():
                _same(model(x, y), program.module()(x, y), f"{name} at sizes {a}, {b}")
        with pytest.raises(graphcap.RuntimeInputError, match=r"satisfy .*shape\[0\] <= 10.*but got"):
            program.module()(torch.randn(12, 3), torch.randn(4, 3))


def test_an_implication_over_two_dims_is_checked_against_a_declared_spec():
    with warnings.catch_warnings(), pytest.raises(graphcap.ConstraintViolationError) as info:
        warnings.simplefilter("ignore")
        graphcap.export(LongerThan(), (torch.randn(6, 3), torch.randn(4, 3)),
                        dynamic_shapes={"x": {0: graphcap.Dim("b", max=20)}, "y": {0: graphcap.Dim.AUTO}})
    assert str(info.value).count("The program needs (b <= 10) | (b <= ") == 1
    assert "in longer: if x.shape[0] > 10:" in str(info.value)


class TensorPredicate(torch.nn.Module):
    """A data-dependent predicate says nothing about sizes: branch guards hold for every size."""

    def forward(self, x):
        def first(x):
            if x.shape[0] > 10:
                return x[:10].sum(0)
            return x.sum(0) * 3
        return torch.cond(x.sum() > 0, first, lambda x: x.sum(0), (x,))


def test_guards_under_a_tensor_predicate_still_constrain_every_size():
    with pytest.raises(graphcap.ConstraintViolationError, match=r"needs 2 <= b <= 10"):
        _export(TensorPredicate(), torch.randn(6, 3), graphcap.Dim("b", min=2, max=20))


def test_torch_is_left_as_it_was():
    import torch._dynamo.variables.higher_order_ops as dynamo_hops
    import torch._higher_order_ops.utils as hop_utils
    from torch._subclasses.fake_tensor import FakeTensorMode
    cond_module = sys.modules["torch._higher_order_ops.cond"]
    before = (getattr(hop_utils, "_hop_compile_and_call", None),  # torch 2.12 on
              dynamo_hops.speculate_subgraph,
              dynamo_hops.CondHigherOrderVariable.__dict__["_call_function"], cond_module.trace_cond,
              torch.ops.higher_order.cond.python_key_table[FakeTensorMode])
    _export(Recheck(), torch.randn(6, 3), graphcap.Dim("b", min=2, max=20))
    with pytest.raises(graphcap.ConstraintViolationError):
        _export(NotTaken(), torch.randn(6, 3), graphcap.Dim("b", min=2, max=20))
    after = (getattr(hop_utils, "_hop_compile_and_call", None),
             dynamo_hops.speculate_subgraph,
             dynamo_hops.CondHigherOrderVariable.__dict__["_call_function"], cond_module.trace_cond,
             torch.ops.higher_order.cond.python_key_table[FakeTensorMode])
    assert all(a is b for a, b in zip(before, after))
    x = torch.randn(3, 3)
    assert_same_outputs(Recheck()(x), x.sum(0) * 3)


# -- the interval arithmetic ------------------------------------------------

s, t = sympy.symbols("s t", integer=True)


@pytest.mark.parametrize("cond, expected", [
    (s > 4, [(5, 20)]),
    (s <= 4, [(2, 4)]),
    (sympy.Not(s > 4), [(2, 4)]),
    (2 * s >= 9, [(5, 20)]),
    (sympy.Eq(s, 7), [(7, 7)]),
    (sympy.Ne(s, 7), [(2, 6), (8, 20)]),
    (sympy.Or(s <= 4, s >= 6), [(2, 4), (6, 20)]),
    (sympy.And(s > 3, s < 9), [(4, 8)]),
    (sympy.Or(s <= 4, s <= 10), [(2, 10)]),
    (sympy.Eq(s, sympy.Rational(7, 2)), []),
])
def test_solve_for(cond, expected):
    assert symbol_intervals.solve_for(cond, s, 2, 20) == expected


def test_solve_for_refuses_what_is_not_about_one_symbol():
    assert symbol_intervals.solve_for(s > t, s, 2, 20) is None
    assert symbol_intervals.solve_for(sympy.Or(s > 4, t > 4), s, 2, 20) is None


# -- across shapes: random branch programs ------------------------------------

_SIZES = range(2, 21)


def _branchy(t: int, u: int, v: int, k: int) -> torch.nn.Module:
    """cond(b > t) whose branches branch again in Python (b > u, b > v) and slice to k."""
    class Branchy(torch.nn.Module):
        def forward(self, x):
            def big(x):
                if x.shape[0] > u:
                    return x[:k].sum(0) * 2
                return x.sum(0) * 3
            def small(x):
                if x.shape[0] > v:
                    return x[-k:].sum(0) * 5
                return x.sum(0) * 7
            return torch.cond(x.shape[0] > t, big, small, (x,))
    return Branchy()


def _path(b: int, t: int, u: int, v: int) -> tuple[bool, bool]:
    return (b > t, b > u) if b > t else (False, b > v)


def _nested_branchy(t: int, u: int, v: int, k: int) -> torch.nn.Module:
    """cond(b > t) whose true branch is cond(b > u) and whose branches check b > v and slice to k."""
    class NestedBranchy(torch.nn.Module):
        def forward(self, x):
            def checked(scale):
                def branch(x):
                    if x.shape[0] > v:
                        return x[:k].sum(0) * scale
                    return x.sum(0) * (scale + 1)
                return branch
            def big(x):
                return torch.cond(x.shape[0] > u, checked(2), checked(4), (x,))
            return torch.cond(x.shape[0] > t, big, checked(6), (x,))
    return NestedBranchy()


def _nested_path(b: int, t: int, u: int, v: int) -> tuple[bool, bool, bool]:
    return (b > t, b > t and b > u, b > v)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(t=st.integers(1, 20), u=st.integers(1, 20), v=st.integers(1, 20), k=st.integers(1, 8),
       example=st.sampled_from(list(_SIZES)))
def test_random_branch_programs_are_sound_and_keep_the_example_path(t, u, v, k, example):
    """Every size is refused before computing or matches eager; every size that takes the
    example's path (same predicates and inner check) is accepted: the trace holds there."""
    for make, path in ((_branchy, _path), (_nested_branchy, _nested_path)):
        model = make(t, u, v, k)
        ep = _export(model, torch.randn(example, 3), graphcap.Dim.AUTO)
        runnable = ep.module()
        for b in _SIZES:
            x = torch.randn(b, 3)
            try:
                got = runnable(x)
            except graphcap.RuntimeInputError:
                assert path(b, t, u, v) != path(example, t, u, v), f"size {b} takes the example's path"
                continue
            assert_same_outputs(model(x), got)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(t=st.integers(1, 20), u=st.integers(1, 20), v=st.integers(1, 20), k=st.integers(1, 8),
       example=st.sampled_from(list(_SIZES)))
def test_random_branch_programs_against_a_declared_range(t, u, v, k, example):
    """Exported with Dim(min=2, max=20): either every size works, or the constraint error's
    suggested fix gives a program that works on every size it accepts."""
    for model in (_branchy(t, u, v, k), _nested_branchy(t, u, v, k)):
        spec = {"x": {0: graphcap.Dim("b", min=2, max=20)}}
        try:
            ep = _export(model, torch.randn(example, 3), spec["x"][0])
            accepted = list(_SIZES)
        except graphcap.ConstraintViolationError as e:
            refined = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(e), spec)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = graphcap.export(model, (torch.randn(example, 3),), dynamic_shapes=refined)
            vr = next(iter(ep.range_constraints.values()), None)
            accepted = [b for b in _SIZES
                        if vr is None and b == example or vr is not None and vr.lower <= b <= vr.upper]
            assert example in accepted
        for b in accepted:
            x = torch.randn(b, 3)
            assert_same_outputs(model(x), ep.module()(x))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=False, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(t=st.integers(1, 20), u=st.integers(1, 20), v=st.integers(1, 20), k=st.integers(1, 8),
       example=st.sampled_from(list(_SIZES)))
def test_random_branch_programs_many(t, u, v, k, example):
    test_random_branch_programs_are_sound_and_keep_the_example_path.hypothesis.inner_test(t, u, v, k, example)
