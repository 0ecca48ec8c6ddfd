"""``map`` over a dim of dynamic size: exported from torch 2.11 on, refused on 2.10 naming 2.11.

torch 2.10's ``map`` runs its body once per slice while tracing, which fixes the mapped dim
to the example's size (torch.export on 2.10 fails the same spec with a constraint violation).
graphcap refuses it there with the release that keeps the dim symbolic
(``torch_private.higher_order.MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE``), and a static mapped dim
exports on every line.
"""
from __future__ import annotations

import pytest
import torch
from functorch.experimental.control_flow import map as cf_map

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import UnsupportedError


class Scale(torch.nn.Module):
    def forward(self, xs, y):
        return cf_map(lambda x, y: x * y + 1, xs, y)


def test_dynamic_mapped_dim_exports_or_is_refused_naming_the_release():
    k = graphcap.Dim("k", min=1, max=10)
    args = (torch.randn(4, 3), torch.randn(3))
    if TORCH_LINE < (2, 11):
        with pytest.raises(UnsupportedError, match=r"needs torch 2\.11") as info:
            graphcap.export(Scale(), args, dynamic_shapes=({0: k}, None))
        assert "static" in info.value.fix
        return
    ep = graphcap.export(Scale(), args, dynamic_shapes=({0: k}, None))
    for n in (1, 6):
        xs, y = torch.randn(n, 3), torch.randn(3)
        torch.testing.assert_close(ep.module()(xs, y), Scale()(xs, y))


def test_static_mapped_dim_exports_on_every_line():
    xs, y = torch.randn(4, 3), torch.randn(3)
    ep = graphcap.export(Scale(), (xs, y))
    torch.testing.assert_close(ep.module()(xs, y), Scale()(xs, y))
