"""A model with two preserved-call candidates, shared by the unflatten-swap and decomposition tests.

``Block`` takes a keyword argument and updates a buffer; ``Net`` calls two of
them, the second fed by the first, and builds ``torch.ones`` masks (``ones``
is ``full`` in the core ATen IR, so node names change under decomposition).
"""
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x, *, mask=None):
        self.steps.add_(1)
        return self.lin(x) * mask, x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.other = Block()

    def forward(self, x):
        y, _ = self.block(x, mask=torch.ones(4))  # ``ones`` becomes ``full`` in the core IR
        z, skip = self.other(y, mask=torch.ones(4))
        return z + skip
