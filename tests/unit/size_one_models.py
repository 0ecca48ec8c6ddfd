"""Models whose code branches on a size being 1, shared by the size-0/1 tests of declared dims
(test_dynamic_size_one_range_cut.py) and of Dim.AUTO / Dim.DYNAMIC hints (test_dynamic_hint_size_one.py).
"""
import torch


class FlattenUnlessOne(torch.nn.Module):
    """At size 1 the special branch does what the general one does."""

    def forward(self, x):
        if x.size(0) > 1:
            x = x.view(x.size(0), -1)
        else:
            x = x.view(1, -1)
        return x.sum(-1)


class DiffersAtOne(torch.nn.Module):
    """At size 1 the special branch computes something else."""

    def forward(self, x):
        if x.size(0) > 1:
            return x * 2
        return x * 100


class CountsBigBatches(torch.nn.Module):
    """Same outputs at size 1, but the buffer is updated only by the general branch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        if x.size(0) >= 2:
            self.count.add_(1)
        return x * 2
