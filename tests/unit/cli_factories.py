"""Factories for the command-line tests (``graphcap export tests/unit/cli_factories.py:dynamic``)."""
import torch
import torch.nn as nn

from graphcap import Dim


class Scorer(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.proj = nn.Linear(8, 4)
        self.scale = scale

    def forward(self, tokens, mask):
        return self.proj(tokens).relu() * self.scale + mask.float().sum(-1, keepdim=True)


def dynamic():
    """A model with a dynamic batch shared by both inputs."""
    torch.manual_seed(0)
    batch = Dim("batch", min=1, max=32)
    return (Scorer(), (torch.randn(4, 8), torch.rand(4, 3) > 0.5), {},
            ({0: batch}, {0: batch}))


def dynamic_scaled():
    """The same program with other weights and a constant folded differently (for diff)."""
    torch.manual_seed(1)
    model, args, kwargs, shapes = dynamic()
    model.scale = 2.0
    torch.manual_seed(1)
    model.proj.reset_parameters()
    return model, args, kwargs, shapes


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def counter():
    return Counter(), (torch.randn(2, 3),)


def broken():
    raise ValueError("the factory cannot build its model")


def wrong_shape():
    return nn.Linear(2, 2)


def needs_depth(depth, width=8):
    """A factory with a required argument (``--arg depth=3``)."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)]), (torch.randn(2, width),)


class BranchOnData(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent: export refuses, draft export asserts it at runtime
            return x * 2
        return x - 1


def branch_on_data():
    return BranchOnData(), (torch.ones(3),)


class Fails(nn.Module):
    def forward(self, x):
        return x.view(-1, 7)  # a size bug: 2x3 cannot be viewed as (-1, 7)


def shape_bug():
    return Fails(), (torch.randn(2, 3),)


class GPT2Logits(nn.Module):
    """A transformers GPT-2 whose output is the logits tensor (plain tensors in, plain tensors out)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        return self.lm(input_ids).logits


def gpt2(layers=2, logits_only=True, seed=0):
    """A tiny GPT-2 from a transformers config (no download): ``--arg layers=3``; ``--arg logits_only=False``
    returns transformers' own output class (CausalLMOutputWithCrossAttentions)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=128, n_positions=64, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    lm = GPT2LMHeadModel(config).eval()
    model = GPT2Logits(lm) if logits_only else lm
    input_ids = torch.randint(0, 128, (2, 8))
    # transformers' mask code asks batch != 1, so the batch range starts at 2
    return model, (input_ids,), {}, ({0: Dim("batch", min=2, max=8), 1: Dim("seq", min=2, max=64)},)


class Repeat(nn.Module):
    def forward(self, x, n):
        return x * n


def int_input():
    """A dynamic int input ``n`` in [1, 10] (``graphcap run --input n=7``)."""
    return Repeat(), (torch.randn(3), 4), {}, (None, Dim("n", min=1, max=10))


def static_scorer():
    """The Scorer without a spec, for --infer-shapes: its batch varies across scorer_samples."""
    torch.manual_seed(0)
    return Scorer(), (torch.randn(4, 8), torch.rand(4, 3) > 0.5)


def scorer_samples():
    """Two more samples for static_scorer, with other batch sizes."""
    return [(torch.randn(2, 8), torch.rand(2, 3) > 0.5),
            (torch.randn(6, 8), torch.rand(6, 3) > 0.5)]


def disagreeing_samples():
    """A sample whose tokens are float64 where the example's are float32."""
    return [(torch.randn(2, 8, dtype=torch.float64), torch.rand(2, 3) > 0.5)]


def no_samples():
    return []


class TwoHeads(nn.Module):
    def forward(self, x, y):
        return x.sum(-1), y * 2


def two_heads():
    """Two inputs whose sizes do not depend on each other."""
    return TwoHeads(), (torch.randn(4, 8), torch.randn(3, 5))
