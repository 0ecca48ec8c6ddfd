"""torch's ``ObjectSpec`` (a spec by attribute name for an object input) and the
``@dynamic_spec(...)`` decorator that attaches a spec to ``forward``."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import graphcap
from conftest import TORCH_LINE

if TORCH_LINE >= (2, 13):
    from torch.fx.experimental.dynamic_spec import STATIC, ObjectSpec, ParamsSpec, ShapeVar, TensorSpec
else:  # torch 2.10 to 2.12 have no such spec objects
    STATIC = ObjectSpec = ParamsSpec = ShapeVar = TensorSpec = None

pytestmark = pytest.mark.skipif(TORCH_LINE < (2, 13), reason="torch.fx.experimental.dynamic_spec ships with torch 2.13")


@dataclass
class Batch:
    tokens: torch.Tensor
    mask: torch.Tensor
    scale: torch.Tensor


torch.export.register_dataclass(Batch)


class ReadsBatch(torch.nn.Module):
    def forward(self, batch: Batch):
        return (batch.tokens * batch.mask).sum(0) * batch.scale


def _batch(n: int, m: int) -> Batch:
    return Batch(torch.randn(n, m), torch.ones(n, m), torch.randn(m))


@pytest.mark.parametrize("strict", [False, True])
def test_object_spec_marks_attributes_by_name(strict):
    n = ShapeVar("n", min=1, max=64)
    spec = ParamsSpec({"batch": ObjectSpec({"mask": TensorSpec([n, STATIC]), "tokens": TensorSpec([n, STATIC])})})
    model = ReadsBatch()
    ep = graphcap.export(model, (_batch(5, 3),), dynamic_shapes=spec, strict=strict)
    shapes = [n.meta["val"].shape for n in ep.graph.nodes if n.op == "placeholder"]
    assert shapes[0] == shapes[1] and not isinstance(shapes[0][0], int)  # tokens and mask share n
    assert shapes[2] == (3,)  # scale: left out of the ObjectSpec, static
    for size in (1, 9):
        b = _batch(size, 3)
        torch.testing.assert_close(ep.module()(b), model(b))
    with pytest.raises(RuntimeError):
        ep.module()(Batch(torch.randn(4, 3), torch.ones(5, 3), torch.randn(3)))  # n must agree


def test_object_spec_naming_no_attribute_is_refused():
    spec = ParamsSpec({"batch": ObjectSpec({"tokenz": TensorSpec([ShapeVar("n"), STATIC])})})
    with pytest.raises(graphcap.ExportInputError, match=r"tokenz.*\['tokens', 'mask', 'scale'\]"):
        graphcap.export(ReadsBatch(), (_batch(5, 3),), dynamic_shapes=spec)


def test_object_spec_for_a_tensor_is_refused():
    class Sum0(torch.nn.Module):
        def forward(self, x):
            return x.sum(0)

    with pytest.raises(graphcap.ExportInputError, match="not an object flattened by its attributes"):
        graphcap.export(Sum0(), (torch.randn(4, 3),), dynamic_shapes=ParamsSpec({"x": ObjectSpec({"a": None})}))


def _decorated():
    from torch.fx.experimental.dynamic_spec import dynamic_spec

    class Decorated(torch.nn.Module):
        @dynamic_spec({"x": TensorSpec([ShapeVar("B", min=2, max=16), STATIC])})
        def forward(self, x):
            return x.sum(0) * 2

    return Decorated()


@pytest.mark.skipif(TORCH_LINE < (2, 14), reason="the @dynamic_spec decorator ships with torch 2.14")
def test_a_spec_attached_by_dynamic_spec_is_used():
    model = _decorated()
    ep = graphcap.export(model, (torch.randn(4, 3),))
    x = torch.randn(8, 3)
    torch.testing.assert_close(ep.module()(x), model(x))
    with pytest.raises(RuntimeError):
        ep.module()(torch.randn(20, 3))  # above the decorator's max


@pytest.mark.skipif(TORCH_LINE < (2, 14), reason="the @dynamic_spec decorator ships with torch 2.14")
def test_a_decorated_forward_and_dynamic_shapes_together_are_refused():
    with pytest.raises(ValueError, match="@dynamic_spec"):
        graphcap.export(_decorated(), (torch.randn(4, 3),), dynamic_shapes={"x": None})
