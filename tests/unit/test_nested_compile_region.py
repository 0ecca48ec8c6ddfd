"""A function marked ``torch.compiler.nested_compile_region`` exports, its operators inlined.

In eager such a function is a plain call; torch.export's program inlines it. graphcap's export
failed with a RecursionError: torch's stand-in for the call sees an export running and hands it to
``torch.compile``, which skips the frame under graphcap's recording and runs it eagerly, calling
the stand-in again. While graphcap records, the call is now the plain function (on that thread
only), so the program is torch.export's."""
from __future__ import annotations

import importlib
import io

import pytest
import torch

import graphcap
from graphcap import Dim


@torch.compiler.nested_compile_region
def _block(x):
    return x.sin() * 2


class CallsARegionTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return _block(self.lin(x)) + _block(x + 1)


def _ops(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("strict", [False, True])
def test_the_region_is_inlined_as_torch_export_inlines_it(strict):
    torch.manual_seed(0)
    model = CallsARegionTwice()
    ours = graphcap.export(model, (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}},
                           strict=strict)
    theirs = torch.export.export(model, (torch.randn(4, 3),), strict=strict,
                                 dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=32)}})
    if strict and "invoke_subgraph" in _ops(theirs):
        assert _ops(ours) == _ops(theirs)  # torch 2.10-2.12's dynamo keeps the region a subgraph call
    else:
        assert _ops(ours) == ["aten.linear.default", "aten.sin.default", "aten.mul.Tensor", "aten.add.Tensor",
                              "aten.sin.default", "aten.mul.Tensor", "aten.add.Tensor"]
        if "invoke_subgraph" not in _ops(theirs):  # torch 2.10's non-strict export keeps the call too
            assert _ops(ours) == _ops(theirs)
    for batch in (1, 4, 32):
        x = torch.randn(batch, 3)
        torch.testing.assert_close(ours.module()(x), model(x))
    x = torch.randn(5, 3)
    torch.testing.assert_close(ours.run_decompositions().module()(x), model(x))
    buf = io.BytesIO()
    graphcap.save(ours, buf)
    buf.seek(0)
    torch.testing.assert_close(graphcap.load(buf).module()(x), model(x))


def test_torchs_stand_in_is_back_after_the_export_and_after_a_failed_one():
    module = importlib.import_module("torch._higher_order_ops.invoke_subgraph")
    original = module.invoke_subgraph_placeholder

    class Fails(torch.nn.Module):
        def forward(self, x):
            return _block(x) @ torch.ones(5, 5)  # (3,) @ (5, 5): a shape error while tracing

    graphcap.export(CallsARegionTwice(), (torch.randn(2, 3),))
    assert module.invoke_subgraph_placeholder is original
    with pytest.raises(graphcap.GraphcapError):
        graphcap.export(Fails(), (torch.randn(3),))
    assert module.invoke_subgraph_placeholder is original
    torch.testing.assert_close(_block(torch.ones(2)), torch.ones(2).sin() * 2)  # eager's plain call
