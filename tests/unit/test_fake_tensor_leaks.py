"""Fake tensors that outlive an export are reported; fake tensors never become constants."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor

import graphcap


def _export_quietly(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ep = graphcap.export(*args, **kwargs)
    return ep, [str(w.message) for w in caught if "still alive after export" in str(w.message)]


def test_fake_tensor_kept_in_a_global_list_is_reported_with_its_source_line():
    kept = []

    class M(nn.Module):
        def forward(self, x, y):
            kept.append(x + y)
            return x * y

    _, messages = _export_quietly(M(), (torch.randn(2), torch.randn(2)))
    assert isinstance(kept[0], FakeTensor)
    assert len(messages) == 1 and messages[0].startswith("Detected 1 fake tensors")
    assert "kept.append(x + y)" in messages[0] and "node 'add'" in messages[0]


def test_closure_cycle_and_hook_leaks_are_reported():
    bank = []

    class Node:
        def __init__(self):
            self.other, self.tensor = None, None

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.buffer = nn.Buffer(torch.randn(2))

        def forward(self, x):
            z = x + 1
            a, b = Node(), Node()
            a.other, b.other, a.tensor = b, a, z
            bank.append(lambda: z.shape)  # a closure holding z
            cycle = a
            bank.append(cycle)
            return self.buffer.sum() + x.sum()

    m = M()
    m.register_forward_hook(lambda mod, inp, out: bank.append(mod.buffer))
    _, messages = _export_quietly(m, (torch.randn(2),))
    assert len(messages) == 1 and messages[0].startswith("Detected 2 fake tensors")
    assert "b_buffer" in messages[0] and "Used by 'sum_1'" in messages[0]


def test_no_warning_and_no_cost_without_a_leak():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).relu()

    for dynamic in (None, ({0: graphcap.Dim("b")},)):
        _, messages = _export_quietly(M(), (torch.randn(2, 4),), dynamic_shapes=dynamic)
        assert messages == []
    from graphcap.trace import leaks
    calls = []
    original = leaks.gc.collect
    leaks.gc.collect = lambda *a: calls.append(a) or original(*a)
    try:
        _export_quietly(M(), (torch.randn(2, 4),), dynamic_shapes=({0: graphcap.Dim("b")},))
    finally:
        leaks.gc.collect = original
    assert calls == []  # the garbage collector is consulted only when tensors survive


def test_parameter_read_through_data_is_refused_not_baked_in():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = nn.Parameter(torch.zeros(1, 10, 5), requires_grad=False)

        def forward(self, x):
            rolled = torch.roll(self.cache.data, -x.size(1), dims=1)
            self.cache.data = rolled
            return self.cache * 2

    with pytest.raises(RuntimeError, match=r"\.data") as info:
        graphcap.export(Cache(), (torch.randn(1, 3, 5),))
    assert isinstance(info.value, graphcap.UnsupportedError)
    assert "self.cache.data" in str(info.value)  # the line that reads or assigns `.data`


class _Counter:
    """A plain object holding the model's own buffer, as transformers' cache layers hold theirs."""

    def __init__(self, t):
        self.length = t


class _CountsTokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("length", torch.tensor(0))
        self.state = _Counter(self.length)

    def forward(self, x):
        self.state.length.add_(x.shape[0])  # in place, through the alias: returns the real buffer
        return x * self.state.length


def test_a_real_buffer_updated_in_place_through_an_alias_is_no_leak():
    """The tracker saw the model's real buffer come back from ``add_``; it has data, so the model
    keeping it is fine (transformers' static cache warned "6 fake tensors still alive")."""
    model = _CountsTokens()
    ep, messages = _export_quietly(model, (torch.randn(3, 2),))
    assert messages == []
    assert type(model.state.length) is torch.Tensor and model.length.item() == 0  # the export wrote nothing
    program, eager, x = ep.module(), _CountsTokens(), torch.ones(3, 2)
    for _ in range(3):
        torch.testing.assert_close(program(x), eager(x))


def test_a_fake_tensor_stored_next_to_a_real_one_is_still_reported():
    class Stores(_CountsTokens):
        def forward(self, x):
            self.state.last = x * 2  # a fake tensor kept on a plain object
            return super().forward(x)

    model = Stores()
    _, messages = _export_quietly(model, (torch.randn(3, 2),))
    assert len(messages) == 1 and messages[0].startswith("Detected 1 fake tensors") and "x * 2" in messages[0]
