"""Python in forward runs as Python (non-strict) and specializes; none of it breaks the tracer.

Each model uses one construct; the exported program must compute what eager
computes, and whatever the construct decided at trace time is baked in.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import warnings

import pytest
import torch

import graphcap
from conftest import assert_same_outputs


def _export_and_compare(model, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, args)
    with torch.no_grad():
        assert_same_outputs(model(*args), ep.module()(*args))
        fresh = tuple(torch.randn_like(a) if isinstance(a, torch.Tensor) else a for a in args)
        assert_same_outputs(model(*fresh), ep.module()(*fresh))
    return ep


class Scale:
    """A user context manager that changes Python state while active."""

    depth = 0

    def __enter__(self):
        Scale.depth += 1
        return 3.0

    def __exit__(self, *exc):
        Scale.depth -= 1
        return False


@contextlib.contextmanager
def offset(value):
    yield value


def test_context_managers():
    class M(torch.nn.Module):
        def forward(self, x):
            with Scale() as s, offset(0.5) as o, contextlib.nullcontext():
                y = x * s + o + Scale.depth
            with contextlib.suppress(KeyError):
                {}["missing"]
            return y

    _export_and_compare(M(), torch.randn(3))
    assert Scale.depth == 0


def test_closures_and_nested_functions():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            factor = 2.0

            def apply(t):
                return self.lin(t) * factor

            def make_adder(k):
                return lambda t: t + k

            return make_adder(1.5)(apply(x))

    _export_and_compare(M(), torch.randn(2, 3))


def _twice(fn):
    @functools.wraps(fn)
    def wrapper(self, x):
        return fn(self, fn(self, x))
    return wrapper


def test_decorators_and_class_and_static_methods():
    class M(torch.nn.Module):
        bias = 0.25

        @classmethod
        def shift(cls, x):
            return x + cls.bias

        @staticmethod
        def square(x):
            return x * x

        @property
        def gain(self):
            return 1.5

        @_twice
        def step(self, x):
            return self.square(x) * 0.5

        @functools.cache  # noqa: B019 (the user code under test caches on a method)
        def table(self, n):  # a Python-side cache keyed on a Python int
            return list(range(n))

        def forward(self, x):
            return self.shift(self.step(x)) * self.gain + sum(self.table(4))

    _export_and_compare(M(), torch.randn(3))


def test_comprehensions_and_generators():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):
            outs = [layer(x) for layer in self.layers]
            named = {f"o{i}": o.relu() for i, o in enumerate(outs)}
            total = sum(v for k, v in sorted(named.items()) if k != "o1")
            return total + torch.stack([o.mean() for o in outs]).sum()

    _export_and_compare(M(), torch.randn(2, 4))


def test_exceptions_raised_and_caught_inside_forward():
    class M(torch.nn.Module):
        def forward(self, x):
            try:
                raise ValueError("handled inside forward")
            except ValueError:
                y = x + 1
            try:
                y = y * {"a": 2}["b"]
            except KeyError:
                y = y * 3
            finally:
                y = y - 0.5
            try:
                x.view(-1, 7)  # a real tensor error, caught by the user
            except RuntimeError:
                y = y.flip(0)
            return y

    _export_and_compare(M(), torch.randn(6))


def test_id_print_and_logging(capsys, caplog):
    log = logging.getLogger("graphcap.tests.user_model")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = {}

        def forward(self, x):
            self.seen[id(x)] = True  # id() of a traced tensor: plain Python
            print("shape is", tuple(x.shape), "id known:", id(x) in self.seen)
            log.warning("forward called with %s", x.shape)
            return x * len(self.seen)

    m = M()
    with caplog.at_level(logging.WARNING, logger="graphcap.tests.user_model"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = graphcap.export(m, (torch.randn(2, 2),))
    assert "shape is (2, 2) id known: True" in capsys.readouterr().out
    assert "forward called with" in caplog.text
    assert m.seen == {}  # attribute writes made during export are undone
    x = torch.randn(2, 2)
    with torch.no_grad():
        assert_same_outputs(x * 1, ep.module()(x))  # len(self.seen) was 1 at trace time: baked in


def test_python_branch_on_shape_and_value_specializes():
    class M(torch.nn.Module):
        def forward(self, x, mode: str, n: int):
            if x.shape[0] > 2 and mode == "double":
                x = x * 2
            for _ in range(n):
                x = x + 1
            return x

    m = M()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(m, (torch.randn(3), "double", 2))
    adds = [n for n in ep.graph.nodes if n.target is torch.ops.aten.add.Tensor]
    assert len(adds) == 2  # the loop was unrolled
    x = torch.randn(3)
    assert_same_outputs(m(x, "double", 2), ep.module()(x, "double", 2))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(x, "half", 2)


def test_warnings_inside_forward_do_not_break_tracing():
    class M(torch.nn.Module):
        def forward(self, x):
            warnings.warn("deprecated path", DeprecationWarning)  # noqa: B028 (user code as it is often written)
            return x.tanh()

    _export_and_compare(M(), torch.randn(4))
