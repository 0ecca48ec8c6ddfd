"""The recorder's shortcuts (graphcap.trace.recorder_shortcuts) give exactly the program the long way gives.

Each case exports with the shortcuts on and off and compares everything the two programs hold
(``tests/block_reuse_compare.py``: every node's name, target, arguments and metadata, the printed
program, signature, ranges, module call graph) and, beyond that, the order of every node's
metadata keys. The cases reach what the shortcuts touch: placeholders and outputs of the top
graph and of control-flow subgraphs, a function exported without a module, user frames above
the exported call, and another thread tracing while one records.
"""
from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.fx.experimental import proxy_tensor

import graphcap
from block_reuse_compare import assert_same_program
from conftest import build_zoo
from graphcap.torch_private import fx as fx_private
from graphcap.trace.recorder_shortcuts import recorder_shortcuts


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)) + x)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block(), Block()])
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps.add_(1)
        for block in self.blocks:
            x = block(x)
        # a property read that records a node: its torch_fn counts every property read before it,
        # the trace's own reads of the placeholders' properties included
        return x.sum(-1), x[:, :2], x.T


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: t * 2.0, (x,))


def _both(export):
    # a warm-up first: the first export of a torch.cond in a process counts torch functions
    # differently (its cond node's ``torch_fn``), shortcuts or not
    with recorder_shortcuts(False):
        export()
    with recorder_shortcuts(True):
        on = export()
    with recorder_shortcuts(False):
        off = export()
    return on, off


def _assert_identical(on, off):
    assert_same_program(on, off)
    for (name, a), (_, b) in zip(on.graph_module.named_modules(), off.graph_module.named_modules()):
        if isinstance(a, torch.fx.GraphModule):
            for x, y in zip(a.graph.nodes, b.graph.nodes):
                assert list(x.meta) == list(y.meta), f"{name}.{x.name}: metadata keys in another order"


def test_nested_blocks_static_and_dynamic():
    model, x = Stack(), torch.randn(3, 6)
    _assert_identical(*_both(lambda: graphcap.export(model, (x,))))
    _assert_identical(*_both(lambda: graphcap.export(model, (x,), dynamic_shapes=({0: Dim("b")},))))


def test_control_flow_subgraphs():
    model = Branchy()
    on, off = _both(lambda: graphcap.export(model, (torch.randn(2, 4),)))
    _assert_identical(on, off)
    assert any(n.op == "get_attr" for n in on.graph.nodes)  # the branches are subgraphs


def test_a_function_exported_without_a_module():
    def f(x, y):
        return torch.sin(x) @ y.t() + 1

    _assert_identical(*_both(lambda: graphcap.export(f, (torch.randn(3, 4), torch.randn(5, 4)))))


def test_user_frames_above_the_exported_call_are_kept_the_same_way():
    # a frame named `forward` above the export is a user frame of every node's stack trace:
    # the shortcut finds the frames above the traced function once and must add them all the same
    model, x = Stack(), torch.randn(3, 6)

    class Exporter:
        def forward(self):
            return graphcap.export(model, (x,))

    on, off = _both(Exporter().forward)
    _assert_identical(on, off)
    traces = [n.meta.get("stack_trace") or "" for n in on.graph.nodes if n.op == "call_function"]
    assert traces and all("in forward\n    return graphcap.export(model, (x,))" in t for t in traces)


def test_zoo_resnet18():
    built = build_zoo("tv_resnet18")
    _assert_identical(*_both(lambda: graphcap.export(built.model, built.args, built.kwargs)))


def test_placeholder_traces_are_skipped_only_on_the_recording_thread():
    # torch deletes a placeholder's stack trace right after formatting it; while graphcap records,
    # its thread skips the formatting, any other thread keeps torch's own behaviour
    formatted = []

    class Counting(proxy_tensor.PythonKeyTracer):
        def _filter_traceback_frames(self, summary):
            formatted.append(threading.current_thread().name)
            return super()._filter_traceback_frames(summary)

    def make_placeholder():
        tracer = Counting()
        tracer.graph = torch.fx.Graph()
        tracer.record_stack_traces = True
        node = tracer.create_node("placeholder", "x", (), {})
        assert "stack_trace" not in node.meta and tracer.record_stack_traces

    inside, other_done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        make_placeholder()
        other_done.set()

    thread = threading.Thread(target=other, name="other")
    thread.start()
    with fx_private.dropped_stack_traces_skipped():
        make_placeholder()  # this thread: skipped
        inside.set()
        assert other_done.wait(30)
    thread.join()
    make_placeholder()  # after the block: torch's own again
    assert formatted == ["other", threading.current_thread().name]
    assert proxy_tensor.PythonKeyTracer.create_node is fx_private._torch_create_node


@pytest.mark.parametrize("on", [True, False])
def test_the_switch_reads_the_environment(monkeypatch, on):
    from graphcap.trace import recorder_shortcuts as switch
    monkeypatch.setenv(switch.ENV_VAR, "1" if on else "0")
    assert switch.enabled() is on
    with recorder_shortcuts(not on):
        assert switch.enabled() is (not on)
    assert switch.enabled() is on
