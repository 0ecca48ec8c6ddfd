"""torch's own ExportDB examples, exported with graphcap and run against eager.

ExportDB (``torch._export.db.examples``) is torch.export's catalogue of Python
constructs an exporter meets in practice. This file takes the examples that
are in scope for static, non-strict export — none tagged for dynamic shapes,
dynamic values or the control-flow operators, none with a ``dynamic_shapes``
spec (tests/e2e/test_exportdb_dynamic.py and test_exportdb_control_flow.py
cover those) — and checks that
``graphcap.export(...).module()`` computes what the eager model computes,
including writes to the inputs. An example graphcap cannot export yet is an
explicit ``xfail(strict=True)`` whose reason names the cause, so it can
neither be skipped silently nor stay marked once fixed.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch._export.db.case import SupportLevel
from torch._export.db.examples import all_examples

import graphcap
from conftest import assert_same_outputs, run_eager_and_exported

# Tags of examples that need dynamic shapes, data-dependent values or the
# control-flow operators: other issues.
OUT_OF_SCOPE_TAGS = frozenset({"torch.cond", "torch.map", "torch.dynamic-shape", "torch.dynamic-value"})

# Examples torch.export itself marks NOT_SUPPORTED_YET that graphcap exports
# correctly. Only listed after checking; an entry must stay NOT_SUPPORTED_YET
# in torch (checked below) or it is no longer a win to claim.
GRAPHCAP_ONLY: frozenset[str] = frozenset()

# Examples graphcap cannot export yet: name → the root cause in graphcap and the
# fix, shown as the xfail reason. Empty: every in-scope example passes.
KNOWN_FAILURES: dict[str, str] = {}


def _in_scope(example) -> bool:
    if example.tags & OUT_OF_SCOPE_TAGS or example.dynamic_shapes is not None:
        return False
    if example.support_level is SupportLevel.SUPPORTED:
        return True
    return example.name in GRAPHCAP_ONLY


def _cases():
    examples = all_examples()
    params = []
    for name, example in examples.items():
        if not _in_scope(example):
            continue
        marks = []
        if name in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name]))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def test_selection_is_not_empty_and_known_failures_are_in_it():
    names = {p.values[0] for p in _cases()}
    assert len(names) >= 15, sorted(names)
    assert set(KNOWN_FAILURES) <= names, "a known failure left the selection: drop its entry"
    examples = all_examples()
    for name in GRAPHCAP_ONLY:
        assert examples[name].support_level is SupportLevel.NOT_SUPPORTED_YET, name


@pytest.mark.parametrize("name", _cases())
def test_exportdb_example_matches_eager(name):
    example = all_examples()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(example.model, example.example_args, example.example_kwargs)
    ep.validate()
    assert "ExportedProgram:" in str(ep)

    _check_against_eager(example.model, ep, example.example_args, example.example_kwargs)
    # other values of the same shapes: the program is not specialized on the example's data
    fresh = torch.utils._pytree.tree_map(
        lambda t: torch.randn_like(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
        (example.example_args, example.example_kwargs))
    _check_against_eager(example.model, ep, *fresh)


def _check_against_eager(model, ep, args, kwargs):
    """Eager and module() each on their own copy of the model and of the inputs."""
    expected, got, inputs_eager, inputs_exp = run_eager_and_exported(model, ep, args, kwargs, with_inputs=True)
    assert_same_outputs(expected, got)
    # writes to the inputs (user_input_mutation) are reproduced by module()
    assert_same_outputs(inputs_eager, inputs_exp)
