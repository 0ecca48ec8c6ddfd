"""Convolutions with a dynamic batch, lowered by ExecuTorch: the declared range survives ``to_edge``.

ExecuTorch's ``to_edge`` re-runs every operator of the program in the program's own fake mode
with oneDNN / NNPACK on. torch's fake convolution then asks the backend choice ``batch >= 16`` of
the symbolic batch, and the answer becomes a guard: the edge program's range became ``[2, 15]``
and memory was planned for batch 15 (torch.export's program escapes by a fake-tensor cache hit;
docs/consumers.md, "Convolutions and a dynamic batch"). These tests compare graphcap's edge
program with torch.export's (range, planned tensor shapes) and run the ``.pte`` at the edges of
the range and on both sides of 16.
"""
from __future__ import annotations

import importlib.util
import io

import pytest
import torch
from torch.export import Dim

import graphcap
from conftest import build_zoo, quiet_warnings

pytestmark = pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                                reason="executorch not installed (the consumers extra, torch 2.14 line)")

MAX_BATCH = 64


class TwoConv2d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.Conv2d(8, 8, 3)

    def forward(self, x):
        return self.b(self.a(x).relu())


class TwoConv1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv1d(4, 8, 3)
        self.b = torch.nn.Conv1d(8, 6, 3, padding=1)

    def forward(self, x):
        return self.b(self.a(x).relu())


class ConvThenTransposed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.ConvTranspose2d(8, 4, 3, stride=2)

    def forward(self, x):
        return self.b(self.a(x).relu())


class TwoConv3d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv3d(2, 4, 3)
        self.b = torch.nn.Conv3d(4, 4, 3)

    def forward(self, x):
        return self.b(self.a(x).relu())


def _resnet18():
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval(), (3, 32, 32)


# name -> (model, per-example size without the batch)
SMALL = {
    "conv2d": lambda: (TwoConv2d().eval(), (3, 18, 18)),
    "conv1d": lambda: (TwoConv1d().eval(), (4, 20)),
    "conv_transpose2d": lambda: (ConvThenTransposed().eval(), (3, 10, 10)),
    "conv3d": lambda: (TwoConv3d().eval(), (2, 6, 6, 6)),
}


# ExecuTorch's portable convolution takes 3-D and 4-D inputs only (a 3-D convolution fails at run
# time with 0x12, for torch.export's program alike): conv3d is compared up to the planned program.
RUNNABLE = [name for name in SMALL if name != "conv3d"]


def _batch_spec():
    return {"x": {0: Dim("batch", min=1, max=MAX_BATCH)}}


def _export(export, model, item_shape, **kwargs):
    torch.manual_seed(1)
    x = torch.randn(2, *item_shape)
    with quiet_warnings():
        return export(model, (x,), dynamic_shapes=_batch_spec(), **kwargs)


def _edge(ep):
    from executorch.exir import to_edge
    with quiet_warnings():
        return to_edge(ep)


def _only_range(ep):
    (value_range,) = ep.range_constraints.values()
    return int(value_range.lower), int(value_range.upper)


def _planned_shapes(executorch_program):
    """The shape memory planning gave each tensor of the program, in graph order."""
    return [tuple(node.meta["spec"].shape) for node in executorch_program.exported_program().graph.nodes
            if hasattr(node.meta.get("spec"), "shape")]


def _planned_input_batch(executorch_program) -> int:
    """The batch the user input ``x`` was planned for."""
    (x,) = [node for node in executorch_program.exported_program().graph.nodes
            if node.op == "placeholder" and node.name == "x"]
    return tuple(x.meta["spec"].shape)[0]


def _assert_like_torchs(graphcaps_edge, torchs_edge):
    """graphcap's range is the declared one: torch's upper bound; its lower bound is the declared
    minimum, which torch's engine raises to 2 (it specializes sizes 0 and 1)."""
    lower, upper = _only_range(graphcaps_edge.exported_program())
    torch_lower, torch_upper = _only_range(torchs_edge.exported_program())
    assert upper == torch_upper == MAX_BATCH
    assert 1 <= lower <= torch_lower
    with quiet_warnings():
        executorch_program = graphcaps_edge.to_executorch()
        planned = _planned_shapes(executorch_program)
        torchs_planned = _planned_shapes(torchs_edge.to_executorch())
    assert planned == torchs_planned
    assert _planned_input_batch(executorch_program) == MAX_BATCH


