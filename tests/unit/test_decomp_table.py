"""graphcap.default_decompositions(): the lazy, dict-like CustomDecompTable."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import CustomDecompTable, default_decompositions

aten = torch.ops.aten


def test_default_table_is_a_custom_table_covering_composites_and_python_decomps():
    table = default_decompositions()
    assert isinstance(table, CustomDecompTable)
    assert aten.conv2d.default in table          # implied: a functional composite
    assert aten.linear.default in table
    assert aten.addcmul.default in table         # listed: a torch._decomp decomposition
    assert aten.convolution.default not in table  # core ATen: stays
    assert aten.upsample_bilinear2d.vec not in table  # core composite, preserved like torch does
    assert table[aten.conv2d.default] is not None


def test_delete_keeps_op_and_set_installs_user_function():
    table = default_decompositions()
    del table[aten.conv2d.default]
    assert aten.conv2d.default not in table
    with pytest.raises(KeyError):
        table[aten.conv2d.default]
    with pytest.raises(KeyError):
        del table[aten.conv2d.default]

    def my_conv(*args, **kwargs):
        return aten.convolution.default(*args)

    table[aten.conv2d.default] = my_conv
    assert table[aten.conv2d.default] is my_conv
    assert aten.conv2d.default in table


def test_pop_copy_update_are_independent():
    table = default_decompositions()
    copy = table.copy()
    fn = table.pop(aten.linear.default)
    assert callable(fn)
    assert aten.linear.default not in table and aten.linear.default in copy
    assert table.pop(aten.linear.default, "gone") == "gone"
    with pytest.raises(KeyError):
        table.pop(aten.linear.default)

    def marker(*a, **k):
        return NotImplemented

    table.update({aten.linear.default: marker})
    assert table[aten.linear.default] is marker
    assert copy[aten.linear.default] is not marker


def test_materialize_keys_items_list_implied_entries():
    table = default_decompositions()
    del table[aten.conv2d.default]
    full = table.materialize()
    assert isinstance(full, dict)
    assert aten.linear.default in full and aten.addcmul.default in full
    assert aten.conv2d.default not in full
    assert set(table.keys()) == set(full)
    assert dict(table.items()).keys() == full.keys()
    assert len(table) == len(full) > 400


def test_table_rejects_non_callable():
    table = default_decompositions()
    with pytest.raises(TypeError):
        table[aten.conv2d.default] = 3


def test_public_names():
    assert graphcap.default_decompositions is default_decompositions
    assert graphcap.CustomDecompTable is CustomDecompTable
