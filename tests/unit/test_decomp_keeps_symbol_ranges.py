"""run_decompositions keeps the program's symbol ranges in the shape engine its values carry.

A fake convolution picks its backend kernel from the batch size (oneDNN / NNPACK: ``batch >= 16``)
and, outside graphcap's trace settings, that choice became a guard in the decomposed program's
shape engine: a batch declared [1, 64] read [2, 15] there, and a consumer that plans memory from
those ranges planned for 15. The recorded operators are the same whichever kernel a backend would
pick, so the retrace runs with those backends off, as export does.
"""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import graphcap


class TwoConvs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.Conv2d(8, 8, 3)

    def forward(self, x):
        return self.b(self.a(x).relu())


def _engine_ranges(ep):
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for size in val.shape:
                if isinstance(size, torch.SymInt):
                    env = size.node.shape_env
                    return {str(s): (int(r.lower), int(r.upper)) for s, r in env.var_to_range.items()}
    raise AssertionError("no symbolic size in the program")


@pytest.mark.parametrize("example_batch", [2, 20])
def test_decomposed_conv_program_keeps_the_declared_batch_range(example_batch):
    model = TwoConvs().eval()
    x = torch.randn(example_batch, 3, 18, 18)
    ep = graphcap.export(model, (x,), dynamic_shapes={"x": {0: Dim("b", min=1, max=64)}})
    decomposed = ep.run_decompositions()
    assert list(_engine_ranges(decomposed).values()) == [(1, 64)]
    assert [(int(r.lower), int(r.upper)) for r in decomposed.range_constraints.values()] == [(1, 64)]
    for batch in (1, 15, 16, 64):  # both sides of the kernel choice's threshold
        x = torch.randn(batch, 3, 18, 18)
        torch.testing.assert_close(decomposed.module()(x), model(x))


def test_backends_are_switched_back_after_the_retrace():
    before = torch._C._get_mkldnn_enabled(), torch._C._get_nnpack_enabled()
    ep = graphcap.export(TwoConvs(), (torch.randn(2, 3, 18, 18),), dynamic_shapes={"x": {0: Dim("b")}})
    ep.run_decompositions()
    assert (torch._C._get_mkldnn_enabled(), torch._C._get_nnpack_enabled()) == before
