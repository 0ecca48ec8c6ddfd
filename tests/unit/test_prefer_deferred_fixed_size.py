"""``prefer_deferred_runtime_asserts_over_guards=True`` when the program fixes an input size.

With the flag, the shape engine keeps a size the code pins to one value (``assert a.shape[0] == 3``,
an add with a (3, 3) constant) as a symbol whose range is that value, instead of replacing it by
the constant; ``module()`` checks the range before computing. torch.export gives the same program,
and ``draft_export(..., prefer_deferred_runtime_asserts_over_guards=True)`` keeps it too. A declared
``Dim`` pinned so is still a constraint violation, whose suggested fix is the size itself
(``a0 = 3``: a ``Dim`` takes more than one value, so ``Dim('a0', min=3, max=3)`` is no fix).
"""
from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import graphcap
from graphcap.errors import ConstraintViolationError, DynamicSpecError, InputGuardError


class PinnedByAssert(torch.nn.Module):
    def forward(self, a):
        assert a.shape[0] == 3
        return a * a + 1


class PinnedByOperator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(9.0).reshape(3, 3))

    def forward(self, a):
        return (a + self.table).sum(0)


class NarrowedByCheck(torch.nn.Module):
    def forward(self, a):
        torch._check(a.shape[0] > 4)
        return a * 2


def _ranges(ep) -> list[tuple[str, str]]:
    return sorted((str(v.lower), str(v.upper)) for v in ep.range_constraints.values())


def _placeholder_sizes(ep) -> list[str]:
    return [str(n.meta["val"].shape[0]) for n in ep.graph.nodes
            if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
            and n.meta["val"].dim() == 2 and n.name == "a"]


@pytest.mark.parametrize("model", [PinnedByAssert, PinnedByOperator], ids=["assert", "operator"])
@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_pinned_auto_dim_stays_a_symbol_of_one_size(model, strict):
    x = torch.randn(3, 3)
    ep = graphcap.export(model(), (x,), dynamic_shapes={"a": {0: Dim.AUTO}}, strict=strict,
                         prefer_deferred_runtime_asserts_over_guards=True)
    theirs = torch.export.export(model(), (x,), dynamic_shapes={"a": {0: Dim.AUTO}}, strict=strict,
                                 prefer_deferred_runtime_asserts_over_guards=True)
    assert _ranges(ep) == _ranges(theirs) == [("3", "3")]
    assert _placeholder_sizes(ep) and not _placeholder_sizes(ep)[0].isdigit()  # a symbol, not 3
    torch.testing.assert_close(ep.module()(x), model()(x))
    for size, words in ((4, "<= 3"), (2, ">= 3")):
        with pytest.raises(InputGuardError, match=f"a.size\\(\\)\\[0\\] {words}"):
            ep.module()(torch.randn(size, 3))


def test_without_the_flag_a_pinned_auto_dim_is_static():
    ep = graphcap.export(PinnedByAssert(), (torch.randn(3, 3),), dynamic_shapes={"a": {0: Dim.AUTO}})
    assert ep.range_constraints == {}
    assert _placeholder_sizes(ep) == ["3"]
    with pytest.raises(InputGuardError, match=r"a.size\(\)\[0\] == 3"):
        ep.module()(torch.randn(4, 3))


def test_the_one_size_symbol_survives_decomposition_and_save_load():
    x = torch.randn(3, 3)
    ep = graphcap.export(PinnedByOperator(), (x,), dynamic_shapes={"a": {0: Dim.AUTO}},
                         prefer_deferred_runtime_asserts_over_guards=True).run_decompositions()
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    assert _ranges(loaded) == [("3", "3")]
    torch.testing.assert_close(loaded.module()(x), PinnedByOperator()(x))
    with pytest.raises(InputGuardError, match=r"<= 3"):
        loaded.module()(torch.randn(5, 3))


def test_a_pinned_named_dim_is_refused_with_the_size_as_its_fix():
    spec = {"a": {0: Dim("a0")}}
    with pytest.raises(ConstraintViolationError) as caught:
        graphcap.export(PinnedByAssert(), (torch.randn(3, 3),), dynamic_shapes=spec,
                        prefer_deferred_runtime_asserts_over_guards=True)
    message = str(caught.value)
    assert "a0 = 3" in message.split("Suggested fixes:")[1]
    assert "max=3" not in message
    # both refine helpers apply it
    assert graphcap.refine_dynamic_shapes_from_suggested_fixes(message, spec) == {"a": {0: 3}}
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes
    assert refine_dynamic_shapes_from_suggested_fixes(message, spec) == {"a": {0: 3}}


