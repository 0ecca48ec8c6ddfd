"""strict=True refuses what dynamo cannot put in one graph, naming the user's line.

A graph break is an error (graphcap's, also an instance of the exception
dynamo raised, which is what torch.export's strict mode lets through). A
store into a global or closed-over object is left out of the program, as in
torch.export's strict mode: the export warns, naming the variable and the
line, and leaves the object as it was. Each message names the user's line.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap.errors import StrictCaptureError

_GLOBAL_LOG = []


class PythonBranchOnData(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent Python branch: a graph break
            return x + 1
        return x - 1


class CallsUnsupported(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y = torch._dynamo.graph_break() or y
        return y


class AppendsToGlobal(torch.nn.Module):
    def forward(self, x):
        _GLOBAL_LOG.append(x.clone())
        return x + 1


def _closure_model():
    seen = []

    class AppendsToClosure(torch.nn.Module):
        def forward(self, x):
            seen.append(x)
            return x * 3

    return AppendsToClosure()


def test_data_dependent_branch_is_a_graph_break_error_naming_the_line():
    with pytest.raises(StrictCaptureError) as info:
        graphcap.export(PythonBranchOnData(), (torch.randn(3),), strict=True)
    err = info.value
    assert "graph break" in str(err) and "Data-dependent branching" in str(err)
    assert "if x.sum() > 0:" in err.where and __file__ in err.where
    assert isinstance(err, torch._dynamo.exc.Unsupported)
    assert isinstance(err, graphcap.errors.UnsupportedError)
    assert "strict=False" in err.fix


def test_explicit_graph_break_names_the_construct():
    with pytest.raises(StrictCaptureError) as info:
        graphcap.export(CallsUnsupported(), (torch.randn(3),), strict=True)
    assert isinstance(info.value, torch._dynamo.exc.Unsupported)
    assert "graph_break" in str(info.value)
    assert "torch._dynamo.graph_break()" in info.value.where


def test_the_same_model_exports_without_strict():
    # non-strict runs the Python as it is: graph_break() is a plain call there
    ep = graphcap.export(CallsUnsupported(), (torch.ones(3),))
    assert torch.equal(ep.module()(torch.ones(3)), torch.full((3,), 2.0))


def _export_warning_of_side_effects(model, x):
    with pytest.warns(UserWarning, match="changes state outside the program") as caught:
        ep = graphcap.export(model, (x,), strict=True)
    (warning,) = [w for w in caught if "outside the program" in str(w.message)]
    return ep, str(warning.message)


def test_side_effect_on_a_global_is_left_out_with_a_warning_naming_its_line():
    before = list(_GLOBAL_LOG)
    ep, message = _export_warning_of_side_effects(AppendsToGlobal(), torch.randn(3))
    assert "(_GLOBAL_LOG)" in message
    assert "_GLOBAL_LOG.append(x.clone())" in message
    assert "return it from forward" in message  # the way to keep the value
    assert _GLOBAL_LOG == before  # nothing was stored by the export
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), x + 1)
    assert _GLOBAL_LOG == before  # nor by the program: the store is not in it


def test_side_effect_on_closed_over_state_is_left_out_with_a_warning_naming_its_line():
    ep, message = _export_warning_of_side_effects(_closure_model(), torch.randn(3))
    assert "(seen)" in message and "seen.append(x)" in message
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), x * 3)


def test_a_failed_strict_export_leaves_dim_marks_off_the_inputs():
    x = torch.randn(4, 3)
    with pytest.raises(graphcap.errors.GraphcapError):
        graphcap.export(PythonBranchOnData(), (x,), dynamic_shapes=({0: graphcap.Dim("n")},), strict=True)
    assert not hasattr(x, "_dynamo_weak_dynamic_indices")


def _model_storing_into_attributes_of_a_closed_over_object():
    class Holder:
        def __init__(self):
            self.bank, self.by_key = [], {}

    holder = Holder()

    class StoresIntoHolder(torch.nn.Module):
        def forward(self, x):
            holder.bank.append(x.clone())
            holder.by_key["x"] = x.clone()
            return x + 1

    return StoresIntoHolder(), holder


def test_side_effect_on_an_attribute_of_a_closed_over_object_names_the_attribute():
    model, holder = _model_storing_into_attributes_of_a_closed_over_object()
    ep, message = _export_warning_of_side_effects(model, torch.randn(3))
    # each changed object by its path from the variable, not the variable alone ("holder, holder")
    assert "(holder.bank, holder.by_key)" in message
    assert "holder.bank.append(x.clone())" in message
    assert holder.bank == [] and holder.by_key == {}  # nothing was stored, no fake tensor leaked
    ep.module()(torch.randn(3))
    assert holder.bank == [] and holder.by_key == {}

