"""Cases: writes to inputs, buffers and module attributes during ``forward``."""
import torch

from .registry import case


@case(args=lambda: (torch.randn(3),), tags={"torch.mutation"})
class MutatesInput(torch.nn.Module):
    """An in-place write to a user input: the program records it, and ``module()`` writes the new
    value back into the caller's tensor, as eager does."""

    def forward(self, x):
        x.mul_(2)
        return x.cos()


@case(args=lambda: (torch.randn(3),), tags={"torch.mutation"})
class UpdatesBuffer(torch.nn.Module):
    """A running statistic kept in a buffer and updated in place: a buffer mutation of the program."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x):
        self.running.add_(x)
        return x - self.running


@case(args=lambda: (torch.ones(3),), tags={"python.object-model", "torch.mutation"})
class ReassignsTensorAttribute(torch.nn.Module):
    """Assigning a new tensor to a plain attribute (not a buffer) in ``forward``: the attribute's
    value at export is a constant of the program and the assignment is not replayed, so every
    call of the program computes what the *first* eager call computes (the model's attribute is
    left as it was). Register a buffer and update it in place to carry state between calls."""

    def __init__(self):
        super().__init__()
        self.state = torch.zeros(3)

    def forward(self, x):
        self.state = self.state + x
        return x * 2 + self.state
