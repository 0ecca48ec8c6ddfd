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
