"""Cases: Python branches and loops, and the control-flow operators (``torch.cond``, ``map``)."""
import torch
from functorch.experimental.control_flow import map as map_over_rows

from graphcap import Dim

from .registry import case


@case(args=lambda: (torch.randn(2, 3, 4),), tags={"python.control-flow"})
class BranchOnRank(torch.nn.Module):
    """A Python ``if`` on something static (the rank) runs once while tracing: only the
    branch taken is recorded, and the program is specialized to rank-3 inputs."""

    def forward(self, x):
        if x.dim() == 3:
            return x.sum(dim=-1)
        return x * 0


@case(args=lambda: (torch.randn(4),), tags={"python.control-flow"})
class UnrolledLoop(torch.nn.Module):
    """A loop over a Python range is unrolled: the graph holds one copy of the body per turn."""

    def forward(self, x):
        powers = []
        for k in range(1, 4):
            powers.append(x ** k)
        return torch.stack(powers).sum(0)


@case(args=lambda: ([torch.randn(3), torch.randn(3), torch.randn(3)],),
      tags={"python.control-flow", "python.data-structure"})
class StarUnpackList(torch.nn.Module):
    """Star-unpacking a list input and looping over the rest: the list's length is fixed at export."""

    def forward(self, parts):
        head, *rest = parts
        for r in rest:
            head = head + r
        return head


@case(args=lambda: (torch.randn(3, 4),), dynamic_shapes=lambda: {"x": {0: Dim.AUTO}},
      tags={"python.control-flow", "torch.dynamic-shape"})
class BranchOnSize(torch.nn.Module):
    """A Python ``if`` on a dynamic size: export follows the example's branch and records the
    condition. With ``Dim.AUTO`` the size is specialized to the example's value (3); a declared
    ``Dim`` would be a constraint violation with a suggested fix."""

    def forward(self, x):
        if x.shape[0] == 3:
            return x.cos()
        return x.sin()


@case(args=lambda: (torch.randn(6),), tags={"torch.cond"},
      other_inputs=lambda: [((-torch.rand(6) - 1,), {})])
class CondOnData(torch.nn.Module):
    """``torch.cond`` on a tensor predicate keeps both branches in the graph; the choice is
    made at run time from the data."""

    def forward(self, x):
        def positive(t):
            return t.exp()

        def negative(t):
            return t.abs().log1p()

        return torch.cond(x.sum() > 0, positive, negative, (x,))


@case(args=lambda: (torch.randn(6, 2),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=1, max=32)}},
      tags={"torch.cond", "torch.dynamic-shape"},
      other_inputs=lambda: [((torch.randn(2, 2),), {}), ((torch.randn(20, 2),), {})])
class CondOnSize(torch.nn.Module):
    """``torch.cond`` on a size predicate: unlike a Python ``if``, both branches stay and the
    dim stays dynamic over its whole range."""

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda t: t.sum(0, keepdim=True), lambda t: t * 2, (x,))


@case(args=lambda: (torch.randn(5, 3), torch.randn(3)), dynamic_shapes=lambda: {"x": {0: Dim("rows")}, "y": None},
      tags={"torch.cond", "torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(9, 3), torch.randn(3)), {})])
class CondWithOperands(torch.nn.Module):
    """The branches of ``torch.cond`` take several operands, one of them with a dynamic size."""

    def forward(self, x, y):
        def add_row(a, b):
            return a + b

        def sub_row(a, b):
            return a - b

        return torch.cond(x.shape[0] > 2, add_row, sub_row, (x, y))


@case(args=lambda: (torch.tensor(True), torch.randn(4)), tags={"torch.cond", "python.closure"},
      other_inputs=lambda: [((torch.tensor(False), torch.randn(4)), {})])
class CondClosesOverInput(torch.nn.Module):
    """Branches may read tensors from the enclosing scope: graphcap passes them to the
    subgraphs as extra operands."""

    def forward(self, flag, x):
        scale = x.max()

        def true_fn():
            return x / scale

        def false_fn():
            return x * scale

        return torch.cond(flag, true_fn, false_fn, ())


@case(args=lambda: (torch.randn(3),), tags={"torch.cond", "python.closure"},
      other_inputs=lambda: [((torch.randn(7),), {})], dynamic_shapes=lambda: {"x": {0: Dim("n", min=2)}})
class CondNestedBranches(torch.nn.Module):
    """Branches defined as nested functions that call further nested functions."""

    def forward(self, x):
        def inner(t):
            return t * 3

        def big(t):
            return inner(t).sin()

        def small(t):
            return inner(t).cos()

        return torch.cond(x.shape[0] > 4, big, small, (x,))


@case(args=lambda: (torch.randn(3),), tags={"torch.cond"},
      dynamic_shapes=lambda: {"x": {0: Dim("n", min=2)}}, other_inputs=lambda: [((torch.randn(8),), {})])
class CondMethodBranches(torch.nn.Module):
    """Bound methods (of this module and of a child module) as the branches."""

    class Child(torch.nn.Module):
        def forward(self, t):
            return t.tanh()

    def __init__(self):
        super().__init__()
        self.child = self.Child()

    def halve(self, t):
        return t / 2

    def forward(self, x):
        return torch.cond(x.shape[0] <= 4, self.child.forward, self.halve, (x,))


@case(args=lambda: (torch.randn(4),), tags={"torch.cond", "python.closure"},
      other_inputs=lambda: [((-torch.ones(4),), {})])
class CondReadsOuterLocals(torch.nn.Module):
    """Branches read outer local variables: a tensor built in ``forward`` and a Python number."""

    def forward(self, x):
        offset = torch.ones(4)
        factor = 2.5

        def up(t):
            return t * factor + offset

        def down(t):
            return t * factor - offset

        return torch.cond(x.mean() > 0, up, down, (x,))


@case(args=lambda: (torch.randn(5, 3), torch.randn(3)), dynamic_shapes=lambda: {"xs": {0: Dim("n")}, "bias": None},
      tags={"torch.map", "torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(8, 3), torch.randn(3)), {})])
class MapOverRows(torch.nn.Module):
    """``map`` runs its body once per row of a dynamic-size input; the body is one subgraph."""

    def forward(self, xs, bias):
        def body(row, b):
            return (row + b).relu()

        return map_over_rows(body, xs, bias)