def test_two_checks_that_leave_one_size_suggest_that_size():
    class Boxed(torch.nn.Module):
        def forward(self, a):
            torch._check(a.shape[0] >= 3)
            torch._check(a.shape[0] <= 3)
            return a + 1

    with pytest.raises(ConstraintViolationError) as caught:
        graphcap.export(Boxed(), (torch.randn(3, 2),), dynamic_shapes={"a": {0: Dim("n")}})
    fixes = str(caught.value).split("Suggested fixes:")[1]
    assert "n = 3" in fixes and "Dim(" not in fixes


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_check_on_input_sizes_narrowing_a_named_dim_is_still_a_violation(strict):
    """With the flag the shape engine defers the check to a runtime assert; that assert stands for a
    guard on the input sizes, so it is reported as one (as torch.export does and graphcap does
    without the flag), not read as an assert on data that leaves the declared range alone."""
    with pytest.raises(ConstraintViolationError, match=r"n = Dim\('n', min=5\)"):
        graphcap.export(NarrowedByCheck(), (torch.randn(6, 2),), dynamic_shapes={"a": {0: Dim("n")}},
                        strict=strict, prefer_deferred_runtime_asserts_over_guards=True)
    ep = graphcap.export(NarrowedByCheck(), (torch.randn(6, 2),), dynamic_shapes={"a": {0: Dim.AUTO}},
                         prefer_deferred_runtime_asserts_over_guards=True)
    assert _ranges(ep) == [("5", "int_oo")]
    with pytest.raises(InputGuardError):
        ep.module()(torch.randn(4, 2))


def test_a_pinned_dynamic_hint_is_refused_as_torch_refuses_it():
    with pytest.raises(DynamicSpecError) as caught:
        graphcap.export(PinnedByAssert(), (torch.randn(3, 3),), dynamic_shapes={"a": {0: Dim.DYNAMIC}},
                        prefer_deferred_runtime_asserts_over_guards=True)
    assert isinstance(caught.value, ValueError)
    assert "Dim.DYNAMIC" in str(caught.value)


def test_draft_with_the_flag_keeps_the_symbol_and_says_how_to_export_it():
    x = torch.randn(3, 3)
    ep = graphcap.draft_export(PinnedByAssert(), (x,), dynamic_shapes={"a": {0: Dim("a0")}},
                               prefer_deferred_runtime_asserts_over_guards=True)
    assert _ranges(ep) == [("3", "3")]
    [problem] = ep.report.problems
    assert "Dim.AUTO" in problem.fix and "prefer_deferred_runtime_asserts_over_guards=True" in problem.fix
    assert ep.report.refined_dynamic_shapes == {"a": {0: graphcap.Dim.AUTO}}
    torch.testing.assert_close(ep.module()(x), PinnedByAssert()(x))
    with pytest.raises(InputGuardError, match=r"a.size\(\)\[0\] <= 3"):
        ep.module()(torch.randn(4, 3))
    # the fix, pasted, gives the same program
    again = graphcap.export(PinnedByAssert(), (x,), dynamic_shapes=ep.report.refined_dynamic_shapes,
                            prefer_deferred_runtime_asserts_over_guards=True)
    assert _ranges(again) == [("3", "3")]


def test_draft_without_the_flag_pins_the_size():
    ep = graphcap.draft_export(PinnedByAssert(), (torch.randn(3, 3),), dynamic_shapes={"a": {0: Dim("a0")}})
    assert ep.range_constraints == {}
    assert ep.report.refined_dynamic_shapes == {"a": {0: 3}}


def test_draft_keeps_the_bounds_a_user_gave_when_it_falls_back_to_auto():
    from graphcap.capture.draft_spec import _as_auto
    assert _as_auto(Dim("b")) == graphcap.Dim.AUTO
    bounded = _as_auto(Dim("b", min=2, max=64))
    assert (bounded.min, bounded.max) == (2, 64)
