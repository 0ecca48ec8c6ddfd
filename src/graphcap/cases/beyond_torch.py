"""Cases graphcap exports where torch.export refuses or narrows: unknown containers, sizes 0
and 1 kept in range, ``round()`` on sizes, guards scoped to the branch that raised them."""
import torch

from graphcap import Dim

from .registry import case


class Pair:
    """A plain class (not a dataclass, not registered with pytree) holding tensors."""

    def __init__(self, first, second):
        self.first = first
        self.second = second


@case(args=lambda: (torch.randn(3),), tags={"python.data-structure"}, helpers=(Pair,), beyond_torch=True,
      note="torch.export refuses an output of an unregistered class")
class UnknownOutputClass(torch.nn.Module):
    """Returning an instance of a class pytree does not know: graphcap flattens it by its
    attributes for the trace, and ``module()`` returns a ``Pair`` again."""

    def forward(self, x):
        return Pair(x.sin(), x.cos())


@case(args=lambda: (Pair(torch.randn(2, 3), torch.randn(3)),), tags={"python.data-structure"}, helpers=(Pair,),
      beyond_torch=True, other_inputs=lambda: [((Pair(torch.ones(2, 3), torch.zeros(3)),), {})],
      note="torch.export refuses an input of an unregistered class")
class UnknownInputClass(torch.nn.Module):
    """An input of a class pytree does not know: graphcap flattens it by its attributes (for this
    trace only; the process's pytree registry is left as it was) and ``module()`` takes a ``Pair``."""

    def forward(self, pair):
        return pair.first * pair.second


@case(args=lambda: (torch.randn(1, 3),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=0, max=64)}},
      tags={"torch.dynamic-shape"}, beyond_torch=True,
      other_inputs=lambda: [((torch.randn(0, 3),), {}), ((torch.randn(5, 3),), {})],
      note="torch.export refuses this spec with an example of size 1 (a constraint violation)")
class SizesZeroAndOne(torch.nn.Module):
    """A dynamic dim whose range includes 0 and 1, exported with an example of size 1: the size
    stays symbolic (no 0/1 specialization) and the program runs on empty and larger inputs too."""

    def forward(self, x):
        return torch.nn.functional.softmax(x, dim=-1).sum(0) + x.mean(0)


@case(args=lambda: (torch.randn(6, 4),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=2, max=100)}},
      tags={"torch.dynamic-shape", "python.builtin"}, beyond_torch=True,
      other_inputs=lambda: [((torch.randn(7, 4),), {}), ((torch.randn(99, 4),), {})],
      note="ExportDB lists round() on sizes as not supported yet")
class RoundOfSize(torch.nn.Module):
    """``round()`` of a size expression: graphcap keeps it symbolic (round-half-even, as Python)."""

    def forward(self, x):
        half = round(x.shape[0] / 2)
        return x[:half] * 2


@case(args=lambda: (torch.randn(8, 2),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=1, max=64)}},
      tags={"torch.cond", "torch.dynamic-shape"}, beyond_torch=True,
      other_inputs=lambda: [((torch.randn(2, 2),), {}), ((torch.randn(40, 2),), {})],
      note="torch.export applies a branch's guard to the whole program")
class BranchScopedGuard(torch.nn.Module):
    """The true branch slices ``t[:4]`` and asks for at least 4 rows; that holds whenever the
    predicate ``n > 4`` selects it, so the guard is scoped to the branch and ``n`` keeps its whole
    declared range (small inputs take the other branch)."""

    def forward(self, x):
        def big(t):
            return t[:4].sum(0, keepdim=True) + t.shape[0]

        def small(t):
            return t.sum(0, keepdim=True)

        return torch.cond(x.shape[0] > 4, big, small, (x,))
