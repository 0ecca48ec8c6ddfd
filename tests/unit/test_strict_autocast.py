"""A `with torch.autocast(...)` block exported with strict=True computes as eager does.

dynamo marks the block with `_enter_autocast` / `_exit_autocast` calls in its graph. Replayed as
plain calls while recording, the markers were only recorded: the block's operators ran in float32,
so the program asserted a float32 value where the block gives bfloat16 and every call failed
(torch.export's strict mode fails the same way). The replay now enters the block itself, so the
strict program is the non-strict one."""
from __future__ import annotations

import io

import pytest
import torch

import graphcap
from graphcap import Dim


class AutocastBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return y.float() + 1, y.dtype == torch.bfloat16


class NestedBlocks(torch.nn.Module):
    """autocast inside no_grad, and a block switching autocast off inside one switching it on."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = self.lin(x)
                with torch.autocast("cpu", enabled=False):
                    full = self.lin(x)
        return low.float() * 2, full


class DecoratedSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _AutocastForward()

    def forward(self, x):
        return self.inner(x).float().relu()


class _AutocastForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, x):
        return self.lin(x)


def _ops(ep):
    return [(str(n.target), [a for a in n.args if not isinstance(a, torch.fx.Node)])
            for n in ep.graph.nodes if n.op == "call_function"]


def _close(got, expected):
    for g, e in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)):
        if isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e)
        else:
            assert g == e


@pytest.mark.parametrize("model_class", [AutocastBlock, NestedBlocks, DecoratedSubmodule])
def test_strict_program_is_the_non_strict_one_and_matches_eager(model_class):
    torch.manual_seed(0)
    model = model_class()
    spec = {"x": {0: Dim("batch", min=1, max=16)}}
    strict = graphcap.export(model, (torch.randn(4, 8),), dynamic_shapes=spec, strict=True)
    non_strict = graphcap.export(model, (torch.randn(4, 8),), dynamic_shapes=spec)
    assert _ops(strict) == _ops(non_strict)
    for batch in (1, 4, 16):
        x = torch.randn(batch, 8)
        _close(strict.module()(x), model(x))


def test_a_strict_autocast_program_decomposes_and_loads():
    torch.manual_seed(0)
    model = AutocastBlock()
    ep = graphcap.export(model, (torch.randn(4, 8),), dynamic_shapes={"x": {0: Dim("batch")}}, strict=True)
    x = torch.randn(3, 8)
    _close(ep.run_decompositions().module()(x), model(x))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    _close(graphcap.load(buf).module()(x), model(x))
