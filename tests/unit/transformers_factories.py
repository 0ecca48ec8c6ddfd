"""Tiny transformers models for the file tests (``graphcap export tests/unit/transformers_factories.py:gpt2_cache``)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def _gpt2(use_cache: bool):
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    model.config.use_cache = use_cache
    return model, (torch.randint(0, 64, (1, 8)),)


def gpt2():
    """GPT-2 returning CausalLMOutputWithCrossAttentions (a class transformers registers on import)."""
    return _gpt2(False)


def gpt2_cache():
    """GPT-2 also returning its DynamicCache (a class graphcap flattens by its attributes)."""
    return _gpt2(True)
