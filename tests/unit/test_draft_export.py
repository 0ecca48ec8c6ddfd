"""graphcap.draft_export: a program whenever eager runs, and a report of every problem worked around.

Each kind of problem the report lists (a data-dependent guard, a constraint
violation, a custom operator without a fake kernel) gets its own model; the
program must match eager on the example and on other inputs taking the same
path, and refuse data that takes the other path with a message naming the line.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import graphcap
from graphcap.errors import ConstraintViolationError, DataDependentError, MissingFakeKernelError


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


class BranchOnItem(torch.nn.Module):
    def forward(self, x, y):
        n = y.item()
        if n > 2:
            return x[:n] * 2
        return x + 1


class LoopOverCounts(torch.nn.Module):
    def forward(self, x, counts):
        out = []
        for c in counts:
            k = c.item()
            if k > 0:
                out.append(x[:k].sum())
        return torch.stack(out)


class NeedsFive(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x


@torch.library.custom_op("graphcap_draft_test::shifted", mutates_args=())
def shifted(x: torch.Tensor) -> torch.Tensor:
    return x + 3


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_draft_test.shifted(x) * 2


class Plain(torch.nn.Module):
    def forward(self, x):
        return x.relu() + 1


def test_data_dependent_guard_is_reported_with_the_users_line_and_check():
    with pytest.raises(DataDependentError):
        graphcap.export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    ep = graphcap.draft_export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    (problem,) = ep.report.problems
    assert problem.kind == "data_dependent"
    assert problem.where.filename == __file__
    assert problem.where.lineno == _line_of(BranchOnItem.forward, "if n > 2")
    assert problem.where.code == "if n > 2:"
    assert "torch._check(n > 2)" in problem.fix
    assert not ep.report.successful()


def test_draft_program_matches_eager_on_the_example_and_on_data_taking_the_same_path():
    m = BranchOnItem()
    x = torch.randn(8)
    ep = graphcap.draft_export(m, (x, torch.tensor(5)))
    torch.testing.assert_close(ep.module()(x, torch.tensor(5)), m(x, torch.tensor(5)))
    x2 = torch.randn(8)
    torch.testing.assert_close(ep.module()(x2, torch.tensor(3)), m(x2, torch.tensor(3)))


def test_data_taking_the_other_path_is_refused_naming_the_assumptions_line():
    ep = graphcap.draft_export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    with pytest.raises(RuntimeError) as info:
        ep.module()(torch.randn(8), torch.tensor(1))
    text = str(info.value)
    assert "draft_export assumed n > 2" in text
    assert f'File "{__file__}", line {_line_of(BranchOnItem.forward, "if n > 2")}' in text


def test_a_guard_met_in_a_loop_is_one_problem_with_its_occurrences():
    counts = [torch.tensor(2), torch.tensor(3), torch.tensor(1)]
    m = LoopOverCounts()
    x = torch.randn(6)
    ep = graphcap.draft_export(m, (x, counts))
    problems = ep.report.of_kind("data_dependent")
    at_branch = [p for p in problems if p.where.lineno == _line_of(LoopOverCounts.forward, "if k > 0")]
    assert len(at_branch) == 1 and at_branch[0].occurrences == 3
    assert "torch._check(k > 0)" in at_branch[0].fix
    torch.testing.assert_close(ep.module()(x, counts), m(x, counts))


def test_constraint_violation_refines_the_spec_and_prints_it():
    spec = {"x": {0: graphcap.Dim("b")}}
    with pytest.raises(ConstraintViolationError):
        graphcap.export(NeedsFive(), (torch.randn(8),), dynamic_shapes=spec)
    ep = graphcap.draft_export(NeedsFive(), (torch.randn(8),), dynamic_shapes=spec)
    (problem,) = ep.report.problems
    assert problem.kind == "constraint_violation"
    assert problem.where.lineno == _line_of(NeedsFive.forward, "if x.shape[0] > 4")
    assert "b = Dim('b', min=5)" in problem.fix and "dynamic_shapes = {'x': {0: b}}" in problem.fix
    refined = ep.report.refined_dynamic_shapes["x"][0]
    assert (refined.__name__, refined.min) == ("b", 5)
    (vr,) = ep.range_constraints.values()
    assert vr.lower == 5
    x = torch.randn(11)
    torch.testing.assert_close(ep.module()(x), NeedsFive()(x))


def test_missing_fake_kernel_is_inferred_from_a_real_call_and_reported():
    with pytest.raises(MissingFakeKernelError):
        graphcap.export(UsesCustomOp(), (torch.randn(4, 3),))
    ep = graphcap.draft_export(UsesCustomOp(), (torch.randn(4, 3),))
    (problem,) = ep.report.problems
    assert problem.kind == "missing_fake_kernel"
    assert problem.details["operator"] == "graphcap_draft_test::shifted"
    assert '@torch.library.register_fake("graphcap_draft_test::shifted")' in problem.fix
    assert "float32[4, 3]" in problem.message
    assert problem.where.lineno == _line_of(UsesCustomOp.forward, "shifted(x)")
    x = torch.randn(4, 3)
    torch.testing.assert_close(ep.module()(x), UsesCustomOp()(x))


def test_a_model_export_takes_as_it_is_has_an_empty_report():
    ep = graphcap.draft_export(Plain(), (torch.randn(3),))
    assert ep.report.successful() and ep.report.problems == []
    assert "no problems" in str(ep.report)


def test_report_prints_and_is_data():
    ep = graphcap.draft_export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    text = str(ep.report)
    assert "1 problem(s)" in text and "if n > 2:" in text and "torch._check(n > 2)" in text
    (data,) = ep.report.as_data()
    assert data["kind"] == "data_dependent"
    assert data["where"]["lineno"] == _line_of(BranchOnItem.forward, "if n > 2")
    assert data["details"]["check"] == "torch._check(n > 2)"
    assert ep.report.failures is ep.report.problems


def test_draft_export_leaves_later_exports_without_real_tensors():
    graphcap.draft_export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))
    with pytest.raises(DataDependentError):
        graphcap.export(BranchOnItem(), (torch.randn(8), torch.tensor(5)))


@torch.library.custom_op("graphcap_draft_test::first_half", mutates_args=())
def first_half(x: torch.Tensor) -> torch.Tensor:
    return x[: x.shape[0] // 2].clone()


@first_half.register_fake
def _(x):
    return torch.empty_like(x)  # wrong: the real kernel returns half the rows


class UsesWrongFakeKernel(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_draft_test.first_half(x) + 1


def test_a_fake_kernel_that_disagrees_with_the_real_one_is_reported_and_the_real_metadata_used():
    ep = graphcap.draft_export(UsesWrongFakeKernel(), (torch.randn(6, 2),))
    (problem,) = ep.report.of_kind("assumption")
    assert problem.details["operator"] == "graphcap_draft_test::first_half"
    x = torch.randn(6, 2)
    out = ep.module()(x)
    assert out.shape == (3, 2)
    torch.testing.assert_close(out, UsesWrongFakeKernel()(x))


# --- the report in the order the trace met its problems, and torch's operator profiles ---

@torch.library.custom_op("graphcap_draft_test::pair_sum", mutates_args=())
def pair_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


class CustomOpThenItemThenCustomOp(torch.nn.Module):
    """A kernel-less custom op, a branch on data, then the same op on inputs of another rank."""

    def forward(self, a, b, n, c, d):
        first = torch.ops.graphcap_draft_test.pair_sum(a, b)
        k = n.item()
        if k > 1:
            first = first * k
        return first, torch.ops.graphcap_draft_test.pair_sum(c, d)


def _op_profile_types():
    from torch._library.fake_profile import OpProfile, TensorMetadata
    return OpProfile, TensorMetadata


def _mixed_example():
    return (torch.ones(3, 4), torch.ones(3, 4), torch.tensor(3), torch.ones(2, 3, 4), torch.ones(2, 3, 4))


def test_problems_are_listed_in_the_order_the_trace_met_them():
    from torch.export._draft_export import FailureType  # the names code written against torch compares with
    ep = graphcap.draft_export(CustomOpThenItemThenCustomOp(), _mixed_example())
    kinds = [p.failure_type for p in ep.report.failures]
    assert kinds == [FailureType.MISSING_FAKE_KERNEL, FailureType.DATA_DEPENDENT_ERROR]
    # the second call of the same operator is the same problem, met again
    assert ep.report.failures[0].occurrences == 2


def test_item_before_the_custom_op_is_listed_first():
    class ItemFirst(torch.nn.Module):
        def forward(self, a, n):
            k = n.item()
            if k > 1:
                a = a * k
            return torch.ops.graphcap_draft_test.pair_sum(a, a)

    ep = graphcap.draft_export(ItemFirst(), (torch.ones(3), torch.tensor(2)))
    assert [p.kind for p in ep.report.failures] == ["data_dependent", "missing_fake_kernel"]


def test_op_profiles_are_torchs_profiles_keyed_by_overload_one_per_distinct_call():
    OpProfile, TensorMetadata = _op_profile_types()
    ep = graphcap.draft_export(CustomOpThenItemThenCustomOp(), _mixed_example())
    profiles = ep.report.op_profiles
    assert set(profiles) == {"graphcap_draft_test.pair_sum.default"}
    (calls,) = profiles.values()
    assert isinstance(calls, set) and len(calls) == 2
    assert all(isinstance(p, OpProfile) for p in calls)
    ranks = sorted(p.out_profile.rank for p in calls)
    assert ranks == [2, 3]
    meta = next(p for p in calls if p.out_profile.rank == 2)
    assert meta.args_profile == (TensorMetadata(2, torch.float32, torch.device("cpu"), torch.strided),) * 2
    # the report stays plain data
    assert all(isinstance(s, str) for s in ep.report.as_data()[0]["details"]["profiles"])


def test_op_profiles_let_torch_register_fake_kernels_to_decompose_the_program():
    from torch._library.fake_profile import unsafe_generate_fake_kernels
    ep = graphcap.draft_export(CustomOpThenItemThenCustomOp(), _mixed_example())
    with unsafe_generate_fake_kernels(ep.report.op_profiles):
        decomposed = ep.run_decompositions()
    args = _mixed_example()
    for got, want in zip(decomposed.module()(*args), CustomOpThenItemThenCustomOp()(*args)):
        torch.testing.assert_close(got, want)


@torch.library.custom_op("graphcap_draft_test::three_ways", mutates_args=())
def three_ways(a: torch.Tensor) -> list[torch.Tensor]:
    return [a + 1, a.repeat(1, 3), a.to(torch.float64)]


@three_ways.register_fake
def _(a):
    # right, wrong size (the real one has 3x the columns), wrong dtype
    return [torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)]


def test_each_disagreeing_output_of_a_fake_kernel_is_its_own_problem_with_the_engines_reason():
    from torch.export._draft_export import FailureType

    class M(torch.nn.Module):
        def forward(self, a):
            return torch.ops.graphcap_draft_test.three_ways(a)

    a = torch.randn(2, 5)
    ep = graphcap.draft_export(M(), (a,))
    failures = ep.report.failures
    assert [f.failure_type for f in failures] == [FailureType.MISMATCHED_FAKE_KERNEL] * 2
    reasons = sorted(f.data["reason"] for f in failures)
    assert "float64" in reasons[0] and "float32" in reasons[0]
    assert "5" in reasons[1] and "15" in reasons[1]
    for got, want in zip(ep.module()(a), M()(a)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    assert set(ep.report.op_profiles) == {"graphcap_draft_test.three_ways.default"}


@torch.library.custom_op("graphcap_draft_test::fresh_pair", mutates_args=())
def fresh_pair(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return a * 2, a - 1


@fresh_pair.register_fake
def _(a):
    return a, torch.empty_like(a)  # wrong: returns its input, which the real kernel never does


def test_a_fake_kernel_returning_its_input_is_an_aliasing_problem_and_outputs_are_fresh():
    class M(torch.nn.Module):
        def forward(self, a):
            return torch.ops.graphcap_draft_test.fresh_pair(a)

    a = torch.randn(3)
    ep = graphcap.draft_export(M(), (a,))
    (failure,) = ep.report.failures
    assert "aliasing" in failure.data["reason"]
    for got, want in zip(ep.module()(a), M()(a)):
        torch.testing.assert_close(got, want)
