"""unflatten on every public-zoo model (slow; a few small ones run by default).

Each model, exported with its dynamic shapes and unflattened: matches eager
at the example inputs and at the second inputs (other sizes along every
dynamic dim), has the model's state_dict keys and a submodule at the FQN of
every parameter-owning module, also after save/load. And a GPT-2
transformer layer and a ResNet stage, preserved, swapped by an eager copy.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import graphcap
from conftest import assert_same_outputs, save_load, zoo_case, zoo_export, zoo_params
from graphcap.hierarchy import unflatten

FAST = {"custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only", "tv_squeezenet1_0"}


def _run(module, args, kwargs):
    a, k = copy.deepcopy((args, kwargs or {}))
    with torch.no_grad():
        return module(*a, **k)


def _check_against_eager(built, unf):
    eager = copy.deepcopy(built.model)
    for args, kwargs in ((built.args, built.kwargs), (built.args2, built.kwargs2)):
        if args is None:
            continue
        assert_same_outputs(_run(eager, args, kwargs), _run(unf, args, kwargs))
    assert set(unf.state_dict()) == set(built.model.state_dict())
    submodules = dict(unf.named_modules(remove_duplicate=False))
    owners = {name.rpartition(".")[0] for name, _ in built.model.named_parameters(remove_duplicate=False)}
    assert not [fqn for fqn in owners if fqn not in submodules]


@pytest.mark.parametrize("name", zoo_params(FAST))
def test_zoo_model_unflattens_like_eager_also_after_save_load(name):
    built, ep = zoo_case(name), zoo_export(name, dynamic=True)
    _check_against_eager(built, unflatten(ep))
    _check_against_eager(built, unflatten(save_load(ep)))


def _swap_with_eager_copy(name, fqn):
    built = zoo_case(name)
    ep = graphcap.export(copy.deepcopy(built.model), built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                         preserve_module_call_signature=(fqn,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the preserved call must keep its signature, no fallback
        unf = unflatten(ep)
    replacement = copy.deepcopy(built.model.get_submodule(fqn))
    calls = []
    replacement.register_forward_hook(lambda *_: calls.append(1))
    unf.set_submodule(fqn, replacement)
    _check_against_eager(built, unf)
    assert calls, "the replacement was not called"


def test_a_resnet_stage_swapped_by_an_eager_copy():
    _swap_with_eager_copy("tv_resnet18", "layer1")


@pytest.mark.slow
def test_a_gpt2_transformer_layer_swapped_by_an_eager_copy():
    _swap_with_eager_copy("hf_gpt2", "h.0")