@pytest.mark.parametrize("name", list(SMALL) + ["tv_resnet18"])
def test_edge_program_keeps_the_batch_range_and_plans_the_upper_bound(name):
    model, item_shape = _resnet18() if name == "tv_resnet18" else SMALL[name]()
    _assert_like_torchs(_edge(_export(graphcap.export, model, item_shape)),
                        _edge(_export(torch.export.export, model, item_shape)))


@pytest.mark.slow
def test_a_timm_model_keeps_the_batch_range_as_torchs_does():
    built = build_zoo("timm_vit_tiny_patch16_224")
    with quiet_warnings():
        graphcaps = graphcap.export(built.model, built.args, dynamic_shapes=built.dynamic_shapes)
        torchs = torch.export.export(built.model, built.args, dynamic_shapes=built.dynamic_shapes)
    _assert_like_torchs(_edge(graphcaps), _edge(torchs))


def _run_pte(buffer: bytes, x: torch.Tensor) -> torch.Tensor:
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(buffer).load_method("forward")
    (out,) = method.execute([x])
    return out


@pytest.mark.parametrize("name", RUNNABLE)
def test_pte_runs_on_both_sides_of_16_and_at_the_range_edges(name):
    model, item_shape = SMALL[name]()
    with quiet_warnings():
        buffer = _edge(_export(graphcap.export, model, item_shape)).to_executorch().buffer
    for batch in (1, 15, 16, MAX_BATCH):
        x = torch.randn(batch, *item_shape, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model(x)
        got = _run_pte(buffer, x)
        assert got.shape == expected.shape, f"batch {batch}"
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=f"batch {batch}")


def test_xnnpack_lowering_keeps_the_batch_range():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    model, item_shape = SMALL["conv2d"]()
    with quiet_warnings():
        lowered = to_edge_transform_and_lower(_export(graphcap.export, model, item_shape),
                                              partitioner=[XnnpackPartitioner()])
    assert _only_range(lowered.exported_program())[1] == MAX_BATCH


def _saved_and_loaded(ep):
    buffer = io.BytesIO()
    graphcap.save(ep, buffer)
    buffer.seek(0)
    return graphcap.load(buffer)


@pytest.mark.parametrize("how", ["exported_under_no_grad", "saved_and_loaded", "decomposed_first"])
def test_the_range_does_not_hang_on_what_the_fake_cache_holds(how):
    """torch.export's program keeps the range only while its shape engine's fake-tensor cache holds
    each convolution as the consumer's pass will ask it (grad on, from the export's own trace): its
    program exported under ``no_grad`` or loaded from a file narrows to [2, 15]. graphcap's keeps
    it whatever the cache holds."""
    model, item_shape = SMALL["conv2d"]()
    if how == "exported_under_no_grad":
        with torch.no_grad():
            ep = _export(graphcap.export, model, item_shape)
    else:
        ep = _export(graphcap.export, model, item_shape)
        ep = _saved_and_loaded(ep) if how == "saved_and_loaded" else ep.run_decompositions()
    edge = _edge(ep)
    assert _only_range(edge.exported_program()) == (1, MAX_BATCH)
    with quiet_warnings():
        assert _planned_input_batch(edge.to_executorch()) == MAX_BATCH


@pytest.mark.slow
def test_convnext_keeps_the_range_where_torchs_program_narrows():
    """torchvision's ConvNeXt-tiny: torch.export's edge program reads [2, 15] (one of its
    convolutions misses the fake-tensor cache in ExecuTorch's passes); graphcap's keeps the upper
    bound 64 (its lower bound is 2, as torch's: a layout question of the decomposition asks
    ``batch != 1``)."""
    built = build_zoo("tv_convnext_tiny")
    with quiet_warnings():
        edge = _edge(graphcap.export(built.model, built.args, dynamic_shapes=built.dynamic_shapes))
        planned_batch = _planned_input_batch(edge.to_executorch())
    lower, upper = _only_range(edge.exported_program())
    assert lower <= 2 and upper == MAX_BATCH
    assert planned_batch == MAX_BATCH
