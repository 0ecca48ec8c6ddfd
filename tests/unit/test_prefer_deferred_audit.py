"""Audit of ``export(..., prefer_deferred_runtime_asserts_over_guards=True)`` against torch.export.

The probe is ``bench/probes/prefer_deferred_audit.py``; docs/torch-suite.md has its table. With the
flag a ``Dim.AUTO`` size the code pins stays a symbol of one size, relations between sizes the spec
does not guarantee are checked when the program runs, and a declared ``Dim`` the code pins or
narrows is still refused. These tests hold each of those where the program meets something else:
a pinned size next to dynamic ones, ``torch.cond``, a value read from data, a derived dim, a
declared ``Dim.DYNAMIC`` (whose refusal names the user's line), ``draft_export``.
"""
from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import graphcap
from conftest import HAVE_SHARED_ZOO, build_zoo
from graphcap.errors import ConstraintViolationError, DynamicSpecError, InputGuardError

FLAG = {"prefer_deferred_runtime_asserts_over_guards": True}


def _ranges(ep) -> list[tuple[str, str]]:
    return sorted((str(v.lower), str(v.upper)) for v in ep.range_constraints.values())


def _roundtrip(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return graphcap.load(buf)


def _stages(ep):
    return {"ep": ep, "decomposed": ep.run_decompositions(), "loaded": _roundtrip(ep)}


class PinnedDynamic(torch.nn.Module):
    def forward(self, a):
        assert a.shape[0] == 3
        return a + 1


class PinnedByWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))

    def forward(self, x):
        return x * self.w


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_dynamic_hint_the_code_pins_names_the_line_and_the_fix(strict):
    with pytest.raises(DynamicSpecError) as caught:
        graphcap.export(PinnedDynamic(), (torch.randn(3, 2),), dynamic_shapes={"a": {0: Dim.DYNAMIC}},
                        strict=strict, **FLAG)
    message = str(caught.value)
    assert "static shape of 3" in message
    assert "assert a.shape[0] == 3" in message  # the user's line, as without the flag
    assert "Dim.STATIC" in message and "Dim.AUTO" in message


def test_a_dynamic_hint_pinned_by_a_weight_names_the_operator_line():
    with pytest.raises(DynamicSpecError) as caught:
        graphcap.export(PinnedByWeight(), (torch.randn(6, 4),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.DYNAMIC}},
                        **FLAG)
    assert "return x * self.w" in str(caught.value)


def test_an_auto_hint_whose_bounds_miss_the_pinned_size_suggests_bounds_that_meet_it():
    with pytest.raises(DynamicSpecError, match=r"Dim.AUTO\(min=3\)"):
        graphcap.export(PinnedDynamic(), (torch.randn(3, 2),), dynamic_shapes={"a": {0: Dim.AUTO(min=4)}}, **FLAG)


def test_sizes_pinned_by_a_weight_stay_symbols_of_one_size_in_every_stage():
    x = torch.randn(6, 4)
    model = PinnedByWeight()
    ep = graphcap.export(model, (x,), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}}, **FLAG)
    assert _ranges(ep) == [("4", "4"), ("6", "6")]
    for stage, prog in _stages(ep).items():
        torch.testing.assert_close(prog.module()(x), model(x), msg=stage)
        for bad in (torch.randn(6, 5), torch.randn(5, 4), torch.randn(1, 4)):  # (1, 4) broadcasts in eager
            with pytest.raises(InputGuardError):
                prog.module()(bad)


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_pinned_size_that_decides_a_cond_keeps_one_branch_and_refuses_other_sizes(strict):
    class M(torch.nn.Module):
        def forward(self, x):
            assert x.shape[0] == 3
            return torch.cond(x.shape[0] > 2, lambda t: t * 2, lambda t: t - 1, (x,))

    x = torch.randn(3, 2)
    ep = graphcap.export(M(), (x,), dynamic_shapes={"x": {0: Dim.AUTO}}, strict=strict, **FLAG)
    assert _ranges(ep) == [("3", "3")]
    for stage, prog in _stages(ep).items():
        torch.testing.assert_close(prog.module()(x), x * 2, msg=stage)
        with pytest.raises(InputGuardError):
            prog.module()(torch.randn(2, 2))  # eager takes the other branch there


