"""Hot sections run with room on CPython's frame stack (graphcap/frame_stack.py).

The mechanism: calls made below ``with_room`` never map a frame-stack chunk of their own, at
any depth of the caller (counted as page faults, not timed). The export: with the room and
without it the programs are identical (names, metadata, stack traces, guards, ranges).
"""
from __future__ import annotations

import resource
import sys

import pytest
import torch
from torch import nn

import graphcap
from block_reuse_compare import program_facts
from graphcap import frame_stack
from graphcap.trace import block_reuse


def _leaf(i: int) -> int:
    return i + 1


# a frame (~0.5 KB) wider than one step of the caller's recursion below, so that some depth puts it
# across a chunk's end
_leaf.__code__ = _leaf.__code__.replace(co_stacksize=64)


def _loop(calls: int) -> int:
    total = 0
    for i in range(calls):
        total += _leaf(i)
    return total


def _faults_at_each_depth(run, depths: range, calls: int = 400) -> list[int]:
    """Minor page faults of ``run(_loop, calls)`` made from each caller depth in ``depths``."""
    faults = []

    def at(depth: int) -> None:
        if depth:
            at(depth - 1)
            return
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        run(_loop, calls)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    for depth in depths:
        at(depth)
    return faults


def test_calls_below_with_room_map_no_stack_memory_at_any_depth():
    depths = range(0, 400)  # frames of ``at`` are ~100 bytes: several 16 KB chunk boundaries
    plain = _faults_at_each_depth(lambda fn, n: fn(n), depths)
    roomy = _faults_at_each_depth(frame_stack.with_room, depths)
    def enlarged_loop(calls: int) -> int:
        return _loop(calls)
    frame_stack.large_frame(enlarged_loop)
    wrapped = _faults_at_each_depth(lambda fn, n: enlarged_loop(n), depths)
    # without room, some depth puts _leaf's frame across a chunk's end: a fresh chunk per call
    assert max(plain) >= 400, max(plain)
    # with room every depth runs the loop inside one fresh chunk (a few pages for the chunk itself)
    assert max(roomy) < 40, max(roomy)
    assert max(wrapped) < 40, max(wrapped)


def test_with_room_returns_and_raises_as_the_call():
    assert frame_stack.with_room(lambda a, b=0: a - b, 5, b=2) == 3
    assert frame_stack.large_frame(lambda a, b=0: a - b)(5, b=2) == 3
    with pytest.raises(KeyError):
        frame_stack.with_room({}.__getitem__, "missing")


def test_a_deep_module_tree_costs_no_frame_per_level(monkeypatch):
    """The room adds no frame per module level (each would count against the recursion limit):
    the stack below a nested module grows by as many frames per level with it as without."""
    depths = []

    class Leaf(nn.Module):
        def forward(self, x):
            frame, n = sys._getframe(), 0
            while frame is not None:
                frame, n = frame.f_back, n + 1
            depths.append(n)
            return x + 1

    class Wrap(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) + 1

    def frames_per_level() -> float:
        depths.clear()
        for levels in (10, 30):
            model = Leaf()
            for _ in range(levels):
                model = Wrap(model)
            graphcap.export(model.eval(), (torch.randn(1, 2),))
        return (depths[-1] - depths[0]) / 20

    with_room = frames_per_level()
    with monkeypatch.context() as m:
        _without_room(m)
        without = frames_per_level()
    assert with_room == without, (with_room, without)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        h = self.norm(self.proj(x))
        if x.shape[1] > 3:  # a guard on the symbolic length, from a submodule's line
            h = h * 2
        return torch.relu(h) + x


class Stack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x).sum(-1)


def _without_room(monkeypatch):
    monkeypatch.setattr(frame_stack, "_call", lambda fn, args, kwargs: fn(*args, **kwargs))
    call_module = block_reuse.BlockReuse._call_module
    monkeypatch.setattr(call_module, "__code__", call_module.small_code)


def _llama():
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, use_cache=False)
    torch.manual_seed(0)
    return LlamaModel(cfg).eval(), (torch.randint(0, 100, (1, 8)),), ({1: graphcap.Dim("s", min=2, max=64)},)


def _stack(low=4):
    torch.manual_seed(0)
    return Stack().eval(), (torch.randn(2, 6, 16),), ({1: graphcap.Dim("seq", min=low, max=32)},)


@pytest.mark.parametrize("case", [_stack, _llama], ids=["guarded_blocks", "llama_dynamic"])
def test_program_is_the_same_with_and_without_room(case, monkeypatch):
    model, args, spec = case()
    roomy = graphcap.export(model, args, dynamic_shapes=spec)
    with monkeypatch.context() as m:
        _without_room(m)
        plain = graphcap.export(model, args, dynamic_shapes=spec)
    a, b = program_facts(roomy), program_facts(plain)
    for name in a["graphs"]:
        assert a["graphs"][name] == b["graphs"][name], name
    assert a == b
    assert roomy.module().code == plain.module().code  # the guards the module checks
    stack_traces = [n.meta.get("stack_trace") for n in roomy.graph.nodes if n.op == "call_function"]
    assert any(s and "forward" in s for s in stack_traces)
    assert not any(s and "graphcap/frame_stack.py" in s for s in stack_traces)


def test_refusal_names_the_same_user_line_with_and_without_room(monkeypatch):
    model, args, spec = _stack(low=2)  # the blocks' branch needs seq > 3: refused, at the block's line
    with pytest.raises(graphcap.errors.ConstraintViolationError) as roomy:
        graphcap.export(model, args, dynamic_shapes=spec)
    with monkeypatch.context() as m:
        _without_room(m)
        with pytest.raises(graphcap.errors.ConstraintViolationError) as plain:
            graphcap.export(model, args, dynamic_shapes=spec)
    assert str(roomy.value) == str(plain.value)
    assert "x.shape[1] > 3" in str(roomy.value)
