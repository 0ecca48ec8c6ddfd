"""torch's ExportDB dynamic-shape and dynamic-value examples, exported by graphcap.

The examples are those with a ``dynamic_shapes`` spec or the
``torch.dynamic-shape`` / ``torch.dynamic-value`` tags that do not need
``torch.cond`` / ``torch.map``. Each exports, matches eager on its example
inputs, and — where it has a spec — on inputs with other sizes along the
dynamic dims; torch.export's own verdict on the example is the reference.
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from conftest import assert_same_outputs


def _examples():
    from torch._export.db.examples import all_examples
    out = {}
    for name, case in all_examples().items():
        dynamic = case.dynamic_shapes is not None or {"torch.dynamic-shape", "torch.dynamic-value"} & set(case.tags)
        if dynamic and not {"torch.cond", "torch.map"} & set(case.tags):
            out[name] = case
    return out


EXAMPLES = _examples()


def _grow(args, dynamic_shapes):
    """The example args with every dynamic dim one larger."""
    if dynamic_shapes is None:
        return args
    specs = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else list(dynamic_shapes)
    out = []
    for a, spec in zip(args, specs):
        if isinstance(a, torch.Tensor) and spec:
            shape = list(a.shape)
            for d in spec:
                shape[d] += 1
            a = torch.randn(shape, dtype=a.dtype) if a.is_floating_point() else torch.ones(shape, dtype=a.dtype)
        out.append(a)
    return tuple(out)


def test_selection_is_not_empty():
    assert {"scalar_output", "dynamic_shape_slicing", "constrain_as_size_example"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_exportdb_dynamic_example(name):
    case = EXAMPLES[name]
    model, args, kwargs = case.model, case.example_args, case.example_kwargs
    try:
        torch.export.export(copy.deepcopy(model), args, kwargs, dynamic_shapes=case.dynamic_shapes)
        torch_ok = True
    except Exception:  # torch's verdict is only the reference
        torch_ok = False
    try:
        ep = graphcap.export(model, args, kwargs, dynamic_shapes=case.dynamic_shapes)
    except graphcap.GraphcapError as e:
        assert not torch_ok, f"torch.export exports {name}, graphcap refuses it:\n{e}"
        return
    for inputs in {id(args): args, 0: _grow(args, case.dynamic_shapes)}.values():
        with torch.no_grad():
            expected = model(*copy.deepcopy(inputs), **kwargs)
            got = ep.module()(*copy.deepcopy(inputs), **kwargs)
        assert_same_outputs(expected, got)


def test_dynamic_shape_round_exports_and_matches(tmp_path):
    """torch.export refuses round() on a dynamic size; graphcap records it, runs it, saves it."""
    case = EXAMPLES["dynamic_shape_round"]
    ep = graphcap.export(case.model, case.example_args, dynamic_shapes=case.dynamic_shapes)
    assert any(n.target is round for n in ep.graph.nodes)
    graphcap.save(ep, tmp_path / "round.pt2")
    ep = graphcap.load(tmp_path / "round.pt2")
    lower = int(next(iter(ep.range_constraints.values())).lower)
    for n in sorted({max(lower, 2), 4, 7}):
        y = torch.randn(n, *case.example_args[0].shape[1:])
        assert_same_outputs(case.model(y), ep.module()(y))


def test_constrain_as_size_refuses_bad_data():
    case = EXAMPLES["constrain_as_size_example"]
    ep = graphcap.export(case.model, case.example_args)
    assert ep.module()(torch.tensor(2)).shape == (2, 5)
    assert any(n.target is torch.ops.aten._assert_scalar.default for n in ep.graph.nodes)
    with pytest.raises(RuntimeError, match="u0 <= 5"):
        ep.module()(torch.tensor(7))
