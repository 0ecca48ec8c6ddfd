"""Tensor-subclass inputs (traceable wrapper subclasses) with dynamic dims: the inner tensors of
the outer shape share the outer dims' symbols; the program runs at other sizes and checks them."""
from __future__ import annotations

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from graphcap import Dim


def two(*shape):
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


class Affine(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


class WithPlain(torch.nn.Module):
    def forward(self, x, y):
        return (x + y).sum(1)


class MatMul(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 5))

    def forward(self, x):
        return x @ self.w


def _same(out, expected):
    assert type(out) is type(expected)
    torch.testing.assert_close(out.a, expected.a)
    torch.testing.assert_close(out.b, expected.b)


@pytest.mark.parametrize("dims", [{0: Dim("b")}, {1: Dim("n", max=32)}, {0: Dim.AUTO, 1: Dim.DYNAMIC}])
def test_subclass_input_with_dynamic_dims(dims):
    m = Affine()
    ep = graphcap.export(m, (two(4, 3),), dynamic_shapes=(dims,))
    assert ep.range_constraints
    for shape in ((6, 3), (4, 3), (2, 3)) if 0 in dims else ((4, 7), (4, 2)):
        x = two(*shape)
        _same(ep.module()(x), m(x))


def test_subclass_and_plain_tensor_share_a_dim():
    b = Dim("b", min=2, max=16)
    m = WithPlain()
    ep = graphcap.export(m, (two(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: b}, {0: b}))
    x, y = two(9, 3), torch.randn(9, 3)
    _same(ep.module()(x, y), m(x, y))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(two(17, 3), torch.randn(17, 3))


def test_subclass_input_through_a_parameter_matmul():
    m = MatMul()
    ep = graphcap.export(m, (two(4, 3),), dynamic_shapes=({0: Dim("b", max=64)},))
    x = two(11, 3)
    _same(ep.module()(x), m(x))


def test_subclass_static_dim_is_still_checked():
    ep = graphcap.export(Affine(), (two(4, 3),), dynamic_shapes=({0: Dim("b")},))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(two(4, 5))
