"""Cases: dynamic sizes, and values read from data (``.item()``, ``nonzero``) bounded by checks."""
import torch

from graphcap import Dim
from graphcap.errors import ConstraintViolationError, DataDependentError

from .registry import case


@case(args=lambda: (torch.randn(3, 2),), dynamic_shapes=lambda: {"x": {0: Dim("n")}},
      tags={"torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(7, 2),), {})])
class SizedConstructor(torch.nn.Module):
    """A new tensor whose size is computed from an input's dynamic size."""

    def forward(self, x):
        return torch.ones(x.shape[0] * 2, dtype=x.dtype)


@case(args=lambda: (torch.randn(6, 4),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=2), 1: Dim("m", min=2)}},
      tags={"torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(9, 3),), {}), ((torch.randn(2, 2),), {})],
      beyond_torch=True, note="torch.export refuses the spec: its slices guard n - 1 != 1 and m // 2 != 1")
class SliceBySize(torch.nn.Module):
    """Slices whose bounds are expressions of dynamic sizes, with a step: valid for every size of
    the range, results of one row or column included."""

    def forward(self, x):
        return x[: x.shape[0] - 1, 1::2]


@case(args=lambda: (torch.randn(2, 3, 4),), dynamic_shapes=lambda: {"x": {0: Dim("b"), 2: Dim("w")}},
      tags={"torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(5, 3, 7),), {})])
class ViewFromSizes(torch.nn.Module):
    """``view`` to a shape computed from the input's sizes."""

    def forward(self, x):
        b, c, w = x.shape
        return x.view(b, c * w)


@case(args=lambda: (torch.randn(4),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=3)}},
      tags={"python.assert", "torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(11),), {})])
class AssertOnSize(torch.nn.Module):
    """A Python ``assert`` on a dynamic size that the declared range already guarantees holds
    everywhere: nothing to record. (One the range does not guarantee is a constraint violation.)"""

    def forward(self, x):
        assert x.shape[0] > 2, "needs three elements"
        return x[:3] * 2


@case(args=lambda: (torch.randn(3, 6),), dynamic_shapes=lambda: {"x": {1: Dim("d")}},
      tags={"torch.dynamic-shape"}, other_inputs=lambda: [((torch.randn(3, 11),), {})])
class SizeAsOutput(torch.nn.Module):
    """A dynamic size returned as an output: the program returns a symbolic int computed at run time."""

    def forward(self, x):
        return x.sum(), x.shape[1] + 1


@case(args=lambda: (torch.randn(3, 2),), tags={"torch.dynamic-shape", "python.data-structure", "python.assert"})
class SizeInList(torch.nn.Module):
    """``in`` tests on sizes and constants are decided at export and leave nothing in the graph."""

    def forward(self, x):
        assert x.shape[-1] in (2, 4)
        assert "cow" not in ("pig", "hen")
        return x + 1


@case(args=lambda: (torch.tensor(4),), tags={"torch.data-dependent", "torch.escape-hatch"},
      other_inputs=lambda: [((torch.tensor(9),), {})])
class ItemAsSize(torch.nn.Module):
    """A size read from data (``.item()``) is an unbacked symbol; ``torch._check`` bounds it so
    that a tensor of that size can be built, and the bounds become runtime asserts."""

    def forward(self, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 16)
        return torch.zeros(k, 2)


@case(args=lambda: (torch.tensor(3), torch.randn(5)), tags={"torch.data-dependent", "torch.escape-hatch"},
      other_inputs=lambda: [((torch.tensor(0), torch.randn(5)), {})])
class ItemAsValue(torch.nn.Module):
    """A value read from data used as a number; ``torch._check`` states what the code needs of it,
    which the program asserts at run time."""

    def forward(self, i, x):
        k = i.item()
        torch._check(k >= 0)
        torch._check(k < 5)
        return x[k] * 2


@case(args=lambda: (torch.tensor([0.0, 1.5, 0.0, 2.0]),), tags={"torch.data-dependent"},
      other_inputs=lambda: [((torch.tensor([1.0, 1.0, 0.0, 3.0, 4.0, 0.0]),), {})],
      dynamic_shapes=lambda: {"x": {0: Dim("n")}})
class NonzeroOutputSize(torch.nn.Module):
    """``nonzero`` has an output size known only from data: an unbacked size flows on."""

    def forward(self, x):
        idx = x.nonzero()
        return x[idx.squeeze(1)] + 1


@case(args=lambda: (torch.tensor(3),), tags={"torch.data-dependent", "python.control-flow"},
      raises=DataDependentError)
class BranchOnItem(torch.nn.Module):
    """A Python ``if`` on a value read from data cannot be decided while tracing: export refuses,
    naming the line, and suggests ``torch.cond`` or ``torch._check``."""

    def forward(self, n):
        if n.item() > 2:
            return n * 2
        return n


@case(args=lambda: (torch.randn(6),), dynamic_shapes=lambda: {"x": {0: Dim("n", min=2, max=32)}},
      tags={"torch.dynamic-shape", "python.control-flow"}, raises=ConstraintViolationError)
class BranchNarrowsDeclaredDim(torch.nn.Module):
    """A Python ``if`` on a declared ``Dim``: the program only works for the sizes on the example's
    side of the test, which contradicts the declared range. Export refuses with the line and a
    suggested fix (``n = Dim('n', min=5, max=32)``); ``torch.cond`` would keep both sides."""

    def forward(self, x):
        if x.shape[0] > 4:
            return x.sum()
        return x.mean()
