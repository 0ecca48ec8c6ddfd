"""Cases: Python language features a forward may use — containers, closures, decorators,
context managers, optional inputs, class reflection, autograd functions, attributes."""
import contextlib
import functools

import torch

from graphcap.errors import DataDependentError

from .registry import case


def double_result(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


@case(args=lambda: (torch.randn(3),), tags={"python.closure"}, helpers=(double_result,))
class DecoratedForward(torch.nn.Module):
    """A decorator around ``forward`` (and around a helper method) is ordinary Python: traced through."""

    @double_result
    def scaled(self, x):
        return x + 1

    @double_result
    def forward(self, x):
        return self.scaled(x).relu()


@case(args=lambda: (torch.randn(2), torch.randn(2)), tags={"python.data-structure"})
class BuildsDict(torch.nn.Module):
    """A dict built in ``forward`` and returned: the output's structure is kept."""

    def forward(self, x, y):
        parts = {"sum": x + y}
        parts["diff"] = x - y
        return parts


@case(args=lambda: (torch.randn(3), [torch.randn(3), torch.randn(3)]),
      kwargs=lambda: {"scale": torch.tensor(2.0), "shift": 1.5},
      tags={"python.data-structure"})
class KeywordInputs(torch.nn.Module):
    """Positional, list and keyword inputs (a tensor and a Python float): the float is baked in."""

    def forward(self, x, extra, *, scale, shift=0.0):
        return (x + extra[0] + extra[1]) * scale + shift


@case(args=lambda: (torch.randn(2, 3),), tags={"python.closure"})
class NestedFunctions(torch.nn.Module):
    """Nested functions and a lambda closing over ``self`` and a local tensor."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        base = x.mean()

        def add_weight(t):
            return t + self.weight

        shift = lambda t: t - base  # noqa: E731
        return shift(add_weight(x))


@case(args=lambda: (torch.randn(3),), tags={"python.context-manager"})
class CustomContextManager(torch.nn.Module):
    """A context manager of the user's own (and ``contextlib.nullcontext``) around tensor code."""

    @contextlib.contextmanager
    def section(self, log):
        log.append("enter")
        yield
        log.append("exit")

    def forward(self, x):
        log = []
        with self.section(log), contextlib.nullcontext():
            y = x * 2
        return y + len(log)


@case(args=lambda: (torch.randn(2, 3),), tags={"python.object-model"})
class OptionalChild(torch.nn.Module):
    """An optional submodule that is ``None``: the ``if self.proj is not None`` is decided at export."""

    def __init__(self):
        super().__init__()
        self.proj = None
        self.out = torch.nn.Linear(3, 2)

    def forward(self, x):
        if self.proj is not None:
            x = self.proj(x)
        return self.out(x)


@case(args=lambda: (torch.randn(2, 3),), kwargs=lambda: {"mask": None}, tags={"python.object-model"})
class OptionalInput(torch.nn.Module):
    """An input that is ``None`` in the example: the program takes ``None`` there and nothing else."""

    def forward(self, x, mask=None):
        if mask is not None:
            x = x * mask
        return x.sum(1)


@case(args=lambda: ({"a": torch.randn(2), "b": [torch.randn(2), torch.randn(2)]},), tags={"python.data-structure"})
class NestedInputTree(torch.nn.Module):
    """Nested dict/list inputs are flattened to the program's inputs and rebuilt by ``module()``."""

    def forward(self, tree):
        total = tree["a"]
        for t in tree["b"]:
            total = total + t
        return total, {"first": tree["b"][0]}


@case(args=lambda: (torch.randn(3),), tags={"python.object-model"})
class EnumAttribute(torch.nn.Module):
    """A Python attribute (an enum member) read in ``forward`` is a constant of the program."""

    import enum

    class Mode(enum.Enum):
        DOUBLE = 2
        TRIPLE = 3

    def __init__(self):
        super().__init__()
        self.mode = self.Mode.TRIPLE

    def forward(self, x):
        if self.mode is self.Mode.DOUBLE:
            return x * 2
        return x * self.mode.value


@case(args=lambda: (torch.randn(3, 4),), tags={"python.builtin"})
class ClassReflection(torch.nn.Module):
    """``isinstance`` and class methods reached through ``type(self)``. (Non-strict export traces
    on fake tensors: ``isinstance(x, torch.Tensor)`` holds, ``type(x) is torch.Tensor`` does not.)"""

    @classmethod
    def factor(cls, t):
        return t.shape[-1] + 1

    def forward(self, x):
        assert isinstance(x, torch.Tensor)
        return x * type(self).factor(x)


@case(args=lambda: (torch.randn(3),), tags={"python.builtin"})
class SetattrOnTensor(torch.nn.Module):
    """Setting a Python attribute on an input tensor inside ``forward``: the attribute lives only
    during the trace; the graph is the tensor computation."""

    def forward(self, x):
        setattr(x, "note", "seen")
        return x + (1 if getattr(x, "note", None) == "seen" else 0)


class ClampGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        return grad.clamp(-1, 1)


@case(args=lambda: (torch.randn(4),), tags={"torch.autograd-function"}, helpers=(ClampGrad,))
class UsesAutogradFunction(torch.nn.Module):
    """A custom ``torch.autograd.Function``: its forward is traced into the graph."""

    def forward(self, x):
        return ClampGrad.apply(x) + 1


@case(args=lambda: (torch.randn(3),), tags={"torch.operator"})
class AtenOperatorDirectly(torch.nn.Module):
    """Calling an ATen operator directly (``torch.ops.aten...``) records exactly that operator."""

    def forward(self, x):
        return torch.ops.aten.sigmoid.default(x) + torch.ops.aten.sum.default(x)


@case(args=lambda: (torch.randn(3),), tags={"torch.escape-hatch", "torch.data-dependent"}, raises=DataDependentError)
class NumberFromBufferData(torch.nn.Module):
    """A helper turning a buffer's *data* into a Python number (``float(t.max())``): non-strict
    export traces on fake tensors, which have no data, so it refuses and names the line. Compute
    the number once outside ``forward`` (a plain attribute), or keep it a tensor."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def top(self):
        return float(self.table.max())

    def forward(self, x):
        return x + self.top()
