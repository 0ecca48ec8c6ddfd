"""Every public-zoo model exported with the zoo's dynamic spec (torch.export Dims,
unchanged), then run at three other sizes inside the declared ranges — the
lower end (1 for batch), the upper end, and one in between — and compared
with eager.

The default run covers one model per input kind (custom pytree inputs,
vision, text with batch and sequence), with the vision batch stopping at 8
to keep it fast; the slow test runs the whole zoo over the full ranges.
"""
from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from conftest import assert_same_outputs, run_eager_and_exported, zoo_case, zoo_export, zoo_names
from graphcap.dynamic.dims import INT_MAX, DerivedDim, as_dim
from graphcap.dynamic.spec import match_spec

FAST = ["custom_dict_list_io", "custom_kwargs_only", "custom_buffer_inplace", "tv_resnet18", "hf_bert"]


def _resize(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``t`` with ``size`` entries along ``dim``, tiling its own values (ids stay ids, masks masks)."""
    idx = torch.arange(size) % t.shape[dim]
    return t.index_select(dim, idx)


def _inputs_at(built, values: dict[str, int]):
    """The zoo's second inputs with every dynamic Dim set to ``values[name]``."""
    leaf_specs, _ = match_spec(built.model, built.args2, built.kwargs2, built.dynamic_shapes)
    leaves, spec = pytree.tree_flatten((built.args2, built.kwargs2))
    out = []
    for leaf, leaf_spec in zip(leaves, leaf_specs):
        for dim, d in (leaf_spec or {}).items():
            d = as_dim(d)
            root = d.root if isinstance(d, DerivedDim) else d
            size = d.fn(values[root.__name__]) if isinstance(d, DerivedDim) else values[root.__name__]
            leaf = _resize(leaf, dim, int(size))
        out.append(leaf)
    return pytree.tree_unflatten(out, spec)


def _size_sets(built, max_batch: int | None = None) -> list[dict[str, int]]:
    leaf_specs, _ = match_spec(built.model, built.args, built.kwargs, built.dynamic_shapes)
    roots = {}
    for leaf_spec in leaf_specs:
        for d in (leaf_spec or {}).values():
            d = as_dim(d)
            root = d.root if isinstance(d, DerivedDim) else d
            roots[root.__name__] = root
    low = {n: r.min for n, r in roots.items()}
    high = {n: (r.max if r.max < INT_MAX else r.min + 64) for n, r in roots.items()}
    if max_batch is not None and "batch" in high:  # a cheaper upper size for the default run
        high["batch"] = min(high["batch"], max_batch)
    mid = {n: max(r.min, min(high[n] - 1, (low[n] + high[n]) // 4 + 1)) for n, r in roots.items()}
    return [low, mid, high]


def _check_zoo_model(name: str, max_batch: int | None = None):
    built, ep = zoo_case(name), zoo_export(name, dynamic=True)
    assert ep.range_constraints, "a dynamic export has symbols"
    declared = {str(k): (int(v.lower), v.upper) for k, v in ep.range_constraints.items()}
    assert any(lo == 1 for lo, _ in declared.values()), f"batch keeps its declared min 1: {declared}"
    sizes = _size_sets(built, max_batch)
    assert len({tuple(v.items()) for v in sizes}) == 3
    for values in sizes:
        args, kwargs = _inputs_at(built, values)
        expected, got = run_eager_and_exported(built.model, ep, args, kwargs)
        assert_same_outputs(expected, got, rtol=1e-3, atol=1e-3)
    return built, ep


@pytest.mark.parametrize("name", FAST)
def test_zoo_dynamic_fast(name):
    _check_zoo_model(name, max_batch=8 if name.startswith("tv_") else None)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_dynamic_full(name):
    _check_zoo_model(name)


def test_zoo_dynamic_refuses_out_of_range():
    built, ep = zoo_case("custom_kwargs_only"), zoo_export("custom_kwargs_only", dynamic=True)
    kwargs = dict(built.kwargs2)
    kwargs["x"] = _resize(kwargs["x"], 0, 65)
    kwargs["y"] = _resize(kwargs["y"], 0, 65)
    with pytest.raises(graphcap.RuntimeInputError, match=r"shape\[0\] to be <= 64, but got 65"):
        ep.module()(**kwargs)
    kwargs["y"] = _resize(kwargs["y"], 0, 7)
    kwargs["x"] = _resize(kwargs["x"], 0, 6)
    with pytest.raises(graphcap.RuntimeInputError, match="to be equal to 6, but got 7"):
        ep.module()(**kwargs)
