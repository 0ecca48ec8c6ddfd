"""Dynamic Python ints, spec builder objects (graphcap's and torch's), hint bounds,
and the torch exception types dynamic-shape errors also belong to."""
from __future__ import annotations

import pytest
import torch
import torch.export as te
from torch._dynamo.exc import UserError
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError as TorchCVE

import graphcap
from graphcap import Dim
from graphcap.signature import SymIntArgument


class Mul(torch.nn.Module):
    def forward(self, x, y):
        return x * y


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("hint", [Dim.DYNAMIC, Dim.AUTO, te.Dim.DYNAMIC, Dim("n")])
def test_an_int_marked_dynamic_is_a_symint_input(hint):
    ep = graphcap.export(Mul(), (4, torch.ones(3)), dynamic_shapes={"x": hint, "y": None})
    placeholder = next(n for n in ep.graph.nodes if n.op == "placeholder")
    assert isinstance(placeholder.meta["val"], torch.SymInt)
    assert isinstance(ep.graph_signature.input_specs[0].arg, SymIntArgument)
    assert len(ep.range_constraints) == 1
    assert ep.module()(7, torch.ones(3)).tolist() == [7.0] * 3


def test_unmarked_ints_stay_specialized():
    ep = graphcap.export(Mul(), (4, torch.ones(3)), dynamic_shapes={"x": None, "y": None})
    assert ep.range_constraints == {}
    with pytest.raises(graphcap.RuntimeInputError, match="to be equal to 4, but got 3"):
        ep.module()(3, torch.ones(3))


def test_dynamic_int_range_is_checked_before_compute():
    ep = graphcap.export(Mul(), (3, torch.ones(2)), dynamic_shapes=(Dim.DYNAMIC(min=3, max=10), None))
    (vr,) = ep.range_constraints.values()
    assert (int(vr.lower), int(vr.upper)) == (3, 10)
    assert ep.module()(10, torch.ones(2)).tolist() == [10.0, 10.0]
    with pytest.raises(graphcap.RuntimeInputError, match="<= 10, but got 16"):
        ep.module()(16, torch.ones(2))
    with pytest.raises(graphcap.RuntimeInputError, match="to be an int"):
        ep.module()(4.0, torch.ones(2))


def test_trace_range_of_a_hint_meets_its_bounds():
    class Asserts(torch.nn.Module):
        def forward(self, x, y):
            assert x > 3
            assert x <= 5
            return x * y

    ep = graphcap.export(Asserts(), (4, torch.ones(2)), dynamic_shapes=(Dim.DYNAMIC(min=3, max=10), None))
    (vr,) = ep.range_constraints.values()
    assert (int(vr.lower), int(vr.upper)) == (4, 5)


def test_hint_bounds_that_conflict_with_the_trace_are_a_value_error():
    class Small(torch.nn.Module):
        def forward(self, x):
            assert x.shape[0] <= 32
            return x + 2

    with pytest.raises(ValueError, match=r"user-specified min/max range of \[33, None\], conflicting with "
                                         r"the inferred min/max range of \[0, 32\], for inputs\['x'\]\.shape\[0\]"):
        graphcap.export(Small(), (torch.randn(16),), dynamic_shapes={"x": (Dim.DYNAMIC(min=33),)})
    with pytest.raises(ValueError, match=r"inferred a static shape of 32 for dimension inputs\['x'\]\.shape\[0\]"):
        graphcap.export(Small(), (torch.randn(32),), dynamic_shapes={"x": (Dim.DYNAMIC(min=32),)})


def test_dynamic_hint_specialized_is_a_torch_user_error():
    with pytest.raises(UserError, match=r"You marked L\['y'\]\.size\(\)\[0\] as dynamic but your code "
                                        r"specialized it to be a constant \(3\)"):
        graphcap.export(Add(), (torch.randn(3), torch.randn(3)), dynamic_shapes=(None, (Dim.DYNAMIC,)))


@pytest.mark.parametrize("builder", [te.AdditionalInputs, graphcap.AdditionalInputs])
def test_additional_inputs_make_differing_ints_dynamic_and_are_verified(builder):
    ai = builder()
    ai.add((5, 5))
    ai.add((3, 5))
    ai.add((5, 4))
    ep = graphcap.export(Add(), (6, 7), dynamic_shapes=ai)
    assert ep.module()(3, 5) == 8 and ep.module()(5, 4) == 9


def test_torch_shapes_collection_with_int_wrappers():
    from torch.export.dynamic_shapes import _IntWrapper
    args = (_IntWrapper(5), _IntWrapper(5))
    shapes = te.ShapesCollection()
    shapes[args[0]] = te.Dim.DYNAMIC
    shapes[args[1]] = te.Dim.DYNAMIC
    ep = graphcap.export(Add(), args, dynamic_shapes=shapes)
    assert ep.module()(3, 5) == 8


