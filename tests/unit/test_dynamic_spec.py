"""The dynamic_shapes spec language: Dim, derived dims, hints, spec structure,
ShapesCollection, AdditionalInputs, torch.export's Dims, and the errors for
spec mistakes (each names the input path)."""
from __future__ import annotations

import pytest
import torch
import torch.export as te

import graphcap
from graphcap import AdditionalInputs, Dim, ShapesCollection, dims
from graphcap.dynamic.dims import DerivedDim, DimHint, as_dim
from graphcap.dynamic.spec import match_spec


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Nested(torch.nn.Module):
    def forward(self, xs, d):
        return xs[0] + xs[1] * d["scale"]


# -- Dim ----------------------------------------------------------------------

def test_dim_bounds_are_validated():
    with pytest.raises(graphcap.ExportInputError, match="max=2 must be greater than min=5"):
        Dim("x", min=5, max=2)
    with pytest.raises(graphcap.ExportInputError, match="negative"):
        Dim("x", min=-1)
    with pytest.raises(graphcap.ExportInputError, match="not an int"):
        Dim("x", max=2.5)
    with pytest.raises(graphcap.ExportInputError, match="identifier"):
        Dim("not a name")


def test_derived_dims_and_dims_helper():
    dx = Dim("dx", min=3, max=6)
    assert isinstance(dx + 1, DerivedDim) and (dx + 1).min == 4 and (dx + 1).max == 7
    d = 3 * dx + 1
    assert (d.min, d.max, d.root) == (10, 19, dx) and d.fn(2) == 7
    assert (2 * dx).fn(5) == 10
    with pytest.raises(graphcap.ExportInputError, match="positive"):
        dx * 0
    with pytest.raises(graphcap.ExportInputError, match="int only"):
        dx + dx
    a, b = dims("a", "b", max=8)
    assert (a.__name__, b.max) == ("a", 8)


def test_torch_export_dims_are_read_as_graphcap_dims():
    tdx = te.Dim("dx", min=3, max=6)
    g = as_dim(tdx)
    assert isinstance(g, Dim) and (g.__name__, g.min, g.max) == ("dx", 3, 6)
    derived = as_dim(2 * tdx + 1)
    assert isinstance(derived, DerivedDim) and derived.root.__name__ == "dx" and derived.fn(4) == 9
    assert as_dim(te.Dim.AUTO) == Dim.AUTO and as_dim(te.Dim.STATIC) == Dim.STATIC
    assert isinstance(as_dim(te.Dim.DYNAMIC), DimHint)


# -- spec structure -------------------------------------------------------------

def test_spec_forms_dict_tuple_nested_and_lists():
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    b = Dim("b")
    by_name, _ = match_spec(Add(), (x, y), {}, {"x": {0: b}, "y": None})
    by_pos, _ = match_spec(Add(), (x, y), {}, ({0: b}, (b, None)))
    assert by_name == [{0: b}, None] and by_pos == [{0: b}, {0: b}]
    xs, d = [torch.randn(4, 3), torch.randn(4, 3)], {"scale": torch.randn(4, 3)}
    specs, paths = match_spec(Nested(), (xs, d), {}, ([{0: b}, None], {"scale": {0: b}}))
    assert specs == [{0: b}, None, {0: b}]
    assert paths == ["['xs'][0]", "['xs'][1]", "['d']['scale']"]


