"""Copies of symbolically sized blocks make their values as strided views (block_reuse.symbolic_values_as_views).

A copied value with symbolic sizes is a view of a one-dimensional storage of its extent (worked
out once per recorded value) and a view of an earlier value is ``as_strided`` of it, instead of
``empty_strided`` / ``set_`` computing storage sizes and contiguity in symbols for every copy.
The program must be the one the other construction — and a full trace — gives: the same
nodes and metadata, and the same values: sizes, strides, offsets, which values share a
storage, and each storage's size.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import graphcap
from block_reuse_compare import assert_same_program
from graphcap.torch_private.fake import storage_key
from graphcap.trace import block_reuse


def _values(ep) -> list:
    """Each node's value layouts, its storage named by the first node that holds it, and the storage's size."""
    first_holder: dict = {}
    out = []
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        for j, t in enumerate(val if isinstance(val, (tuple, list)) else (val,)):
            if not isinstance(t, torch.Tensor):
                continue
            key = storage_key(t)
            holder = first_holder.setdefault(key, (node.name, j))
            out.append((node.name, j, str(tuple(t.shape)), str(t.stride()), str(t.storage_offset()), str(t.dtype),
                        t.requires_grad, holder, str(t.untyped_storage().nbytes())))
    return out


def _export(model, args, spec, *, reuse=True, views=True):
    with block_reuse.reuse_repeated_blocks(reuse), block_reuse.symbolic_values_as_views(views):
        block_reuse.LAST_STATS.clear()
        ep = graphcap.export(model, args, dynamic_shapes=spec)
        return ep, dict(block_reuse.LAST_STATS)


class ViewBlock(nn.Module):
    """Views of an input, of an earlier value, with another dtype, and a fresh size of its own."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x, table):
        h = self.proj(x)                                  # (b, s, 32): a storage of its own
        heads = h.view(h.shape[0], h.shape[1], 4, 8).transpose(1, 2)  # views of an earlier value
        rows = table[: x.shape[1]].unsqueeze(0)           # a view of an input
        bits = h.view(torch.int32)                        # a view with another dtype
        flat = torch.cat([h, h], dim=1)                   # a size of the call's own making (2 * s)
        y = heads.transpose(1, 2).reshape(h.shape) + rows + bits.float() * 0
        return y[..., :16] + flat[:, : x.shape[1], 16:]


class ViewStack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = nn.ModuleList([ViewBlock() for _ in range(n)])
        self.register_buffer("table", torch.randn(64, 32))

    def forward(self, x):
        for b in self.blocks:
            x = b(x, self.table)
        return x


def _llama():
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, use_cache=False)
    torch.manual_seed(0)
    return LlamaModel(cfg).eval(), (torch.randint(0, 100, (1, 8)),), ({1: graphcap.Dim("s", min=2, max=64)},)


def _view_stack():
    torch.manual_seed(0)
    return ViewStack().eval(), (torch.randn(2, 6, 16),), ({1: graphcap.Dim("seq", min=2, max=32)},)


@pytest.mark.parametrize("case", [_view_stack, _llama], ids=["views", "llama"])
def test_copies_as_views_give_the_same_program_and_values(case):
    model, args, spec = case()
    viewed, stats = _export(model, args, spec, views=True)
    built, built_stats = _export(model, args, spec, views=False)
    full, _ = _export(model, args, spec, reuse=False)
    assert stats.get("copied", 0) >= 2 and built_stats.get("copied", 0) == stats["copied"], (stats, built_stats)
    assert_same_program(viewed, built)
    assert_same_program(viewed, full)
    assert _values(viewed) == _values(built)
    assert _values(viewed) == _values(full)
    symbolic = [v for v in _values(viewed) if "s" in v[2]]
    assert len(symbolic) > 20  # the copies' values kept their symbolic sizes


def test_copied_program_runs_as_eager():
    model, args, spec = _view_stack()
    ep, _ = _export(model, args, spec)
    for length in (2, 6, 17):
        x = torch.randn(2, length, 16)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_a_layout_not_known_nonnegative_is_built_as_before():
    """An extent the shape engine cannot tell is nonnegative (an unbacked size) is not given to
    ``torch.empty``, whose size check would add a runtime assert: ``empty_strided`` builds it."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    from graphcap.torch_private.fake import meta_with_layout, storage_extent

    def asserts(env):
        return sum(len(v) for v in env.deferred_runtime_asserts.values())

    for make in ("backed", "unbacked"):
        env, plain_env = ShapeEnv(), ShapeEnv()
        sizes = []
        for e in (env, plain_env):
            if make == "backed":
                symbol = e.create_symbol(16, ConstantSource("s"), dynamic_dim=DimDynamic.DYNAMIC)
                sizes.append(e.create_symintnode(symbol, hint=16))
            else:
                sizes.append(e.create_unbacked_symint())
        (n, plain_n) = sizes
        extent = storage_extent((n, 8), (8, 1))
        assert (extent is None) == (make == "unbacked")
        made = meta_with_layout((n, 8), (8, 1), 0, torch.float32, extent)
        plain = torch.empty_strided((plain_n, 8), (8, 1), dtype=torch.float32, device="meta")
        assert (str(made.shape), made.stride(), str(made.untyped_storage().nbytes())) == \
            (str(plain.shape), plain.stride(), str(plain.untyped_storage().nbytes()))
        assert (len(env.guards), asserts(env)) == (len(plain_env.guards), asserts(plain_env))