def test_torch_shapes_collection_of_nested_tensors():
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    shapes = te.ShapesCollection()
    shapes[x] = {0: te.Dim("b")}
    shapes[y] = {0: te.Dim("b")}
    ep = graphcap.export(lambda d: d["x"] + d["y"], ({"x": x, "y": y},), dynamic_shapes=shapes)
    assert ep.module()({"x": torch.ones(6, 3), "y": torch.ones(6, 3)}).shape == (6, 3)


def test_spec_errors_are_also_torch_errors():
    with pytest.raises(TorchCVE, match="not in range"):
        graphcap.export(Add(), (torch.randn(3), torch.randn(3)),
                        dynamic_shapes={"x": {0: Dim("dx", min=6)}, "y": {0: Dim("dx", min=6)}})
    a, b = te.Dim("C", min=3), te.Dim("C", max=12)
    with pytest.raises(UserError, match=r"Found different definitions Dim\(.*min=3\) and Dim\(.*max=12\) "
                                        r"for the same symbolic dimension"):
        graphcap.export(lambda x, y: x @ y, (torch.randn(10, 10), torch.randn(10, 10)),
                        dynamic_shapes={"x": (a, b), "y": (b, a)})


def test_a_size_equal_to_a_product_of_dims_is_kept_and_checked():
    class FlatAdd(torch.nn.Module):
        def forward(self, x, z):
            return x.reshape(-1) + z

    spec = {"x": (Dim("a", min=2), Dim("b", min=2)), "z": (Dim("c", min=4),)}
    ep = graphcap.export(FlatAdd(), (torch.randn(3, 4), torch.randn(12)), dynamic_shapes=spec)
    assert ep.module()(torch.ones(5, 2), torch.ones(10)).shape == (10,)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.ones(5, 2), torch.ones(11))


def test_prefer_deferred_runtime_asserts_keeps_relations_as_asserts():
    class Rel(torch.nn.Module):
        def forward(self, x, y):
            if x.shape[0] ** 2 - y.shape[0] ** 2 >= 4:
                return x * 2, y * 2
            return x, y

    spec = {"x": (Dim("dx"),), "y": (Dim("dy"),)}
    with pytest.raises(graphcap.ConstraintViolationError):
        graphcap.export(Rel(), (torch.randn(5), torch.randn(3)), dynamic_shapes=spec)
    ep = graphcap.export(Rel(), (torch.randn(5), torch.randn(3)), dynamic_shapes=spec,
                         prefer_deferred_runtime_asserts_over_guards=True)
    assert any(n.target is torch.ops.aten._assert_scalar.default for n in ep.graph.nodes)
    out = ep.module()(torch.ones(6), torch.ones(2))
    assert out[0].tolist() == [2.0] * 6
    with pytest.raises(RuntimeError):
        ep.module()(torch.ones(3), torch.ones(3))


def test_a_dynamic_int_the_program_specializes_is_checked_as_a_value():
    class Loop(torch.nn.Module):
        def forward(self, x, n):
            for _ in range(n):
                x = x + 1
            return x

    ep = graphcap.export(Loop(), (torch.ones(2), 3), dynamic_shapes=(None, Dim.AUTO))
    assert ep.module()(torch.ones(2), 3).tolist() == [4.0, 4.0]
    with pytest.raises(graphcap.RuntimeInputError, match="n == 3"):
        ep.module()(torch.ones(2), 4)
    with pytest.raises(graphcap.ConstraintViolationError, match=r"specialized it to be a constant \(3\)"):
        graphcap.export(Loop(), (torch.ones(2), 3), dynamic_shapes=(None, Dim.DYNAMIC))


def test_a_dynamic_int_program_saves_loads_and_decomposes():
    import io
    ep = graphcap.export(Mul(), (3, torch.ones(2)), dynamic_shapes=(Dim.DYNAMIC(min=1, max=10), None))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    assert isinstance(loaded.graph_signature.input_specs[0].arg, SymIntArgument)
    assert loaded.module()(5, torch.ones(2)).tolist() == [5.0, 5.0]
    with pytest.raises(graphcap.RuntimeInputError, match="<= 10"):
        loaded.module()(11, torch.ones(2))
    assert ep.run_decompositions().module()(7, torch.ones(2)).tolist() == [7.0, 7.0]


def test_a_dynamic_int_with_a_negative_example_ranges_below_zero():
    import io
    ep = graphcap.export(Mul(), (-3, torch.ones(2)), dynamic_shapes=(Dim.DYNAMIC, None))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    assert graphcap.load(buf).module()(-7, torch.ones(2)).tolist() == [-7.0, -7.0]
    assert ep.module()(5, torch.ones(2)).tolist() == [5.0, 5.0]
    ep = graphcap.export(Mul(), (3, torch.ones(2)), dynamic_shapes=(Dim.DYNAMIC, None))
    (vr,) = ep.range_constraints.values()
    assert int(vr.lower) == 0  # as torch.export ranges an int input with a non-negative example
