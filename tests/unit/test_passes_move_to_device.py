"""move_to_device_pass: state, graph device arguments and expected inputs move together."""
from __future__ import annotations

import pytest
import torch

import graphcap
from conftest import program_devices
from graphcap import move_to_device_pass
from graphcap.errors import ExportInputError, RuntimeInputError


class MakesTensors(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x):
        bias = torch.zeros(x.shape[0], 3, device=x.device)
        return self.lin(x) + self.offset + bias


@pytest.mark.parametrize("location", ["meta", torch.device("meta"), {"cpu": "meta"}])
def test_moves_state_graph_and_inputs(location):
    x = torch.randn(2, 4)
    for ep in (graphcap.export(MakesTensors(), (x,)),
               graphcap.export(MakesTensors(), (x,)).run_decompositions()):
        moved = move_to_device_pass(ep, location)
        assert program_devices(ep) == {"cpu"}  # the original is left as it was
        assert program_devices(moved) == {"meta"}
        assert all(t.device.type == "meta" for t in moved.state_dict.values())
        assert isinstance(moved.state_dict["lin.weight"], torch.nn.Parameter)
        out = moved.module()(x.to("meta"))
        assert out.device.type == "meta" and out.shape == (2, 3)
        with pytest.raises(RuntimeInputError, match="device"):
            moved.module()(x)


def test_mapping_leaves_unlisted_devices():
    ep = graphcap.export(MakesTensors(), (torch.randn(2, 4),))
    same = move_to_device_pass(ep, {"cuda:0": "meta"})
    assert program_devices(same) == {"cpu"}
    torch.testing.assert_close(same.module()(torch.ones(2, 4)), ep.module()(torch.ones(2, 4)))


def test_rejects_a_location_that_is_not_a_device():
    ep = graphcap.export(MakesTensors(), (torch.randn(2, 4),))
    with pytest.raises(ExportInputError, match="device"):
        move_to_device_pass(ep, 3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_moves_to_cuda_and_computes_the_same():
    x = torch.randn(2, 4)
    ep = graphcap.export(MakesTensors(), (x,)).run_decompositions()
    moved = move_to_device_pass(ep, "cuda")
    out = moved.module()(x.cuda())
    torch.testing.assert_close(out.cpu(), ep.module()(x))


def test_size_one_dim_stays_symbolic_and_the_original_learns_nothing():
    """Moving a fake value asks which memory format a size-1 dim keeps: answered from the example
    size, in the original's ShapeEnv, it held the dim at 1 in both programs."""
    from torch.export import Dim

    class Softmax(torch.nn.Module):
        def forward(self, x):
            return x.softmax(-1) * 2

    ep = graphcap.export(Softmax(), (torch.randn(2, 1),), dynamic_shapes={"x": {1: Dim("n", min=1, max=8)}})
    moved = move_to_device_pass(ep, "meta")
    x_val = next(n for n in moved.graph.nodes if n.op == "placeholder").meta["val"]
    assert isinstance(x_val.shape[1], torch.SymInt)
    assert moved.module()(torch.randn(2, 5, device="meta")).shape == (2, 5)
    x = torch.randn(2, 5)
    torch.testing.assert_close(ep.module()(x), Softmax()(x))
