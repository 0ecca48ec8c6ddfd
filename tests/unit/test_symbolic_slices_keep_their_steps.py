"""t[a:b, c::d] with a symbolic bound is rewritten into slice calls: each slice keeps its own
step (a later slice's step once leaked into the earlier ones, a wrong result)."""
import torch

import graphcap
from graphcap import Dim


class TwoSlices(torch.nn.Module):
    def forward(self, x):
        return x[: x.shape[0] - 1, 1::2]


class StepFirst(torch.nn.Module):
    def forward(self, x):
        return x[::3, : x.shape[1] - 1]


def test_each_slice_keeps_its_own_step():
    for model, x, spec in ((TwoSlices(), torch.randn(6, 4), {"x": {0: Dim("n", min=2), 1: Dim("m", min=2)}}),
                           (StepFirst(), torch.randn(7, 5), {"x": {0: Dim("n", min=2), 1: Dim("m", min=2)}})):
        ep = graphcap.export(model, (x,), dynamic_shapes=spec)
        for shape in ((6, 4), (9, 3), (7, 5)):
            y = torch.randn(shape)
            assert torch.equal(ep.module()(y), model(y)), (type(model).__name__, shape)
