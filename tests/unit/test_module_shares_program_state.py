"""``ep.module()`` holds the program's own parameters and buffers, as torch.export's does.

What a run updates (a buffer, a parameter written under ``torch.no_grad``) is updated in
``ep.state_dict`` and in the exported model, whose tensors the program holds: eager's behaviour
for one model. Programs exported from one model's methods (torch's ``wrap_method`` recipe) so
share its state, and a large cache a program writes is never held twice in memory.
"""
import pytest
import torch

import graphcap


class DecayedScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("steps", torch.zeros(3))

    def forward(self, x):
        with torch.no_grad():
            self.scale.mul_(0.5)
        self.steps.add_(1)
        return x * self.scale + self.steps


class Counter(torch.nn.Module):
    """Two methods over one buffer: ``bump`` writes it, ``read`` reads it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(2))

    def bump(self, x):
        self.count.add_(x.sum())
        return self.count * 1

    def read(self, x):
        return x + self.count


class _Method(torch.nn.Module):
    def __init__(self, owner, name):
        super().__init__()
        self.owner = owner
        self.name = name

    def forward(self, x):
        return getattr(self.owner, self.name)(x)


@pytest.mark.parametrize("strict", [True, False])
def test_modules_of_one_program_run_as_one_eager_model(strict):
    x = torch.randn(3)
    exported = DecayedScale()
    ep = graphcap.export(exported, (x,), strict=strict)
    eager = DecayedScale()
    first, second = ep.module(), ep.module()
    for program in (first, second, first):
        torch.testing.assert_close(program(x), eager(x).detach())
    torch.testing.assert_close(ep.state_dict["scale"].detach(), eager.scale.detach())
    torch.testing.assert_close(exported.steps, eager.steps)
    assert first.steps is second.steps is ep.state_dict["steps"]
    assert isinstance(first.scale, torch.nn.Parameter) and first.scale.requires_grad


@pytest.mark.parametrize("strict", [True, False])
def test_programs_of_one_models_methods_share_its_buffer(strict):
    owner = Counter()
    x = torch.ones(2)
    bump = graphcap.export(_Method(owner, "bump"), (x,), strict=strict).module()
    read = graphcap.export(_Method(owner, "read"), (x,), strict=strict).module()
    eager = Counter()
    for _ in range(2):
        torch.testing.assert_close(bump(x), eager.bump(x))
        torch.testing.assert_close(read(x), eager.read(x))
    torch.testing.assert_close(owner.count, torch.full((2,), 4.0))


def test_decomposed_program_starts_from_the_state_runs_left():
    x = torch.randn(3)
    ep = graphcap.export(DecayedScale(), (x,))
    eager = DecayedScale()
    torch.testing.assert_close(ep.module()(x), eager(x).detach())
    torch.testing.assert_close(ep.run_decompositions().module()(x), eager(x).detach())


def test_state_is_not_copied():
    """Neither the weights a program reads nor the cache it writes are held twice."""
    lin = torch.nn.Linear(3, 3)
    lin.register_buffer("cache", torch.zeros(3))

    class Cached(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            self.lin.cache.copy_(x[0])
            return self.lin(x)

    ep = graphcap.export(Cached(), (torch.randn(2, 3),))
    module = ep.module()
    assert module.lin.weight.data_ptr() == lin.weight.data_ptr()
    assert module.lin.cache.data_ptr() == lin.cache.data_ptr()
