"""export_methods on a transformers Llama with a static KV cache: prefill then decode steps equal eager."""
import copy
import importlib.util
import warnings

import pytest
import torch
import transformers  # noqa: F401 (a pinned test dependency)
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

import graphcap

PROMPT = torch.tensor([[3, 14, 15, 9]])


class PrefillDecode(TorchExportableModuleWithStaticCache):
    """transformers' static-cache export recipe with two entry points over its cache buffers."""

    def prefill(self, input_ids, cache_position):
        return self.forward(input_ids=input_ids, cache_position=cache_position)[:, -1:]

    def decode(self, input_ids, cache_position):
        return self.forward(input_ids=input_ids, cache_position=cache_position)


def _tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    lm = LlamaForCausalLM(cfg).eval()
    lm.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                            cache_config={"batch_size": 1, "max_cache_len": 16})
    return PrefillDecode(lm, batch_size=1, max_cache_len=16)


def _generate(prefill, decode, steps):
    with torch.no_grad():
        out = prefill(input_ids=PROMPT, cache_position=torch.arange(PROMPT.shape[1]))
        logits = []
        for i in range(steps):
            logits.append(out)
            tok = out[:, -1].argmax(-1, keepdim=True)
            out = decode(input_ids=tok, cache_position=torch.tensor([PROMPT.shape[1] + i]))
    return logits


@pytest.fixture(scope="module")
def llama_and_progs():
    wrapper = _tiny_llama()
    eager = copy.deepcopy(wrapper)  # before export: the recipe's cache objects are traced through
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progs = graphcap.export_methods(wrapper, {
            "prefill": ((), {"input_ids": PROMPT, "cache_position": torch.arange(4)}),
            "decode": ((), {"input_ids": torch.tensor([[7]]), "cache_position": torch.tensor([4])})})
    # the recipe's cache updates its real buffers in place: no fake tensor is left behind
    assert not [w for w in caught if "fake tensors" in str(w.message)]
    return eager, progs


def test_llama_prefill_then_decode_equals_eager(llama_and_progs, tmp_path):
    eager, progs = llama_and_progs
    prefill, decode = progs["prefill"], progs["decode"]
    assert prefill.constants["key_cache_0"] is decode.constants["key_cache_0"]  # non-persistent cache, shared
    assert decode.state_dict["model.lm_head.weight"] is prefill.state_dict["model.model.embed_tokens.weight"]
    m = progs.module()
    reference = copy.deepcopy(eager)
    want = _generate(reference.prefill, reference.decode, 6)
    got = _generate(m.prefill, m.decode, 6)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    # the file: the same generation from the loaded program
    graphcap.save(progs, tmp_path / "llama.pt2")
    loaded = graphcap.load(tmp_path / "llama.pt2").module()
    for a, b in zip(_generate(loaded.prefill, loaded.decode, 6), want):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                    reason="executorch not installed (the consumers extra, torch 2.14 line)")
def test_llama_as_one_executorch_program_generates_as_eager(llama_and_progs):
    """prefill and decode in one .pte over one shared KV cache (ExecuTorch's share_mutable_buffers)."""
    from test_export_methods_executorch import load_methods, lower_to_pte
    eager, progs = llama_and_progs
    pte = lower_to_pte(progs, initialized=["key_cache", "value_cache"])
    methods = load_methods(pte)
    assert sorted(methods) == ["decode", "prefill"]

    def call(name):
        return lambda input_ids, cache_position: methods[name].execute([input_ids, cache_position])[0]
    reference = copy.deepcopy(eager)
    want = _generate(reference.prefill, reference.decode, 6)
    got = _generate(call("prefill"), call("decode"), 6)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
