"""Torch lines audit (bench/probes/torch_lines_audit.py; docs/torch-suite.md).

What graphcap gives on the older torch lines it supports. The defects found there, each tested
from the behaviour, on every line:

- ``torch.compile`` of ``ep.module()`` or of an unflattened module checks its inputs on torch 2.10
  and 2.11 too: there dynamo answers ``torch.compiler.is_exporting()`` with True under any compile,
  which had left the checks out of the compiled code (wrong numbers at another size); the module
  no longer asks it;
- a strict export of ``ep.module()`` (torch's too) traces the same checks, so a spec reaching past
  the program's ranges is refused as for torch's own module, not exported into wrong numbers;
- ``torch.compile`` of a dynamic program's unflattened module ran (its input checker, made on the
  first call, was traced by dynamo: ``TypeError: unhashable type: non-nested SymInt``);
- torch 2.10-2.13's cond refusing a branch output whose strides hold ``Max(1, ...)`` (torch.export
  refuses the same model there) is explained: the torch release that accepts it, the static-dim
  fix; it was a ``TraceError`` asking whether the example inputs were valid.
"""
from __future__ import annotations

import pytest
import torch
import torch.export as te

import graphcap
from conftest import TORCH_LINE
from graphcap import Dim
from graphcap.errors import ConstraintViolationError, InputGuardError, StrictCaptureError, UnsupportedError


def _x(n, width=4):
    return torch.arange(n * width, dtype=torch.float32).reshape(n, width) / 7


class Halves(torch.nn.Module):
    """A branch on the size: a program keeps one side."""

    def forward(self, x):
        return x * 2 if x.shape[0] > 1 else x / 2


class Keyworded(torch.nn.Module):
    def forward(self, x, *, scale):
        return x * scale.sum() if x.shape[1] > 3 else x - scale.sum()


def _refusals(fn, calls):
    out = []
    for args, kwargs, model in calls:
        try:
            out.append(torch.allclose(fn(*args, **kwargs), model(*args, **kwargs)))
        except InputGuardError:
            out.append("refused")
    return out


def test_compiled_module_of_a_program_with_a_keyword_input_refuses_another_width():
    torch.compiler.reset()
    ep = graphcap.export(Keyworded(), (_x(2),), {"scale": torch.ones(3)})
    compiled = torch.compile(ep.module(), backend="eager")
    calls = [((_x(2),), {"scale": torch.ones(3)}, Keyworded()),
             ((_x(2, 3),), {"scale": torch.ones(3)}, Keyworded()),
             ((_x(2),), {"scale": torch.ones(4)}, Keyworded())]
    assert _refusals(compiled, calls) == [True, "refused", "refused"]


def test_compiled_module_checks_after_a_valid_call_compiled_first_and_leaves_no_flag_on():
    torch.compiler.reset()
    module = graphcap.export(Halves(), (_x(4),), dynamic_shapes=({0: Dim("b", min=2, max=6)},)).module()
    compiled = torch.compile(module, backend="eager", dynamic=True)
    calls = [((_x(n),), {}, Halves()) for n in (4, 6, 2, 7, 1)]
    assert _refusals(compiled, calls) == [True, True, True, "refused", "refused"]  # 1 takes the other side
    assert torch.compiler.is_exporting() is False
    assert _refusals(module, [((_x(7),), {}, Halves())]) == ["refused"]  # the eager module still checks


def test_compiled_unflattened_module_refuses_a_size_past_its_range():
    torch.compiler.reset()
    ep = graphcap.export(Halves(), (_x(4),), dynamic_shapes=({0: Dim("b", min=2, max=6)},))
    compiled = torch.compile(graphcap.unflatten(ep), backend="eager")
    assert _refusals(compiled, [((_x(n),), {}, Halves()) for n in (4, 8)]) == [True, "refused"]


def test_torch_strict_export_of_module_is_refused_past_the_programs_range_as_for_torchs_module():
    """The checks were left out of a strict export of module() (is_exporting() answered True): torch's
    strict export of a static program's module with a dynamic spec gave a program with the other
    branch's numbers, where torch's own module is refused."""
    static = graphcap.export(Halves(), (_x(4),)).module()
    with pytest.raises(Exception, match="Constraints violated"):  # torch's UserError, as for its own module
        te.export(static, (_x(4),), dynamic_shapes=({0: te.Dim("n", min=1, max=8)},), strict=True)
    ranged = graphcap.export(Halves(), (_x(4),), dynamic_shapes=({0: Dim("b", min=2, max=6)},)).module()
    with pytest.raises(Exception, match="Constraints violated"):
        te.export(ranged, (_x(4),), dynamic_shapes=({0: te.Dim("n", min=2, max=16)},), strict=True)
    inside = te.export(ranged, (_x(4),), dynamic_shapes=({0: te.Dim("n", min=3, max=5)},), strict=True)
    torch.testing.assert_close(inside.module()(_x(5)), Halves()(_x(5)))


@pytest.mark.parametrize("strict", [False, True])
def test_graphcap_re_export_of_module_keeps_a_narrower_spec_and_refuses_a_wider_one(strict):
    ranged = graphcap.export(Halves(), (_x(4),), dynamic_shapes=({0: Dim("b", min=2, max=6)},)).module()
    again = graphcap.export(ranged, (_x(4),), dynamic_shapes=({0: Dim("n", min=3, max=5)},), strict=strict)
    assert [str(r) for r in again.range_constraints.values()] == ["VR[3, 5]"]
    torch.testing.assert_close(again.module()(_x(3)), Halves()(_x(3)))
    with pytest.raises(ConstraintViolationError):
        graphcap.export(ranged, (_x(4),), dynamic_shapes=({0: Dim("n", min=1, max=8)},), strict=strict)


class _ShrinkInABranch(torch.nn.Module):
    def forward(self, x, flag):
        def shrink(x):
            return torch.nn.functional.interpolate(x, scale_factor=0.5, mode="nearest")

        def blur(x):
            return torch.nn.functional.avg_pool2d(x, 2)

        return torch.cond(flag.sum() > 0, shrink, blur, (x,))


@pytest.mark.skipif(TORCH_LINE >= (2, 14), reason="torch 2.14 on: cond accepts outputs whose strides hold Max(1, ...)")
@pytest.mark.parametrize("strict", [False, True])
def test_cond_refusing_an_output_it_cannot_tell_dense_names_the_torch_release_and_the_static_fix(strict):
    w = Dim("w", min=2, max=12)
    x = torch.randn(1, 2, 8, 8)
    with pytest.raises(StrictCaptureError if strict else UnsupportedError) as caught:
        graphcap.export(_ShrinkInABranch(), (x, torch.ones(1)), dynamic_shapes={"x": {3: w}, "flag": None},
                        strict=strict)
    text = str(caught.value)
    assert "torch.cond could not be captured" in text and "Max(1, ...)" in text
    assert "torch>=2.14" in text and "static in dynamic_shapes" in text
    assert "return torch.cond(flag.sum() > 0, shrink, blur, (x,))" in text  # the user's line
    static = graphcap.export(_ShrinkInABranch(), (x, torch.ones(1)), strict=strict)  # the fix given
    for flag in (torch.ones(1), -torch.ones(1)):
        torch.testing.assert_close(static.module()(x, flag), _ShrinkInABranch()(x, flag))