def test_a_pinned_size_bounds_a_value_read_from_data():
    class M(torch.nn.Module):
        def forward(self, x, n):
            assert x.shape[0] == 3
            k = n.item()
            torch._check(k >= 0)
            torch._check(k < x.shape[0])
            return x[k] + 1

    x = torch.randn(3, 3)
    ep = graphcap.export(M(), (x, torch.tensor(2)), dynamic_shapes={"x": {0: Dim.AUTO}, "n": None}, **FLAG)
    assert _ranges(ep) == [("0", "2"), ("3", "3")]
    for stage, prog in _stages(ep).items():
        for k in (0, 2):
            torch.testing.assert_close(prog.module()(x, torch.tensor(k)), x[k] + 1, msg=stage)
        with pytest.raises((InputGuardError, RuntimeError)):
            prog.module()(x, torch.tensor(3))  # the data's own check, before indexing
        with pytest.raises(InputGuardError):
            prog.module()(torch.randn(4, 3), torch.tensor(1))


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_relation_a_branch_took_is_checked_where_torch_computes_the_other_branch(strict):
    # torch.export with the flag: its module() gives cat's rows for (8, 2), (3, 2), where eager returns x
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.cat([x, y]) if x.shape[0] == y.shape[0] * 2 else x

    ep = graphcap.export(M(), (torch.randn(6, 2), torch.randn(3, 2)),
                         dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}}, strict=strict, **FLAG)
    for stage, prog in _stages(ep).items():
        x, y = torch.randn(10, 2), torch.randn(5, 2)
        torch.testing.assert_close(prog.module()(x, y), torch.cat([x, y]), msg=stage)
        with pytest.raises((InputGuardError, RuntimeError)):
            prog.module()(torch.randn(8, 2), torch.randn(3, 2))


def test_a_product_of_declared_dims_is_checked_when_run_where_torch_refuses_the_export():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return x.reshape(-1) + y

    spec = {"x": {0: Dim("a"), 1: Dim("b")}, "y": {0: Dim("c")}}
    ep = graphcap.export(M(), (torch.randn(2, 3), torch.randn(6)), dynamic_shapes=spec, **FLAG)
    for stage, prog in _stages(ep).items():
        x, y = torch.randn(4, 5), torch.randn(20)
        torch.testing.assert_close(prog.module()(x, y), x.reshape(-1) + y, msg=stage)
        x1, y1 = torch.randn(1, 1), torch.randn(1)
        torch.testing.assert_close(prog.module()(x1, y1), x1.reshape(-1) + y1, msg=stage)
        with pytest.raises((InputGuardError, RuntimeError)):
            prog.module()(torch.randn(4, 5), torch.randn(21))


def test_a_derived_dim_next_to_a_pinned_auto_dim():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return x.repeat(2, 1) + y

    n = Dim("n")
    x, y = torch.randn(3, 2), torch.randn(6, 2)
    ep = graphcap.export(M(), (x, y), dynamic_shapes={"x": {0: n, 1: Dim.AUTO}, "y": {0: 2 * n, 1: Dim.AUTO}},
                         **FLAG)
    for prog in _stages(ep).values():
        x7, y7 = torch.randn(7, 2), torch.randn(14, 2)
        torch.testing.assert_close(prog.module()(x7, y7), x7.repeat(2, 1) + y7)
        with pytest.raises(InputGuardError):
            prog.module()(torch.randn(4, 2), torch.randn(7, 2))


def test_a_declared_dim_narrowed_by_a_check_is_refused_with_the_flag_in_draft_it_is_refined():
    class M(torch.nn.Module):
        def forward(self, x):
            torch._check(x.shape[0] > 4)
            return x * 2

    spec = {"x": {0: Dim("n")}}
    with pytest.raises(ConstraintViolationError, match="min=5"):
        graphcap.export(M(), (torch.randn(6, 2),), dynamic_shapes=spec, **FLAG)
    ep = graphcap.draft_export(M(), (torch.randn(6, 2),), dynamic_shapes=spec, **FLAG)
    assert _ranges(ep) == [("5", "int_oo")]
    with pytest.raises(InputGuardError):
        ep.module()(torch.randn(4, 2))


