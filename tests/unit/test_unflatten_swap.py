"""preserve_module_call_signature + unflatten: a preserved submodule keeps its own input and
output structure, so any module with the same call signature can replace it and the whole
still runs; a replacement that does not fit fails naming the submodule and what differs."""
from __future__ import annotations

import copy

import pytest
import torch
from preserved_block_models import Net

import graphcap
from graphcap.hierarchy import SubmoduleSignatureError, unflatten


def _unflattened(model, x, preserve=("block", "other")):
    return unflatten(graphcap.export(model, (x,), preserve_module_call_signature=preserve))


def test_a_preserved_submodule_is_called_with_its_eager_signature():
    model, x = Net(), torch.randn(2, 4)
    unf = _unflattened(model, x)
    y, skip = unf.block(x, mask=torch.ones(4))  # callable on its own, as in eager
    expected = copy.deepcopy(model.block)(x, mask=torch.ones(4))
    torch.testing.assert_close(y, expected[0])
    assert skip is x


def test_swapping_in_an_eager_copy_gives_the_same_results():
    model, x = Net(), torch.randn(2, 4)
    unf = _unflattened(model, x)
    expected = copy.deepcopy(model)(x)
    unf.block = copy.deepcopy(model.block)
    unf.set_submodule("other", copy.deepcopy(model.other))
    torch.testing.assert_close(unf(x), expected)
    assert unf.block.steps.item() == 1  # the replacement's own state did the update


def test_swapping_in_a_different_implementation_changes_only_that_part():
    model, x = Net(), torch.randn(2, 4)
    unf = _unflattened(model, x)

    class Doubler(torch.nn.Module):
        def forward(self, x, *, mask=None):
            return x * 2, x

    unf.block = Doubler()
    eager = copy.deepcopy(model)
    eager.block = Doubler()
    torch.testing.assert_close(unf(x), eager(x))


class NoMask(torch.nn.Module):
    def forward(self, x):
        return x, x


class OneOutput(torch.nn.Module):
    def forward(self, x, *, mask=None):
        return x


class WrongShape(torch.nn.Module):
    def forward(self, x, *, mask=None):
        return x[:, :2], x


@pytest.mark.parametrize("replacement,words", [
    (NoMask(), ["'block'", "NoMask", "mask"]),
    (OneOutput(), ["'block'", "OneOutput", "returned *", "('*', '*')"]),
    (WrongShape(), ["'block'", "WrongShape", "size 2 in dimension 1", "program has 4"]),
])
def test_a_replacement_that_does_not_fit_fails_naming_the_submodule_and_the_difference(replacement, words):
    model, x = Net(), torch.randn(2, 4)
    unf = _unflattened(model, x)
    unf.block = replacement
    with pytest.raises(SubmoduleSignatureError) as info:
        unf(x)
    for word in words:
        assert word in str(info.value)
    assert isinstance(info.value, TypeError)


class Flag(torch.nn.Module):
    def forward(self, x, b):
        return x + 1 if b else x + 2


class TwoCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n = Flag()

    def forward(self, x):
        return self.n(self.n(x + 3, True), b=False) + 4


def test_a_preserved_module_called_twice_keeps_each_call_and_is_swapped_once():
    x = torch.randn(3)
    unf = _unflattened(TwoCalls(), x, preserve=("n",))
    torch.testing.assert_close(unf(x), TwoCalls()(x))
    assert [n for n, _ in unf.named_modules()] == ["", "n"]
    torch.testing.assert_close(unf.n(x, True), x + 1)  # each recorded call answers its own structure
    torch.testing.assert_close(unf.n(x, b=False), x + 2)
    with pytest.raises(SubmoduleSignatureError, match="matches none of the calls"):
        unf.n(x, False)  # recorded only positionally with True
    unf.n = Flag()
    torch.testing.assert_close(unf(x), TwoCalls()(x))


def test_without_preserving_later_calls_can_be_swapped_one_by_one():
    class Plus5(torch.nn.Module):
        def forward(self, x):
            return x + 5

    class Plus6(torch.nn.Module):
        def forward(self, x):
            return x + 6

    x = torch.randn(3)
    unf = unflatten(graphcap.export(TwoCalls(), (x,)))
    torch.testing.assert_close(unf(x), TwoCalls()(x))
    unf.set_submodule("n", Plus5())
    unf.set_submodule("n@1", Plus6())
    torch.testing.assert_close(unf(x), x + 3 + 5 + 6 + 4)


def test_a_copy_of_the_unflattened_module_runs_its_preserved_calls_on_its_own_state():
    class Counting(Flag):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x, b):
            self.calls.add_(1)
            return super().forward(x, b)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n = Counting()

        def forward(self, x):
            return self.n(self.n(x, True), b=False)

    x = torch.randn(3)
    unf = _unflattened(Twice(), x, preserve=("n",))
    twin = copy.deepcopy(unf)
    torch.testing.assert_close(twin(x), x + 3)
    assert twin.n.calls.item() == 2 and unf.n.calls.item() == 0
