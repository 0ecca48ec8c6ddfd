"""graphcap.to_torch / graphcap.from_torch on the public zoo.

to_torch: torch's own ExportedProgram validation passes and torch's
``.module()`` gives the outputs graphcap's does. from_torch: a program
exported by torch.export becomes a graphcap program that runs the same, and
survives graphcap's save/load.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from conftest import (
    assert_same_outputs,
    printed_as_loaded,
    quiet_warnings,
    save_load,
    zoo_case,
    zoo_export,
    zoo_params,
)
from graphcap.auto_flatten import register_for_torch

_LIGHT = ("hf_", "custom_", "tv_resnet18", "tv_squeezenet1_0")


def _params():
    return zoo_params(_LIGHT)


def _run(module, args, kwargs):
    """One call on a private copy of the module: buffer mutations do not leak between runs."""
    a, k = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    with torch.no_grad():
        return copy.deepcopy(module)(*a, **k)


@pytest.mark.parametrize("name", _params())
def test_to_torch_validates_and_runs(name):
    built, ep = zoo_case(name), zoo_export(name)
    tep = graphcap.to_torch(ep)
    assert isinstance(tep, torch.export.ExportedProgram)
    tep.validate()
    assert str(tep.graph_signature.input_specs) and len(tep.graph_signature.input_specs) == \
        len(ep.graph_signature.input_specs)
    assert_same_outputs(_run(ep.module(), built.args, built.kwargs), _run(tep.module(), built.args, built.kwargs),
                        rtol=0, atol=0)


@pytest.mark.parametrize("name", _params())
def test_from_torch_runs_and_round_trips(name):
    built = zoo_case(name)
    # torch.export refuses outputs of classes torch's pytree does not know (GPT-2's DynamicCache);
    # graphcap registers those it flattens by attributes with torch, as its to_torch does, so
    # torch.export is given the same chance whatever ran before in this process.
    for spec in zoo_export(name).call_spec:
        register_for_torch(spec)
    with quiet_warnings():
        tep = torch.export.export(copy.deepcopy(built.model), built.args, built.kwargs)
    ep = graphcap.from_torch(tep)
    expected = _run(tep.module(), built.args, built.kwargs)
    assert_same_outputs(expected, _run(ep.module(), built.args, built.kwargs), rtol=0, atol=0)
    loaded = save_load(ep)
    assert str(loaded) == str(ep)
    assert_same_outputs(expected, _run(loaded.module(), built.args, built.kwargs), rtol=0, atol=0)


def test_dynamic_program_both_ways():
    built, ep = zoo_case("custom_dict_list_io"), zoo_export("custom_dict_list_io", dynamic=True)
    tep = graphcap.to_torch(ep)
    assert {str(k): (v.lower, v.upper) for k, v in tep.range_constraints.items()} == \
        {str(k): (v.lower, v.upper) for k, v in ep.range_constraints.items()}
    assert_same_outputs(_run(built.model, built.args2, built.kwargs2), _run(tep.module(), built.args2, built.kwargs2))
    with pytest.raises(Exception):  # noqa: B017 (torch's own input check enforces the range; its class is torch's)
        tep.module()(*[[t[:0] for t in built.args2[0]], built.args2[1]])

    ref = torch.export.export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes)
    back = graphcap.from_torch(ref)
    loaded = save_load(back)
    assert loaded.range_constraints == back.range_constraints
    assert_same_outputs(_run(built.model, built.args2, built.kwargs2),
                        _run(loaded.module(), built.args2, built.kwargs2))


class _Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: self.lin(t) - 1, (x,))


def test_control_flow_subgraphs_both_ways():
    model = _Branchy().eval()
    x = torch.randn(3, 4)
    inputs = [x.abs() + 1, -x.abs() - 1]
    for ep in (graphcap.export(model, (x,)), graphcap.from_torch(torch.export.export(model, (x,)))):
        loaded = save_load(ep)
        assert str(loaded) == printed_as_loaded(ep)
        tep = graphcap.to_torch(loaded)
        for xi in inputs:
            expected = model(xi)
            torch.testing.assert_close(loaded.module()(xi), expected)
            torch.testing.assert_close(tep.module()(xi), expected)


def test_to_torch_feeds_torch_save_and_load(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    tep = graphcap.to_torch(graphcap.export(model, (x,)))
    torch.export.save(tep, tmp_path / "t.pt2")
    again = torch.export.load(tmp_path / "t.pt2")
    torch.testing.assert_close(again.module()(x), model(x))


def test_bad_arguments_are_graphcap_errors():
    with pytest.raises(graphcap.SerializationError, match="torch.export.ExportedProgram"):
        graphcap.from_torch(object())
    with pytest.raises(graphcap.SerializationError, match="graphcap ExportedProgram"):
        graphcap.to_torch(object())
