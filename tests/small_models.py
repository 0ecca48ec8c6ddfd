"""The small models the default tests need, built here so a clone of the repository runs them alone.

Each builder in ``BUILDERS`` returns a ``Model`` record (model, example inputs, a dynamic-shapes spec and a
second input set with other sizes on every dynamic dimension). They share names, configs and
input shapes with the cases of the public zoo in ``../shared/zoo`` (which ``conftest.py`` prefers
when it is there, for the whole zoo); the library models come from their public constructors and
configs with seeded random weights, so nothing is downloaded.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.export import Dim

TEXT_VOCAB = 1000


@dataclass
class Model:
    model: nn.Module
    args: tuple
    kwargs: dict
    dynamic_shapes: Any = None
    args2: tuple | None = None
    kwargs2: dict | None = None


BUILDERS: dict[str, Callable[[], Model]] = {}


def _builder(name: str):
    def add(fn: Callable[[], Model]) -> Callable[[], Model]:
        BUILDERS[name] = fn
        return fn
    return add


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch_dim() -> Dim:
    return Dim("batch", min=1, max=64)


# ---- torchvision: images of 224x224, batch 2 then 3, the batch dynamic ----

def _torchvision(constructor_name: str) -> Model:
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, constructor_name)(weights=None).eval()
    first = torch.randn(2, 3, 224, 224, generator=_rng(1))
    second = torch.randn(3, 3, 224, 224, generator=_rng(2))
    return Model(model, (first,), {}, ({0: _batch_dim()},), (second,), {})


for _name in ("resnet18", "squeezenet1_0", "mobilenet_v3_small"):
    BUILDERS[f"tv_{_name}"] = lambda _name=_name: _torchvision(_name)


# ---- transformers: tiny random configs, token ids (batch 2 x 16, then 3 x 24) and a mask ----

def _token_inputs(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, TEXT_VOCAB, (batch, length), generator=_rng(seed))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length - 3:] = 0  # the last row is padded on the right
    return {"input_ids": ids, "attention_mask": mask}


def _text_model(model: nn.Module, max_positions: int = 128) -> Model:
    batch, seq = _batch_dim(), Dim("seq", min=2, max=max_positions)
    spec = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return Model(model.eval(), (), _token_inputs(2, 16, 1), spec, (), _token_inputs(3, 24, 2))


@_builder("hf_bert")
def _bert() -> Model:
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=TEXT_VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=128)
    return _text_model(BertModel(config))


def _gpt2(**config_extra: Any) -> Model:
    from transformers import GPT2Config, GPT2Model
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=TEXT_VOCAB, n_embd=128, n_layer=2, n_head=4, n_positions=128, **config_extra)
    return _text_model(GPT2Model(config))


BUILDERS["hf_gpt2"] = lambda: _gpt2(use_cache=False)
BUILDERS["hf_gpt2_cache"] = _gpt2  # the default use_cache=True: a DynamicCache in the output


@_builder("hf_llama")
def _llama() -> Model:
    from transformers import LlamaConfig, LlamaModel
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=TEXT_VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         use_cache=False)
    return _text_model(LlamaModel(config), max_positions=256)


# ---- graphcap's own modules for the input/output and state features ----

class RunningStats(nn.Module):
    """Updates its buffers in place in forward: a running mean and a step counter."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.register_buffer("running_mean", torch.zeros(width))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        out = self.lin(x)
        self.steps.add_(1)
        self.running_mean.mul_(0.9).add_(out.detach().mean(0), alpha=0.1)
        return out - self.running_mean + self.steps.float()


@_builder("custom_buffer_inplace")
def _running_stats() -> Model:
    torch.manual_seed(0)
    first, second = torch.randn(4, 32, generator=_rng(1)), torch.randn(6, 32, generator=_rng(2))
    return Model(RunningStats().eval(), (first,), {}, ({0: _batch_dim()},), (second,), {})


class NestedContainers(nn.Module):
    """Takes a list and a dict, returns dicts, lists and tuples nested in each other."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, xs, d):
        a = self.lin(xs[0]) + xs[1]
        b = d["scale"] * a + d["bias"]
        return {"out": [a, b], "aux": (b.sum(-1), {"mean": a.mean(0)})}


@_builder("custom_dict_list_io")
def _nested_containers() -> Model:
    torch.manual_seed(0)

    def inputs(batch: int, seed: int) -> tuple:
        g = _rng(seed)
        pair = [torch.randn(batch, 8, generator=g), torch.randn(batch, 8, generator=g)]
        return pair, {"scale": torch.randn(batch, 8, generator=g), "bias": torch.randn(8, generator=g)}

    batch = _batch_dim()
    spec = ([{0: batch}, {0: batch}], {"scale": {0: batch}, "bias": None})
    return Model(NestedContainers().eval(), inputs(3, 1), {}, spec, inputs(5, 2), {})


class KeywordOnly(nn.Module):
    """Keyword-only tensors, one optional, and a python float."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, *, x, y=None, scale: float = 1.0):
        out = self.lin(x) * scale
        if y is not None:
            out = out + y
        return out


@_builder("custom_kwargs_only")
def _keyword_only() -> Model:
    torch.manual_seed(0)

    def inputs(batch: int, seed: int) -> dict:
        return {"x": torch.randn(batch, 8, generator=_rng(seed)),
                "y": torch.randn(batch, 4, generator=_rng(seed + 1)), "scale": 0.5}

    batch = _batch_dim()
    spec = {"x": {0: batch}, "y": {0: batch}, "scale": None}
    return Model(KeywordOnly().eval(), (), inputs(3, 1), spec, (), inputs(5, 3))
