"""Torch lines audit (bench/probes/torch_lines_audit.py; docs/torch-suite.md).

What graphcap gives on the older torch lines it supports. The defects found there, each tested
from the behaviour, on every line:

- ``torch.compile`` of ``ep.module()`` or of an unflattened module checks its inputs on torch 2.10
  and 2.11 too: there dynamo answers ``torch.compiler.is_exporting()`` with True under any compile,
  which had left the checks out of the compiled code (wrong numbers at another size); the module
  reads the exporting flag itself.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import InputGuardError
from graphcap.torch_private.dynamo import exporting_now


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
    assert torch.compiler.is_exporting() is False and exporting_now() is False
    assert _refusals(module, [((_x(7),), {}, Halves())]) == ["refused"]  # the eager module still checks


def test_compiled_unflattened_module_refuses_a_size_past_its_range():
    torch.compiler.reset()
    ep = graphcap.export(Halves(), (_x(4),), dynamic_shapes=({0: Dim("b", min=2, max=6)},))
    compiled = torch.compile(graphcap.unflatten(ep), backend="eager")
    assert _refusals(compiled, [((_x(n),), {}, Halves()) for n in (4, 8)]) == [True, "refused"]


class _Asks(torch.nn.Module):
    def forward(self, x):
        return x + 1 if exporting_now() else x - 1


@pytest.mark.parametrize("strict", [False, True])
def test_exporting_now_reads_true_while_a_graphcap_export_records_and_false_under_compile(strict):
    ep = graphcap.export(_Asks(), (_x(2),), strict=strict)
    torch.testing.assert_close(ep.module()(_x(2)), _x(2) + 1)
    assert exporting_now() is False
    torch.compiler.reset()
    torch.testing.assert_close(torch.compile(_Asks(), backend="eager")(_x(2)), _x(2) - 1)  # no export
