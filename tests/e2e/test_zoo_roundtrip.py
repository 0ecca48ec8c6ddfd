"""save → load on every public-zoo model, static and dynamic.

The loaded program must print the same, have the same signature and range
constraints, give identical outputs to the program that was saved, and still
refuse the inputs the original refuses (same message).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from conftest import save_load, zoo_case, zoo_export, zoo_params


def _run(ep, args, kwargs):
    a, k = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    with torch.no_grad():
        return copy.deepcopy(ep.module())(*a, **k)  # buffer mutations stay in the copy


def _assert_identical(expected, got):
    from graphcap.auto_flatten import flatten  # knows the classes graphcap flattens by attributes
    le, se = flatten(expected)
    lg, sg = flatten(got)
    assert type(expected) is type(got) and se == sg
    for a, b in zip(le, lg):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        else:
            assert a == b


def _assert_same_program(ep, ep2):
    assert str(ep2) == str(ep)
    assert ep2.graph_signature == ep.graph_signature
    assert ep2.range_constraints == ep.range_constraints
    assert [e.fqn for e in ep2.module_call_graph] == [e.fqn for e in ep.module_call_graph]
    assert ep2.call_spec == ep.call_spec


def _wrong_dtype(args, kwargs):
    """The inputs with the first floating tensor in float64 (or the first int tensor in int32)."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            leaves[i] = leaf.to(torch.float64 if leaf.is_floating_point() else torch.int32)
            break
    return pytree.tree_unflatten(leaves, spec)


def _refusal(ep, args, kwargs):
    with pytest.raises(graphcap.RuntimeInputError) as info:
        ep.module()(*args, **kwargs)
    return str(info.value)


def _check(ep, args, kwargs, other_args=None, other_kwargs=None):
    ep2 = save_load(ep)
    _assert_same_program(ep, ep2)
    _assert_identical(_run(ep, args, kwargs), _run(ep2, args, kwargs))
    if other_args is not None:
        _assert_identical(_run(ep, other_args, other_kwargs), _run(ep2, other_args, other_kwargs))
    bad = _wrong_dtype(args, kwargs)
    assert _refusal(ep2, *bad) == _refusal(ep, *bad)
    return ep2


# Round trips of the big vision models take minutes on a small machine: the
# default run covers the text, audio and custom models and three vision models
# (static), the text/audio/custom models (dynamic: batch, sequence and
# sample-length symbols); ``-m slow`` runs the rest of the zoo.
_STATIC_DEFAULT = ("hf_", "custom_", "tv_resnet18", "tv_squeezenet1_0", "tv_mobilenet_v3_small")
_DYNAMIC_DEFAULT = ("hf_", "custom_")


@pytest.mark.parametrize("name", zoo_params(_STATIC_DEFAULT))
def test_zoo_round_trip_static(name):
    built, ep = zoo_case(name), zoo_export(name)
    ep2 = _check(ep, built.args, built.kwargs)
    if built.args2 is not None:  # other sizes refused, with the same message
        assert _refusal(ep2, built.args2, built.kwargs2) == _refusal(ep, built.args2, built.kwargs2)


@pytest.mark.parametrize("name", zoo_params(_DYNAMIC_DEFAULT))
def test_zoo_round_trip_dynamic(name):
    built = zoo_case(name)
    assert built.dynamic_shapes is not None, f"every zoo model declares dynamic shapes; {name} does not"
    ep = zoo_export(name, dynamic=True)  # a failing dynamic export is a failure, never a skip
    assert ep.range_constraints, "dynamic export produced no symbols"
    _check(ep, built.args, built.kwargs, built.args2, built.kwargs2)
