"""Repeated blocks traced once (graphcap.trace.block_reuse): what is replayed, what falls back.

Each case exports with reuse on and off and asserts the two programs are identical in every
respect (``tests/block_reuse_compare.py``), that the program computes eager's result, and whether
the repeated calls were replayed (``block_reuse.LAST_STATS``).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import graphcap
from block_reuse_compare import assert_same_program, export_both
from graphcap.trace import block_reuse


class Block(nn.Module):
    def __init__(self, dim=8, layer_idx=0, scale=1.0):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.layer_idx = layer_idx  # differs between blocks; read only where a subclass reads it
        self.scale = scale

    def forward(self, x, bias=None):
        h = self.norm(self.proj(x)) * self.scale
        if bias is not None:
            h = h + bias
        return torch.relu(h) + x


class Stack(nn.Module):
    def __init__(self, block=Block, n=4, **kw):
        super().__init__()
        self.blocks = nn.ModuleList([block(layer_idx=i, **kw) for i in range(n)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _check(model, args, dynamic_shapes=None, replayed=True):
    model.eval()
    a, b, stats = export_both(model, args, dynamic_shapes=dynamic_shapes)
    assert_same_program(a, b)
    expected = model(*args)
    torch.testing.assert_close(a.module()(*args), expected)
    if replayed:
        assert stats.get("replayed", 0) > 0, stats
    else:
        assert stats.get("replayed", 0) == 0, stats
    return a, stats


def test_identical_blocks_replayed_static():
    _, stats = _check(Stack(), (torch.randn(3, 8),))
    # block 0's input needs no grad, block 1's does (it comes out of block 0): both are recorded,
    # blocks 2 and 3 are copied from block 1's recording
    assert stats["recorded"] == 2 and stats["replayed"] == 2 and stats.get("copied") == 2


def test_identical_blocks_replayed_dynamic():
    x = torch.randn(3, 8)
    _, stats = _check(Stack(), (x,), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=64)},))
    assert stats["replayed"] == 2


def test_blocks_called_from_different_lines_get_their_own_stack_traces():
    class TwoCalls(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            y1 = self.a(x)
            y = self.b(x)
            return y1 + y

    ep, _ = _check(TwoCalls(), (torch.randn(2, 8),))
    in_b = [n.meta["stack_trace"] for n in ep.graph.nodes
            if n.op == "call_function" and n.meta.get("stack_trace") and len(n.meta["nn_module_stack"]) > 1
            and list(n.meta["nn_module_stack"].values())[1][0] == "b"]
    assert in_b and all("y = self.b(x)" in t and "y1 = self.a(x)" not in t for t in in_b)


def test_same_block_called_twice_gets_call_keys():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.blk, self.other = Block(), Block()

        def forward(self, x):
            return self.other(self.blk(self.blk(x)))

    ep, _ = _check(Twice(), (torch.randn(2, 8),))
    keys = {k for n in ep.graph.nodes for k in (n.meta.get("nn_module_stack") or {})}
    assert "L__self__blk@1" in keys and "L__self__blk.proj@1" in keys


def test_attribute_that_selects_behaviour_is_traced():
    class Alternating(Block):
        def forward(self, x, bias=None):
            h = super().forward(x)
            return h * 2 if self.layer_idx % 2 else h  # layer_idx read: not replayed across layers

    _check(Stack(block=Alternating), (torch.randn(2, 8),), replayed=False)


def test_differing_scalar_attribute_is_traced():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(scale=1.0 + i) for i in range(3)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    ep, _ = _check(Scaled(), (torch.randn(2, 8),), replayed=False)
    assert {2.0, 3.0} <= {a for n in ep.graph.nodes for a in n.args if isinstance(a, float)}


def test_python_side_effect_on_the_module_is_traced():
    class Counting(Block):
        def forward(self, x, bias=None):
            self.calls = getattr(self, "calls", 0) + 1
            return super().forward(x)

    model = Stack(block=Counting)
    _check(model, (torch.randn(2, 8),), replayed=False)


COUNTER = 0


class _GlobalCounting(Block):
    def forward(self, x, bias=None):
        global COUNTER
        COUNTER += 1
        return super().forward(x)


def test_python_side_effect_on_a_global_is_traced():
    global COUNTER
    model = Stack(block=_GlobalCounting).eval()
    with block_reuse.reuse_repeated_blocks(True):
        COUNTER = 0
        graphcap.export(model, (torch.randn(2, 8),))
        assert COUNTER == 4, "every block's forward ran"
        assert block_reuse.LAST_STATS.get("replayed", 0) == 0


def test_input_list_appended_to_is_traced():
    class Appending(Block):
        def forward(self, x, seen):
            seen.append(1)
            return super().forward(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Appending() for _ in range(3)])

        def forward(self, x):
            seen = []
            for b in self.blocks:
                x = b(x, seen)
            return x * len(seen)

    _check(Outer(), (torch.randn(2, 8),), replayed=False)


def test_hooked_block_is_traced():
    model = Stack()
    model.blocks[2].register_forward_hook(lambda m, i, o: o * 3)
    with block_reuse.reuse_repeated_blocks(True):
        ep = graphcap.export(model.eval(), (torch.randn(2, 8),))
        replayed = block_reuse.LAST_STATS.get("replayed", 0)
    x = torch.randn(2, 8)
    torch.testing.assert_close(ep.module()(x), model(x))
    assert replayed == 1  # block 3 (from block 1's recording); block 2 (hooked) traced


def test_guard_learnt_in_block_is_not_replayed_across():
    class Guarded(Block):
        def forward(self, x, bias=None):
            torch._check(x.shape[0] > 4)  # the shape engine learns a range while the first block runs
            return super().forward(x)

    x = torch.randn(6, 8)
    model = Stack(block=Guarded).eval()
    a, b, stats = export_both(model, (x,),
                              dynamic_shapes=({0: graphcap.Dim.AUTO},))
    assert_same_program(a, b)
    # block 0 taught the engine something: never replayed; the later blocks learn nothing new
    assert stats.get("recorded", 0) >= 1 and stats.get("replayed", 0) <= 2
    torch.testing.assert_close(a.module()(x), model(x))


def test_differing_parameter_shapes_are_traced():
    class Widths(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8 * (i + 1)), nn.Linear(8 * (i + 1), 8))
                                         for i in range(3)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    _check(Widths(), (torch.randn(2, 8),), replayed=False)


def test_inputs_of_other_shapes_are_traced():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            return self.a(x) + self.b(x[:1])

    _check(Mixed(), (torch.randn(2, 8),), replayed=False)


def test_buffer_mutation_in_block_is_traced():
    class Running(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)) for _ in range(3)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    model = Running().train()
    a, b, stats = export_both(model, (torch.randn(4, 8),))
    assert_same_program(a, b)
    assert stats.get("replayed", 0) == 0  # add_ on num_batches_tracked: an operator that writes


def test_reuse_turned_off():
    with block_reuse.reuse_repeated_blocks(False):
        graphcap.export(Stack().eval(), (torch.randn(2, 8),))
        assert block_reuse.LAST_STATS.get("replayed", 0) == 0


def test_environment_variable_turns_reuse_off():
    here, tests = os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))
    code = ("import torch, graphcap\n"
            "from graphcap.trace import block_reuse\n"
            f"import sys; sys.path[:0] = [{here!r}, {tests!r}]\n"
            "from test_block_reuse import Stack\n"
            "graphcap.export(Stack().eval(), (torch.randn(2, 8),))\n"
            "print(block_reuse.LAST_STATS.get('replayed', 0))\n")
    env = {**os.environ, "GRAPHCAP_REUSE_BLOCKS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_llama_layers_replayed(dynamic):
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, use_cache=False)
    torch.manual_seed(0)
    model = LlamaModel(cfg).eval()
    ids = torch.randint(0, 100, (1, 8))
    spec = ({1: graphcap.Dim("s", min=2, max=64)},) if dynamic else None
    a, b, stats = export_both(model, (ids,), dynamic_shapes=spec)
    assert_same_program(a, b)
    assert stats["replayed"] >= 2  # layers 1 and 2 (layer_idx differs, never read without a cache)
    torch.testing.assert_close(a.module()(ids).last_hidden_state, model(ids).last_hidden_state)


def test_graph_module_children_are_traced_inline():
    """The tracer inlines a graph module's call in no module scope (torch.export's hints_wrapper
    bodies, a symbolically traced submodule): such calls are never recorded or replayed."""
    class Traced(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([torch.fx.symbolic_trace(nn.Sequential(nn.Linear(8, 8), nn.ReLU()))
                                         for _ in range(3)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    _check(Traced(), (torch.randn(2, 8),), replayed=False)


class _Scripted(torch.jit.ScriptModule):
    """A TorchScript module: its registries are TorchScript wrappers, not dicts (iterating one
    indexes it by position, which it refuses)."""

    @torch.jit.script_method
    def _forward(self, x: torch.Tensor):
        return x.sin()

    def forward(self, x):
        return self._forward(x)


class _TwoScriptedAndTwoPlain(nn.Module):
    def __init__(self):
        super().__init__()
        self.scripted = nn.ModuleList([_Scripted(), _Scripted()])
        self.plain = nn.ModuleList([Block(4) for _ in range(4)])

    def forward(self, x):
        for m in self.scripted:
            x = m(x)
        for m in self.plain:
            x = m(x)
        return x


def test_script_modules_in_the_tree_do_not_stop_the_structure_count():
    """A ScriptModule's buffer registry iterates by key only through ``keys()``: the structure
    count reads it that way, the program is the one a full trace gives and eager's result."""
    model, x = _TwoScriptedAndTwoPlain(), torch.randn(3, 4)
    with_reuse, without, stats = export_both(model, (x,))
    assert_same_program(with_reuse, without)
    torch.testing.assert_close(with_reuse.module()(x), model(x))
    assert stats.get("replayed", 0) >= 1, stats  # the plain twins still replay