@pytest.mark.parametrize("spec, message", [
    ({"x": {0: Dim("b")}, "z": None}, r"missing \['y'\], unknown \['z'\]"),
    (({0: Dim("b")},), "has 1 entries, but there are 2 inputs"),
    ({"x": {2: Dim("b")}, "y": None}, r"dynamic_shapes\['x'\] names dim 2, but the tensor there has 2 dims"),
    ({"x": (Dim("b"),), "y": None}, r"dynamic_shapes\['x'\] lists 1 dims"),
    ({"x": {0: "batch"}, "y": None}, "not a Dim"),
    ({"x": {0: 5}, "y": None}, "fixes dim 0 to 5, but the example input has size 4"),
    ({"x": {0: Dim("b", max=8)}, "y": {0: Dim("b", max=9)}}, "The name 'b' is used for two different Dims"),
    ({"x": {0: Dim("b", min=11, max=18)}, "y": None}, r"4 not in range \[11, 18\]"),
    ([{0: Dim("b")}, {"k": None}], r"dynamic_shapes\['y'\] has key 'k'; dims are ints"),
    ({"x": [{0: Dim("b")}], "y": None}, r"dynamic_shapes\['x'\] lists 1 dims"),
])
def test_spec_mistakes_are_clear_errors(spec, message):
    with pytest.raises(graphcap.ExportInputError, match=message) as info:
        graphcap.export(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=spec)
    assert "Where:" in str(info.value) and "How to fix:" in str(info.value)


def test_example_value_outside_range_names_the_input():
    with pytest.raises(graphcap.ExportInputError, match=r"10 not in range \[11, 18\]") as info:
        graphcap.export(Add(), (torch.randn(10, 3), torch.randn(10, 3)),
                        dynamic_shapes=({0: Dim("b", min=11, max=18)}, None))
    assert "*args[0].shape[0]" in str(info.value)


def test_shared_dim_with_different_example_sizes():
    b = Dim("b")
    with pytest.raises(graphcap.ExportInputError, match="use the same Dim 'b'"):
        graphcap.export(Add(), (torch.randn(4, 3), torch.randn(5, 3)), dynamic_shapes=({0: b}, {0: b}))


def test_derived_example_must_fit_its_form():
    dx = Dim("dx")
    with pytest.raises(graphcap.ExportInputError, match="is not 2\\*dx for any integer dx"):
        graphcap.export(Add(), (torch.randn(5, 3), torch.randn(5, 3)), dynamic_shapes=({0: 2 * dx}, None))


def test_int_inputs_marked_dynamic_become_symint_inputs():
    def f(x, n):
        return x * n
    ep = graphcap.export(f, (torch.randn(3), 2), dynamic_shapes=({0: Dim("b")}, Dim.DYNAMIC))
    assert ep.module()(torch.ones(5), 7).tolist() == [7.0] * 5


# -- builders -------------------------------------------------------------------------

def test_shapes_collection_builds_the_spec():
    xs, d = [torch.randn(4, 3), torch.randn(4, 3)], {"scale": torch.randn(4, 3)}
    b = Dim("b", max=16)
    sc = ShapesCollection()
    sc[xs[0]] = {0: b}
    sc[xs[1]] = {0: b}
    sc[d["scale"]] = (b, None)
    assert sc.dynamic_shapes(Nested(), (xs, d)) == {"xs": [{0: b}, {0: b}], "d": {"scale": (b, None)}}
    ep = graphcap.export(Nested(), (xs, d), dynamic_shapes=sc)
    assert list(ep.range_constraints.values())[0].upper == 16
    out = ep.module()([torch.randn(7, 3), torch.randn(7, 3)], {"scale": torch.randn(7, 3)})
    assert out.shape == (7, 3)


def test_additional_inputs_make_varying_dims_dynamic():
    ai = AdditionalInputs()
    ai.add((torch.randn(6, 3), torch.randn(6, 3)))
    ai.add((torch.randn(2, 3), torch.randn(2, 3)))
    args = (torch.randn(4, 3), torch.randn(4, 3))
    assert ai.dynamic_shapes(Add(), args) == {"x": (Dim.DYNAMIC, None), "y": (Dim.DYNAMIC, None)}
    ep = graphcap.export(Add(), args, dynamic_shapes=ai)
    ai.verify(ep)
    assert ep.module()(torch.ones(9, 3), torch.ones(9, 3)).shape == (9, 3)
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*args\[0\].shape\[1\] to be equal to 3, but got 4"):
        ep.module()(torch.ones(9, 4), torch.ones(9, 4))