def test_draft_with_the_flag_keeps_a_weight_pinned_dim_a_symbol_next_to_a_dynamic_batch():
    lin = torch.nn.Linear(8, 5)
    spec = {"input": {0: Dim("b"), 1: Dim("f")}}
    ep = graphcap.draft_export(lin, (torch.randn(4, 8),), dynamic_shapes=spec, **FLAG)
    assert _ranges(ep) == [("0", "int_oo"), ("8", "8")]
    x = torch.randn(7, 8)
    torch.testing.assert_close(ep.module()(x), lin(x))
    with pytest.raises(InputGuardError):
        ep.module()(torch.randn(7, 9))


@pytest.mark.skipif(not HAVE_SHARED_ZOO, reason="builds GPT-2 from ../shared/zoo")
def test_gpt2_with_every_size_automatic_exports_with_the_flag():
    # the size-0 check of the batch tried GPT-2's view assert Eq(batch*seq // batch', seq') at 0:
    # ZeroDivisionError from the export, where torch.export exports
    built = build_zoo("hf_gpt2")
    spec = {name: {d: Dim.AUTO for d in dims} for name, dims in built.dynamic_shapes.items()}
    ep = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=spec, **FLAG)
    with torch.no_grad():
        for prog in (ep, _roundtrip(ep)):
            for kwargs in (built.kwargs, built.kwargs2):
                want = built.model(**kwargs).last_hidden_state
                torch.testing.assert_close(prog.module()(**kwargs).last_hidden_state, want, atol=1e-4, rtol=1e-4)


class Broadcast(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("flag", [False, True], ids=["guards", "deferred"])
@pytest.mark.parametrize("x_spec", [None, {0: Dim.AUTO}, {0: Dim("b")}], ids=["static_x", "auto_x", "dim_x"])
def test_a_size_one_example_broadcast_against_another_input_exports_non_strict(flag, x_spec):
    # non-strict read y's size 1 as a general size: the trace failed ("The size of tensor a must match"),
    # or with the flag asserted y's size equal to x's, and module() refused the example itself
    x, y = torch.randn(3, 2), torch.randn(1, 2)
    ep = graphcap.export(Broadcast(), (x, y), dynamic_shapes={"x": x_spec, "y": {0: Dim.AUTO}},
                         prefer_deferred_runtime_asserts_over_guards=flag)
    theirs = graphcap.export(Broadcast(), (x, y), dynamic_shapes={"x": x_spec, "y": {0: Dim.AUTO}}, strict=True,
                             prefer_deferred_runtime_asserts_over_guards=flag)
    assert _ranges(ep) == _ranges(theirs)  # the strict front end reads it so already
    for prog in _stages(ep).values():
        torch.testing.assert_close(prog.module()(x, y), x + y)
        if x_spec is not None:
            x5 = torch.randn(5, 2)
            torch.testing.assert_close(prog.module()(x5, y), x5 + y)
        with pytest.raises(InputGuardError):
            prog.module()(x, torch.randn(3, 2))  # y is 1 in this program (torch.export: the same)


@pytest.mark.parametrize("flag", [False, True], ids=["guards", "deferred"])
@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_size_one_example_a_declared_dim_needs_is_refused_with_the_size_as_its_fix(flag, strict):
    # non-strict with the flag said "the program needs 0 <= n <= 1", fix max=1: the one-size range
    # the broadcast left was read as torch's own 0/1 layout assumption, which keeps 0
    with pytest.raises(ConstraintViolationError) as caught:
        graphcap.export(Broadcast(), (torch.randn(3, 2), torch.randn(1, 2)),
                        dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim("n")}}, strict=strict,
                        prefer_deferred_runtime_asserts_over_guards=flag)
    assert str(caught.value).split("Suggested fixes:")[1].split() == ["n", "=", "1"]


def test_a_model_that_fails_at_any_size_reports_its_first_error_not_the_second_trace():
    class Fails(torch.nn.Module):
        def forward(self, x, y):
            return x @ y  # (3, 2) @ (1, 2): wrong for every size

    with pytest.raises(Exception) as caught:
        graphcap.export(Fails(), (torch.randn(3, 2), torch.randn(1, 2)),
                        dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}})
    assert "While handling" not in str(caught.getrepr())  # one error, its own cause chain only
    assert "During handling of the above exception" not in str(caught.getrepr())
    assert "test_prefer_deferred_audit.py" in str(caught.value)  # the user's line
