"""``graphcap.unflatten(ep, flat_args_adapter=...)``: calls shaped otherwise than the program.

The adapter is asked only when a call's input structure differs from the
program's; what it returns is counted and then checked by the program's own
input checks, so a wrong adapter is refused before anything is computed.
torch.export's adapters (subclasses of its ``FlatArgsAdapter``) work as they are.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch.export.unflatten import FlatArgsAdapter as TorchFlatArgsAdapter

import graphcap
from graphcap.errors import ExportInputError, FlatArgsAdaptationError, InputGuardError


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, y):
        self.calls.add_(1)
        return self.lin(x) * 2 + y.sum()


class KeepFirst(TorchFlatArgsAdapter):
    """torch's adapter class: drops what a pipeline stage appends to the program's inputs."""

    def __init__(self):
        self.seen = []

    def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        self.seen.append((target_spec, input_spec, list(input_args), metadata, obj))
        return input_args[:target_spec.num_leaves]


def _program(**kw):
    torch.manual_seed(0)
    model = TwoInputs()
    x, y = torch.randn(2, 4), torch.randn(2, 3)
    return model, (x, y), graphcap.export(copy.deepcopy(model), (x, y), **kw)


def test_a_torch_adapter_drops_extra_inputs_and_the_result_is_eager():
    model, (x, y), ep = _program()
    adapter = KeepFirst()
    unf = graphcap.unflatten(ep, flat_args_adapter=adapter)
    got = unf(x, y, torch.ones(5), 7)
    torch.testing.assert_close(got, copy.deepcopy(model)(x, y))
    assert unf.adapted and len(adapter.seen) == 1
    # the same call through torch.export's unflatten agrees
    torch_unf = torch.export.unflatten(torch.export.export(copy.deepcopy(model), (x, y)), flat_args_adapter=KeepFirst())
    torch.testing.assert_close(got, torch_unf(x, y, torch.ones(5), 7))


def test_the_adapter_is_asked_only_when_the_structure_differs():
    model, (x, y), ep = _program()
    adapter = KeepFirst()
    unf = graphcap.unflatten(ep, flat_args_adapter=adapter)
    torch.testing.assert_close(unf(x, y), copy.deepcopy(model)(x, y))
    assert adapter.seen == [] and not unf.adapted


def test_keywords_in_another_order_are_the_same_structure():
    class Kw(torch.nn.Module):
        def forward(self, x, *, a, b):
            return x + 2 * a - b

    x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
    adapter = KeepFirst()
    unf = graphcap.unflatten(graphcap.export(Kw(), (x,), {"a": a, "b": b}), flat_args_adapter=adapter)
    torch.testing.assert_close(unf(x, b=b, a=a), Kw()(x, a=a, b=b))
    assert adapter.seen == []


def test_the_adapter_sees_both_specs_the_leaves_metadata_and_the_positional_args():
    _, (x, y), ep = _program()
    adapter = KeepFirst()
    unf = graphcap.unflatten(ep, flat_args_adapter=adapter)
    extra = torch.zeros(1)
    unf(x, y, extra)
    unf(x, y, extra, extra)
    (target, given, leaves, metadata, obj), (_, _, _, metadata2, _) = adapter.seen
    assert target.num_leaves == 2 and given.num_leaves == 3 and target != given
    assert [id(v) for v in leaves] == [id(x), id(y), id(extra)]
    assert isinstance(obj, tuple) and obj[0] is x and len(obj) == 3
    assert metadata["unflattened_module"] is unf
    assert metadata is metadata2  # one dict per module, kept between calls (an adapter may keep notes)


def test_a_graphcap_adapter_maps_a_nested_call_onto_the_program():
    class FromBatch(graphcap.FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            batch = obj[0]  # the caller passes one dict
            return (batch["features"], batch["bias"])  # any sequence will do

    model, (x, y), ep = _program()
    unf = graphcap.unflatten(ep, flat_args_adapter=FromBatch())
    torch.testing.assert_close(unf({"bias": y, "features": x}), copy.deepcopy(model)(x, y))
    assert isinstance(FromBatch(), graphcap.FlatArgsAdapter)
    assert isinstance(KeepFirst(), graphcap.FlatArgsAdapter)  # torch's adapters count as graphcap's


def test_keyword_inputs_reach_the_adapter_in_the_program_order():
    class Kw(torch.nn.Module):
        def forward(self, x, *, a, b):
            return x + 2 * a - b

    x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
    ep = graphcap.export(Kw(), (x,), {"a": a, "b": b})

    class DropExtraKeyword(graphcap.FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return input_args[:3]  # x, then the program's keywords (a, b) before the extra one

    unf = graphcap.unflatten(ep, flat_args_adapter=DropExtraKeyword())
    torch.testing.assert_close(unf(x, extra=torch.zeros(2), b=b, a=a), Kw()(x, a=a, b=b))


def test_a_wrong_count_after_adapting_is_a_clear_type_error():
    class KeepAll(graphcap.FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return input_args

    _, (x, y), ep = _program()
    unf = graphcap.unflatten(ep, flat_args_adapter=KeepAll())
    with pytest.raises(FlatArgsAdaptationError) as info:
        unf(x, y, torch.zeros(1))
    err = info.value
    assert isinstance(err, TypeError)  # what torch's unflattened module raises
    assert "KeepAll.adapt returned 3 flat inputs, but the program takes 2" in err.what
    assert "KeepAll.adapt" in err.where and "target_spec.num_leaves (2)" in err.fix


def test_an_adapter_putting_the_wrong_tensor_in_a_slot_is_refused_before_computing():
    class Swapped(graphcap.FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return [input_args[1], input_args[0]]  # the caller's order, not the program's

    _, (x, y), ep = _program()
    unf = graphcap.unflatten(ep, flat_args_adapter=Swapped())
    before = unf.calls.clone()
    with pytest.raises(InputGuardError) as info:
        unf(x, y, None)  # after swapping: y (2x3) lands where x (2x4) goes
    assert isinstance(info.value, AssertionError)
    assert "*args[0].shape[1]" in str(info.value) and "Swapped.adapt" in info.value.where
    assert "Or correct Swapped.adapt" in info.value.fix
    torch.testing.assert_close(unf.calls, before)  # the buffer update never ran


def test_the_adapters_paths_name_the_inputs_in_messages():
    class Named(KeepFirst):
        def get_flat_arg_paths(self):
            return ["batch.x", "batch.y"]

    _, (x, y), ep = _program()
    unf = graphcap.unflatten(ep, flat_args_adapter=Named())
    with pytest.raises(InputGuardError, match=r"batch\.x\.shape\[0\] to be equal to 2, but got 5"):
        unf(torch.randn(5, 4), y, 0)

    class TooFewPaths(KeepFirst):
        def get_flat_arg_paths(self):
            return ["only_one"]

    with pytest.raises(FlatArgsAdaptationError, match="names 1 inputs, but adapt returned 2"):
        graphcap.unflatten(ep, flat_args_adapter=TooFewPaths())(x, y, 0)


def test_without_an_adapter_another_structure_says_how_to_pass_one():
    _, (x, y), ep = _program()
    unf = graphcap.unflatten(ep)
    with pytest.raises(FlatArgsAdaptationError) as info:
        unf(x, y, torch.zeros(1))
    err = info.value
    assert isinstance(err, TypeError) and isinstance(err, ValueError)  # torch's unflatten / module() types
    assert "((*, *), {})" in err.what and "((*, *, *), {})" in err.what
    assert "flat_args_adapter=MyAdapter()" in err.fix


def test_adapted_inputs_keep_the_dynamic_range():
    torch.manual_seed(0)
    model = TwoInputs()
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    batch = graphcap.Dim("batch", min=2, max=8)
    ep = graphcap.export(copy.deepcopy(model), (x, y), dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    unf = graphcap.unflatten(ep, flat_args_adapter=KeepFirst())
    for n in (2, 5, 8):
        xs, ys = torch.randn(n, 4), torch.randn(n, 3)
        torch.testing.assert_close(unf(xs, ys, "tag"), copy.deepcopy(model)(xs, ys))
    with pytest.raises(InputGuardError, match="<= 8"):
        unf(torch.randn(9, 4), torch.randn(9, 3), "tag")
    with pytest.raises(InputGuardError):  # the two inputs share the batch dim
        unf(torch.randn(3, 4), torch.randn(5, 3), "tag")


def test_an_object_without_adapt_is_refused_by_unflatten():
    _, _, ep = _program()
    with pytest.raises(ExportInputError, match="must have an adapt"):
        graphcap.unflatten(ep, flat_args_adapter=lambda *a: a)


def test_the_adapter_can_be_set_later_and_copies_keep_it():
    model, (x, y), ep = _program()
    unf = graphcap.unflatten(ep)
    unf.flat_args_adapter = KeepFirst()
    twin = copy.deepcopy(unf)
    expected = copy.deepcopy(model)(x, y)
    torch.testing.assert_close(twin(x, y, 1), expected)
    assert twin.flat_args_adapter.seen[0][3]["unflattened_module"] is twin
    torch.testing.assert_close(unf(x, y, 1), expected)


def test_graphcap_offers_every_name_torch_export_offers():
    assert set(torch.export.__all__) - set(dir(graphcap)) == set()
    ep = _program()[2]
    assert isinstance(graphcap.unflatten(ep), graphcap.UnflattenedModule)
    assert ep.graph_signature.backward_signature is None
    joint = graphcap.ExportBackwardSignature({"g": "lin.weight"}, {}, "loss")
    assert joint.loss_output == "loss"
    assert isinstance(graphcap.Dim("b"), graphcap.Constraint) and isinstance(graphcap.Dim.AUTO, graphcap.Constraint)


def test_the_program_data_torch_users_read_on_the_unflattened_module():
    model, (x, y), ep = _program()
    unf = graphcap.unflatten(ep)
    assert unf.graph_signature is ep.graph_signature and unf.range_constraints == ep.range_constraints
    assert [e.fqn for e in unf.module_call_graph] == [e.fqn for e in ep.module_call_graph]
    assert [n.name for n in unf.input_placeholders] == ["x", "y"]
    assert unf.meta["unflattened_module"] is unf
    assert [v is w for v, w in zip(unf.process_forward_inputs(x, y), (x, y))] == [True, True]


def test_turning_the_input_checks_off_keeps_the_structure_check():
    model, (x, y), ep = _program()
    unf = graphcap.unflatten(ep)
    unf.check_input_constraints = False
    wider = torch.randn(5, 4)  # the program was exported with batch 2, static
    torch.testing.assert_close(unf(wider, y[:1]), copy.deepcopy(model)(wider, y[:1]))
    with pytest.raises(FlatArgsAdaptationError):
        unf(x, y, x)
