"""Another thread's own ``make_fx`` trace (a ``torch.cond`` in it) runs safely beside an export
when it holds ``graphcap.api.TRACING_LOCK``, as docs/threads.md advises.

torch keeps the running ``make_fx`` tracer (and the pre-dispatch mode stack) in process-wide
globals: a trace on another thread that starts while an export traces and ends after it breaks
both (torch's save/restore of the global interleaves) and leaves a finished tracer behind in
the process. Holding the lock makes the two traces take turns; this test checks that they then
do, that both give the right result, and that nothing is left behind.
"""
from __future__ import annotations

import threading

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import graphcap
from graphcap.torch_private.fx import current_make_fx_tracer


def _cond_program(x):
    return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))


def test_a_make_fx_trace_holding_the_tracing_lock_waits_for_a_running_export():
    export_tracing = threading.Event()
    other_waiting = threading.Event()
    order: list[str] = []
    other_result: dict = {}

    class Paused(torch.nn.Module):
        """Holds its trace open until the other thread is waiting for the lock."""

        def forward(self, x):
            export_tracing.set()
            other_waiting.wait(10)
            order.append("export traced")
            return x.sin()

    def other_thread():
        export_tracing.wait(10)
        other_waiting.set()
        try:
            with graphcap.api.TRACING_LOCK:
                order.append("make_fx started")
                gm = make_fx(_cond_program)(torch.ones(3))
            other_result["value"] = gm(torch.full((3,), -2.0))
        except Exception as exc:  # reported below, on the test's thread
            other_result["error"] = exc

    worker = threading.Thread(target=other_thread)
    worker.start()
    ep = graphcap.export(Paused(), (torch.ones(3),))
    worker.join(60)

    assert not worker.is_alive()
    assert "error" not in other_result, other_result.get("error")
    assert order == ["export traced", "make_fx started"]
    torch.testing.assert_close(other_result["value"], torch.full((3,), -3.0))
    torch.testing.assert_close(ep.module()(torch.ones(3)), torch.ones(3).sin())
    assert current_make_fx_tracer() is None  # no tracer left behind in the process


def test_the_tracing_lock_is_reentrant_so_an_export_inside_it_does_not_deadlock():
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    with graphcap.api.TRACING_LOCK:
        ep = graphcap.export(Double(), (torch.ones(2),))
    torch.testing.assert_close(ep.module()(torch.ones(2)), torch.full((2,), 2.0))
