"""A parameter the program writes in place (under ``torch.no_grad``) is the module's own copy.

graphcap's contract for ``ep.module()`` (compat/known_differences.txt, test_export_method):
running a program never changes ``ep.state_dict``, so every ``module()`` and the program of
``run_decompositions()`` start from the exported weights, as a fresh eager model does. That held
for buffers; a parameter updated under ``no_grad`` was shared, so running one module changed the
numbers of the next (and of the decomposed program). torch.export's reference shares it (its
decomposed program refuses to run: an in-place write to a leaf that requires grad).
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


def _eager_runs(x, calls):
    model = DecayedScale()
    return [model(x).detach() for _ in range(calls)], model


@pytest.mark.parametrize("strict", [True, False])
def test_each_module_starts_from_the_exported_weights(strict):
    x = torch.randn(3)
    ep = graphcap.export(DecayedScale(), (x,), strict=strict)
    expected, model = _eager_runs(x, 2)
    for make in (ep.module, lambda: ep.run_decompositions().module(), ep.module):
        program = make()
        got = [program(x).detach() for _ in range(2)]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        torch.testing.assert_close(program.scale.detach(), model.scale.detach())
    torch.testing.assert_close(ep.state_dict["scale"], torch.ones(3))
    assert isinstance(ep.module().scale, torch.nn.Parameter) and ep.module().scale.requires_grad


def test_parameter_read_only_stays_shared():
    """A parameter the program only reads is not copied (no memory cost for weights)."""
    lin = torch.nn.Linear(3, 3)
    ep = graphcap.export(lin, (torch.randn(2, 3),), strict=True)
    assert ep.module().weight.data_ptr() == ep.state_dict["weight"].data_ptr()
