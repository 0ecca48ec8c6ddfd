"""torch's ExportDB control-flow and custom-operator examples, exported with graphcap.

Every example tagged ``torch.cond``, ``torch.map`` or ``torch.operator`` (and
``autograd_function``) is exported as ExportDB gives it and run against
eager; the examples whose predicate is a shape are exported again with that
dim dynamic and run on sizes that take each branch. The number of
control-flow nodes is compared with torch.export's. Last, the zoo's
``hf_llama``, whose rotary embedding runs under ``@torch.no_grad()``, keeps a
``wrap_with_set_grad_enabled`` region and matches eager.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch._export.db.examples import all_examples

import graphcap
from conftest import TORCH_LINE, assert_same_outputs, build_zoo, run_eager_and_exported

TAGS = frozenset({"torch.cond", "torch.map", "torch.operator"})
EXTRA = frozenset({"autograd_function"})
CONTROL_FLOW_OPS = ("cond", "map_impl", "while_loop", "scan")

# Known failures, with their root cause (reported to the lead).
KNOWN_FAILURES: dict[str, str] = {}


def _selected() -> list[str]:
    return sorted(n for n, e in all_examples().items() if e.tags & TAGS or n in EXTRA)


def _count_control_flow(gm: torch.fx.GraphModule) -> int:
    n = 0
    for mod in gm.modules():
        if isinstance(mod, torch.fx.GraphModule):
            n += sum(1 for node in mod.graph.nodes if node.op == "call_function"
                     and isinstance(node.target, torch._ops.HigherOrderOperator)
                     and node.target.name() in CONTROL_FLOW_OPS)
    return n


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _compare(model, ep, args, kwargs=None):
    kwargs = kwargs or {}
    eager_model = copy.deepcopy(model)
    a1, k1 = copy.deepcopy((args, kwargs))
    a2, k2 = copy.deepcopy((args, kwargs))
    with torch.no_grad():
        expected = eager_model(*a1, **k1)
        got = ep.module()(*a2, **k2)
    assert_same_outputs(expected, got)


def test_selection_covers_the_control_flow_examples():
    names = _selected()
    assert {"cond_predicate", "cond_operands", "dynamic_shape_map", "unsupported_operator",
            "autograd_function"} <= set(names)
    assert set(KNOWN_FAILURES) <= set(names)


def _params():
    out = []
    for name in _selected():
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name])] if name in KNOWN_FAILURES else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _params())
def test_exportdb_control_flow_example_matches_eager_and_torch(name):
    example = all_examples()[name]
    args, kwargs = example.example_args, example.example_kwargs
    ep = _quiet(graphcap.export, example.model, args, kwargs, dynamic_shapes=example.dynamic_shapes)
    ep.validate()
    reference = _quiet(torch.export.export, example.model, args, kwargs, dynamic_shapes=example.dynamic_shapes)
    assert _count_control_flow(ep.graph_module) == _count_control_flow(reference.graph_module)
    _compare(example.model, ep, args, kwargs)


# name → (dynamic_shapes built from graphcap.Dim, inputs that take each branch)
def _dynamic_variants():
    Dim = graphcap.Dim
    return {
        "cond_predicate": ({"x": {2: Dim("d", min=2, max=64)}},
                           [(torch.randn(6, 4, k),) for k in (3, 10, 11, 40)]),
        "cond_branch_class_method": ({"x": {0: Dim("n", min=2, max=16)}},
                                     [(torch.randn(k),) for k in (2, 3, 16)]),
        "cond_branch_nonlocal_variables": ({"x": {0: Dim("n", min=2, max=16)}},
                                           [(torch.randn(k),) for k in (2, 5, 6, 16)]),
        "cond_branch_nested_function": ({"x": {0: Dim("n", min=2, max=32)}},
                                        [(torch.randn(k),) for k in (2, 9, 10, 32)]),
        "cond_operands": ({"x": {0: Dim("n", min=2, max=64)}, "y": None},
                          [(torch.randn(k, 2), torch.randn(2)) for k in (2, 3, 64)]),
        "dynamic_shape_map": ({"xs": {0: Dim("n", min=2, max=64)}, "y": None},
                              [(torch.randn(k, 2), torch.randn(2)) for k in (2, 7, 64)]),
        "cond_closed_over_variable": (None, [(torch.tensor(b), torch.randn(3, 2)) for b in (True, False)]),
    }


# map over a dim of dynamic size is refused on torch 2.10 (tests/unit/test_map_dynamic_dim_release.py)
_NEEDS_TORCH_2_11 = pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_NEEDS_TORCH_2_11) if n == "dynamic_shape_map" else n
                                  for n in sorted(_dynamic_variants())])
def test_exportdb_cond_predicates_kept_dynamic(name):
    example = all_examples()[name]
    spec, inputs = _dynamic_variants()[name]
    ep = _quiet(graphcap.export, example.model, example.example_args, dynamic_shapes=spec)
    assert _count_control_flow(ep.graph_module) >= 1  # not specialized to the example's branch
    if spec is not None:
        assert ep.range_constraints
    for args in inputs:
        _compare(example.model, ep, args)


def test_hf_llama_keeps_its_no_grad_rotary_embedding():
    built = build_zoo("hf_llama")
    ep = _quiet(graphcap.export, built.model, built.args, built.kwargs)
    regions = [n for n in ep.graph.nodes if n.op == "call_function"
               and n.target is torch.ops.higher_order.wrap_with_set_grad_enabled]
    assert regions and all(n.args[0] is False for n in regions)
    expected, got = run_eager_and_exported(built.model, ep, built.args, built.kwargs)
    assert_same_outputs(expected, got)
    # with grad on, what requires grad is the same as in eager
    with torch.enable_grad():
        got = ep.module()(*built.args, **built.kwargs)
        expected = built.model(*built.args, **built.kwargs)
    flags = [[t.requires_grad for t in torch.utils._pytree.tree_leaves(o) if isinstance(t, torch.Tensor)]
             for o in (expected, got)]
    assert flags[0] == flags[1]
