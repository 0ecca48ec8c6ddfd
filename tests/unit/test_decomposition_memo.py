"""run_decompositions copies a call identical to an earlier one; the program is the one a full retrace gives.

Each program is decomposed with the copying on and off (the switch of export's block reuse) and
compared node by node: names, targets, arguments, every metadata entry, and each value's layout
and the storages values share.
"""
from __future__ import annotations

import torch

import graphcap
from graphcap.passes.decomposition_memo import LAST_STATS
from graphcap.trace.block_reuse import reuse_repeated_blocks


class Block(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)  # native_layer_norm: several outputs, read by getitem
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim, bias=False)
        self.heads = 2

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)  # views of one storage
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, d)
        h = x + self.out(a)
        return h + torch.nn.functional.silu(h @ self.out.weight.t()).softmax(-1)


class Stack(torch.nn.Module):
    def __init__(self, n: int = 4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x, x.t() if x.dim() == 2 else x[:, 0]


def _layout_pattern(gm: torch.fx.GraphModule) -> list:
    """Each node's value as layouts, storages numbered by first appearance."""
    storages: dict[int, int] = {}
    pattern = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        items = val if isinstance(val, (tuple, list)) else [val]
        row = []
        for t in items:
            if isinstance(t, torch.Tensor):
                sid = storages.setdefault(t.untyped_storage()._cdata, len(storages))
                row.append((tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad, sid,
                            type(t).__name__))
            else:
                row.append(t)
        pattern.append((node.name, row))
    return pattern


def _meta_without_values(node: torch.fx.Node, seq_nr_base: int = 0) -> dict:
    """Every entry but the values, as text (an operator is compared by its name). ``seq_nr``,
    autograd's process-wide counter, is compared from the program's first one: two retraces
    started at different counts (torch 2.10 numbers placeholders too) are the same program."""
    meta = {k: repr(v) for k, v in node.meta.items() if k not in ("val", "seq_nr")}
    if "seq_nr" in node.meta:
        meta["seq_nr"] = repr(node.meta["seq_nr"] - seq_nr_base)
    return meta


def _first_seq_nr(nodes: list) -> int:
    return min((n.meta["seq_nr"] for n in nodes if isinstance(n.meta.get("seq_nr"), int)), default=0)


def _decomposed_both_ways(model: torch.nn.Module, args: tuple, **export_kwargs):
    ep = graphcap.export(model, args, **export_kwargs)
    with reuse_repeated_blocks(False):
        full = ep.run_decompositions()
    with reuse_repeated_blocks(True):
        copied = ep.run_decompositions()
        count = LAST_STATS["copied"]
    return full, copied, count


def _assert_same_programs(full, copied) -> None:
    assert copied.graph_module.code == full.graph_module.code
    assert str(copied) == str(full)
    a, b = list(full.graph.nodes), list(copied.graph.nodes)
    def by_names(n: torch.fx.Node) -> tuple:
        return (n.name, n.op, n.target, repr(torch.fx.node.map_arg((n.args, n.kwargs), lambda m: m.name)))
    assert [by_names(n) for n in a] == [by_names(n) for n in b]
    base_a, base_b = _first_seq_nr(a), _first_seq_nr(b)
    for x, y in zip(a, b):
        assert _meta_without_values(x, base_a) == _meta_without_values(y, base_b), x.name
    assert _layout_pattern(full.graph_module) == _layout_pattern(copied.graph_module)
    assert copied.graph_signature == full.graph_signature
    assert copied.module_call_graph == full.module_call_graph


def test_repeated_blocks_are_copied_and_the_program_is_the_same():
    model = Stack().eval()
    x = torch.randn(2, 8, 16)
    full, copied, count = _decomposed_both_ways(model, (x,))
    assert count > 20  # the later blocks' calls were copied, not decomposed again
    _assert_same_programs(full, copied)
    expected = model(x)
    for got, want in zip(copied.module()(x), expected):
        torch.testing.assert_close(got, want)


def test_copies_are_off_with_block_reuse_off():
    ep = graphcap.export(Stack(2).eval(), (torch.randn(2, 8, 16),))
    with reuse_repeated_blocks(False):
        ep.run_decompositions()
    assert LAST_STATS["copied"] == 0


def test_symbolic_programs_are_retraced_call_by_call():
    model = Stack(3).eval()
    x = torch.randn(2, 8, 16)
    full, copied, count = _decomposed_both_ways(
        model, (x,), dynamic_shapes=({1: graphcap.Dim("seq", min=2, max=64)},))
    assert count == 0
    _assert_same_programs(full, copied)
    symbolic = [n for n in copied.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
                and any(isinstance(d, torch.SymInt) for d in n.meta["val"].shape)]
    assert symbolic  # the sequence length stayed a symbol
    x2 = torch.randn(2, 5, 16)
    torch.testing.assert_close(copied.module()(x2)[0], model(x2)[0])


class Writes(torch.nn.Module):
    """Buffers written in place: the retrace functionalizes, and copies nothing."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps.add_(1)
        for block in self.blocks:
            x = block(x)
        return x


def test_functionalized_retrace_is_unchanged():
    model = Writes().eval()
    full, copied, _ = _decomposed_both_ways(model, (torch.randn(1, 4, 16),))
    _assert_same_programs(full, copied)


def test_llama_layers_are_copied():
    import transformers
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=64, use_cache=False)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        full, copied, count = _decomposed_both_ways(model, (ids,))
    assert count > 30
    _assert_same_programs(full, copied)


def test_a_table_with_a_function_of_the_users_is_run_for_every_call():
    calls = []

    def my_silu(x):
        calls.append(tuple(x.shape))
        return x * torch.sigmoid(x)

    ep = graphcap.export(Stack(3).eval(), (torch.randn(2, 8, 16),))
    table = graphcap.default_decompositions()
    table[torch.ops.aten.silu.default] = my_silu
    with reuse_repeated_blocks(True):
        out = ep.run_decompositions(table)
    assert LAST_STATS["copied"] == 0
    assert len(calls) == 3  # once per block, as a full retrace calls it
    x = torch.randn(2, 8, 16)
    torch.testing.assert_close(out.module()(x)[0], Stack(3).eval()(x)[0], atol=1e30, rtol=0)  # runs
