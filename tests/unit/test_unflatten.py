"""unflatten(ep): the module tree back from a flat program — the basic contract.

Submodules at the original FQNs with a forward made of their part of the
graph; state_dict keys of the original model; tensors shared with the
program; printing shows the hierarchy; results, input checks and buffer
updates as ep.module() / eager.
"""
from __future__ import annotations

import copy
import io

import pytest
import torch

import graphcap
from graphcap.hierarchy import unflatten


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("scratch", torch.ones(4), persistent=False)

    def forward(self, x):
        self.calls.add_(1)
        return self.lin(x) * self.scratch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Counter()
        self.second = Counter()
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 2))

    def forward(self, x):
        return self.head(self.second(self.first(x)) + x)


def _export(model=None, **kw):
    model = model if model is not None else Model()
    return model, graphcap.export(model, (torch.randn(3, 4),), **kw)


def test_submodules_sit_at_the_original_fqns_with_their_own_graphs():
    model, ep = _export()
    unf = unflatten(ep)
    names = {n for n, _ in unf.named_modules()}
    assert {"first", "first.lin", "second", "second.lin", "head", "head.0", "head.1"} <= names
    assert [n.op for n in unf.first.graph.nodes].count("call_module") == 1  # it calls its own lin
    assert any(n.target == torch.ops.aten.linear.default for n in unf.first.lin.graph.nodes)
    assert "first.lin" not in unf.code and "self.first(" in unf.code


def test_state_dict_keys_are_the_models_and_tensors_are_shared():
    model, ep = _export()
    unf = unflatten(ep)
    assert list(unf.state_dict()) == list(model.state_dict())
    assert unf.first.lin.weight is ep.state_dict["first.lin.weight"]
    assert unf.first.scratch is ep.constants["first.scratch"]
    assert "first.scratch" not in unf.state_dict()  # non-persistent stays out


def test_printing_shows_the_hierarchy_under_the_original_class_names():
    _, ep = _export()
    text = str(unflatten(ep))
    assert text.startswith("Model(")
    assert "(first): Counter(" in text and "(lin): Linear()" in text and "(head): Sequential(" in text


def test_results_match_eager_and_ep_module():
    model, ep = _export()
    unf = unflatten(ep)
    x = torch.randn(3, 4)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    torch.testing.assert_close(unf(x), ep.module()(x))


def test_buffer_updates_land_in_the_submodules_buffers_and_leave_the_program_alone():
    model, ep = _export()
    unf = unflatten(ep)
    unf(torch.randn(3, 4))
    unf(torch.randn(3, 4))
    assert unf.first.calls.item() == 2 and unf.second.calls.item() == 2
    assert ep.state_dict["first.calls"].item() == 0
    module = ep.module()
    module(torch.randn(3, 4))
    module(torch.randn(3, 4))
    assert {k: v for k, v in module.state_dict().items()}.keys() == unf.state_dict().keys()
    for key, value in module.state_dict().items():
        torch.testing.assert_close(unf.state_dict()[key], value)


@pytest.mark.parametrize("decompose", [False, True])
def test_inference_ir_buffer_updates_are_written_in_the_right_submodule(decompose):
    _, ep = _export()
    if decompose:
        ep = ep.run_decompositions()
    unf = unflatten(ep)
    unf(torch.randn(3, 4))
    assert unf.first.calls.item() == 1 and unf.second.calls.item() == 1
    assert "copy_" in unf.first.code if decompose else "add_" in unf.first.code


def test_inputs_are_checked_as_the_program_checks_them_at_every_size_it_accepts():
    model = Model()
    batch = torch.export.Dim("batch", min=2, max=32)
    ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    unf = unflatten(ep)
    for n in (2, 5, 32):
        x = torch.randn(n, 4)
        torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    with pytest.raises(Exception, match="to be >= 2"):
        unf(torch.randn(1, 4))
    with pytest.raises(Exception, match="dtype|float64"):
        unf(torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(graphcap.RuntimeInputError):
        unf(torch.randn(3, 4), torch.randn(3, 4))
    assert unf.first.calls.item() == 3  # the refused calls computed nothing


def test_a_loaded_program_unflattens_the_same():
    model, ep = _export()
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    unf = unflatten(loaded)
    x = torch.randn(3, 4)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    assert list(unf.state_dict()) == list(model.state_dict())
    assert str(unf) == str(unflatten(ep))


def test_load_state_dict_by_original_fqns_and_deepcopy_and_to():
    model, ep = _export()
    unf = unflatten(ep)
    other = Model()
    unf.load_state_dict(other.state_dict())
    x = torch.randn(3, 4)
    torch.testing.assert_close(unf(x), copy.deepcopy(other)(x))
    twin = copy.deepcopy(unf)
    assert twin.first.lin.weight is not unf.first.lin.weight
    torch.testing.assert_close(twin(x), unf(x))
    unf.to(torch.device("cpu"))
    torch.testing.assert_close(unf(x), twin(x))


def test_print_readable_and_graph_module_show_each_forward():
    _, ep = _export()
    unf = unflatten(ep)
    text = unf.print_readable(print_output=False)
    assert "# first: Counter" in text and "# first.lin: Linear" in text
    assert "def forward(self, x)" in unf.graph_module.code


def test_a_torch_program_is_accepted_too():
    model = Model()
    ep = torch.export.export(model, (torch.randn(3, 4),))
    unf = unflatten(ep)
    x = torch.randn(3, 4)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    assert list(unf.state_dict()) == list(model.state_dict())


def test_torchs_own_unflatten_still_reads_graphcaps_program():
    model, ep = _export()
    unf = torch.export.unflatten(graphcap.to_torch(ep))
    x = torch.randn(3, 4)
    torch.testing.assert_close(unf(x), unflatten(ep)(x))


def test_graphcap_unflatten_is_the_public_name():
    assert graphcap.unflatten is unflatten
