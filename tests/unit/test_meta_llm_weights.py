"""The weightless path for transformers LLMs built on the meta device, as they are.

Build on the meta device, export, save with weights=False, attach the sharded
checkpoint save_pretrained wrote: the rotary tables (non-persistent buffers,
in no checkpoint) get their real values at export, and the outputs equal the
eager model built on the CPU with the same weights.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import transformers

import graphcap
from graphcap.serialize.meta_buffers import materialise

SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
MODELS = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
          "mistral": ("MistralConfig", "MistralForCausalLM")}


def _build(kind: str, dtype=torch.float32):
    config_cls, model_cls = (getattr(transformers, n) for n in MODELS[kind])
    config = config_cls(**SIZES)
    torch.manual_seed(0)
    eager = model_cls(config).to(dtype).eval()
    with torch.device("meta"):
        meta = model_cls(config).to(dtype).eval()
    return config, eager, meta


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_meta_llm_with_sharded_checkpoint_matches_eager(kind, tmp_path):
    _, eager, meta = _build(kind)
    eager.save_pretrained(tmp_path / "ckpt", max_shard_size="40KB")
    assert len(list((tmp_path / "ckpt").glob("model-*.safetensors"))) > 1  # really sharded
    ids = torch.randint(0, 64, (1, 8))
    seq = graphcap.Dim("seq", min=2, max=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(meta, (ids,), {"use_cache": False},
                             dynamic_shapes={"input_ids": {1: seq}, "use_cache": None})
    assert meta.model.rotary_emb.inv_freq.device.type == "meta"  # the user's model is left as it was
    assert ep.constants["model.rotary_emb.inv_freq"].device.type == "cpu"
    graphcap.save(ep, tmp_path / "structure.pt2", weights=False)
    loaded = graphcap.load(tmp_path / "structure.pt2", weights=tmp_path / "ckpt")
    for n in (8, 13):
        ids = torch.randint(0, 64, (1, n))
        with torch.no_grad():
            out = loaded.module()(ids, use_cache=False).logits
            ref = eager(ids, use_cache=False).logits
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_bfloat16_meta_llama_keeps_the_buffer_dtype(tmp_path):
    _, eager, meta = _build("llama", torch.bfloat16)
    eager.save_pretrained(tmp_path / "ckpt", max_shard_size="40KB")
    ids = torch.randint(0, 64, (1, 8))
    ep = graphcap.export(meta, (ids,), {"use_cache": False})
    assert ep.constants["model.rotary_emb.inv_freq"].dtype == meta.model.rotary_emb.inv_freq.dtype
    graphcap.save(ep, tmp_path / "s.pt2", weights=False)
    loaded = graphcap.load(tmp_path / "s.pt2", weights=tmp_path / "ckpt")
    with torch.no_grad():
        torch.testing.assert_close(loaded.module()(ids, use_cache=False).logits,
                                   eager(ids, use_cache=False).logits)


class Table(torch.nn.Module):
    """A buffer computed at construction from an argument the instance does not keep."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("table", torch.arange(n, dtype=torch.float32) / n, persistent=False)


class KeepsItsArgument(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        self.register_buffer("table", torch.arange(n, dtype=torch.float32) / n, persistent=False)


class Net(torch.nn.Module):
    def __init__(self, table_cls):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)  # integer inputs on the CPU index meta weights, as in an LLM
        self.pos = table_cls(4)

    def forward(self, ids):
        return self.emb(ids) + self.pos.table


def test_a_submodule_built_from_its_attributes_gets_values_and_others_a_clear_error(tmp_path):
    torch.manual_seed(0)
    eager = Net(KeepsItsArgument)
    with torch.device("meta"):
        meta = Net(KeepsItsArgument)
    x = torch.tensor([[1, 2, 3], [4, 5, 6]])
    ep = graphcap.export(meta, (x,))
    assert torch.equal(ep.constants["pos.table"], eager.pos.table)
    graphcap.save(ep, tmp_path / "s.pt2", weights=False)
    loaded = graphcap.load(tmp_path / "s.pt2", weights=dict(eager.state_dict()))
    torch.testing.assert_close(loaded.module()(x), eager(x))

    with torch.device("meta"):
        opaque = Net(Table)
    ep = graphcap.export(opaque, (x,))
    assert ep.constants["pos.table"].device.type == "meta"  # cannot be rebuilt safely: left without data
    graphcap.save(ep, tmp_path / "o.pt2", weights=False)
    with pytest.raises(graphcap.SerializationError) as info:
        graphcap.load(tmp_path / "o.pt2", weights=dict(eager.state_dict()))
    assert "pos.table" in str(info.value) and "type(model.<path>)(config)" in info.value.fix


def test_a_rebuilt_module_whose_plain_attributes_differ_is_not_used():
    with torch.device("meta"):
        meta = Net(KeepsItsArgument)
    meta.pos.extra_scale = 3.0  # set after construction: a rebuild would not reproduce the instance
    ep = graphcap.export(meta, (torch.tensor([[1, 2]]),))
    assert ep.constants["pos.table"].device.type == "meta"
    assert materialise(meta, ep) == []
