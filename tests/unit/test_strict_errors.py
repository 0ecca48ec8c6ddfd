"""strict=True refuses what dynamo cannot put in one graph, naming the user's line.

A graph break is an error (graphcap's, also an instance of the exception
dynamo raised, which is what torch.export's strict mode lets through); so is a
side effect on a global or closed-over object, which an exported program
could not repeat. Each error names the line of the user's that caused it.
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


def test_side_effect_on_a_global_is_refused_with_its_line():
    before = list(_GLOBAL_LOG)
    with pytest.raises(StrictCaptureError) as info:
        graphcap.export(AppendsToGlobal(), (torch.randn(3),), strict=True)
    err = info.value
    assert "_GLOBAL_LOG" in err.what
    assert "_GLOBAL_LOG.append(x.clone())" in err.where
    assert _GLOBAL_LOG == before  # nothing was stored


def test_side_effect_on_closed_over_state_is_refused_with_its_line():
    with pytest.raises(StrictCaptureError) as info:
        graphcap.export(_closure_model(), (torch.randn(3),), strict=True)
    assert "seen" in info.value.what
    assert "seen.append(x)" in info.value.where


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
    with pytest.raises(StrictCaptureError) as info:
        graphcap.export(model, (torch.randn(3),), strict=True)
    # each changed object by its path from the variable, not the variable alone ("holder, holder")
    assert "(holder.bank, holder.by_key)" in info.value.what
    assert "holder.bank.append(x.clone())" in info.value.where
    assert holder.bank == [] and holder.by_key == {}  # nothing was stored
