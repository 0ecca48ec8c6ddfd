"""A convolution re-run in a program's fake mode asks nothing of the symbolic batch.

Consumers (ExecuTorch's passes, torch's ``ExportPass``) re-run each operator of a program on its
``meta["val"]`` fakes, in the program's fake mode and with the user's backend switches (oneDNN,
NNPACK on by default). torch's fake convolution picks a backend kernel from the batch size, which
would add the guard ``batch < 16`` to the program's shape engine. graphcap's fake modes run the
convolution family with the backends off (``torch_private.fake.tracing_fake_mode``); the switches
are the user's again when the call returns.
"""
from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import graphcap
from graphcap.torch_private.dispatch import backend_kernel_switches


class TwoConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.ConvTranspose2d(8, 4, 3)

    def forward(self, x):
        return self.b(self.a(x).relu())


def _switches():
    """(oneDNN, cuDNN, NNPACK) enabled, as the process has them."""
    return tuple(get() for get, _ in backend_kernel_switches())


def _program(how: str):
    ep = graphcap.export(TwoConv().eval(), (torch.randn(2, 3, 12, 12),),
                         dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})
    if how == "decomposed":
        return ep.run_decompositions()
    if how == "loaded":
        buffer = io.BytesIO()
        graphcap.save(ep, buffer)
        buffer.seek(0)
        return graphcap.load(buffer)
    return ep


def _rerun_convolutions(ep) -> int:
    """Re-run every convolution node (``conv2d`` and ``conv_transpose2d`` before decomposition,
    ``convolution`` after) on fakes of its arguments, each once with ``requires_grad``
    flipped so that the fake-tensor cache cannot answer; return how many ran."""
    ran = 0
    for node in ep.graph.nodes:
        if node.op != "call_function" or "conv" not in str(node.target):
            continue
        args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args]
        fake_mode = args[0].fake_mode
        with fake_mode:
            for requires_grad in (False, True):
                x = args[0].detach().requires_grad_(requires_grad)
                out = node.target(x, *args[1:])
                assert out.stride() == node.meta["val"].stride()
                ran += 1
    return ran


@pytest.mark.parametrize("how", ["exported", "decomposed", "loaded"])
def test_rerun_with_the_backends_on_adds_no_guard_and_keeps_the_range(how):
    ep = _program(how)
    shape_env = next(n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"
                     and n.name == "x").fake_mode.shape_env
    guards_before = list(shape_env.guards)
    ranges_before = dict(shape_env.var_to_range)
    before = _switches()
    with torch.backends.mkldnn.flags(enabled=True), torch.backends.nnpack.flags(enabled=True):
        assert _rerun_convolutions(ep) == 4
        assert _switches()[0] and _switches()[2]   # the user's switches, back after each call
    assert _switches() == before
    assert list(shape_env.guards) == guards_before
    assert dict(shape_env.var_to_range) == ranges_before
    assert {int(r.upper) for r in ep.range_constraints.values()} == {64}


def test_graphcaps_calls_leave_the_users_backend_switches_as_they_were():
    """Only fake convolutions in graphcap's modes run with the backends off: exporting, decomposing
    and running a program leave the process's switches as the user set them, on or off."""
    model = TwoConv().eval()
    x = torch.randn(3, 3, 12, 12)
    for enabled in (True, False):
        with torch.backends.mkldnn.flags(enabled=enabled), torch.backends.nnpack.flags(enabled=enabled):
            before = _switches()
            ep = graphcap.export(model, (torch.randn(2, 3, 12, 12),),
                                 dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})
            ep = ep.run_decompositions()
            assert _switches() == before
            torch.testing.assert_close(ep.module()(x), model(x))
            assert _switches() == before
