"""A preserved submodule that updates its buffer on every call stays swappable after
run_decompositions: each call reads and writes its module's state (no value of the buffer
passes between calls behind the submodule's back), so a replacement computes what eager
does; where a call cannot be cut at its signature, running it with a replacement is refused
instead of silently ignoring the replacement. Unflattened modules name the eager class."""
import copy
import warnings

import pytest
import torch

import graphcap
from graphcap.hierarchy.preserved import SubmoduleSignatureError


class Counter(torch.nn.Module):
    def __init__(self, step=1.0):
        super().__init__()
        self.step = step
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(self.step)
        return x * 2 + self.count


class Wrapper(torch.nn.Module):  # the buffer one level below the preserved module
    def __init__(self, step=1.0):
        super().__init__()
        self.inner = Counter(step)

    def forward(self, x):
        return self.inner(x) - 1


class ThreeCalls(torch.nn.Module):
    def __init__(self, child):
        super().__init__()
        self.child = child

    def forward(self, x):
        y = self.child(x)
        z = self.child(y)
        return z + self.child(z)


def _unflatten(model, x, decompose):
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("child",))
    if decompose:
        ep = ep.run_decompositions()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every call keeps its signature: no fallback warning
        return graphcap.unflatten(ep)


@pytest.mark.parametrize("decompose", [False, True])
@pytest.mark.parametrize("make", [Counter, Wrapper])
def test_swapped_buffer_updating_submodule_matches_eager(decompose, make):
    x = torch.arange(3.0)
    unf = _unflatten(ThreeCalls(make()), x, decompose)
    unf.child = make(step=3.0)
    eager = ThreeCalls(make(step=3.0))
    for _ in range(2):  # the replacement's state carries over calls, as in eager
        torch.testing.assert_close(unf(x), eager(x))
    buffers = dict(unf.child.named_buffers())
    for name, value in eager.child.named_buffers():
        torch.testing.assert_close(buffers[name], value)


@pytest.mark.parametrize("decompose", [False, True])
def test_unswapped_program_updates_the_buffer_once_per_call(decompose):
    x = torch.ones(3)
    unf = _unflatten(ThreeCalls(Counter()), x, decompose)
    eager = ThreeCalls(Counter())
    torch.testing.assert_close(unf(x), eager(x))
    torch.testing.assert_close(unf.child.count, eager.child.count)  # three updates, not one
    torch.testing.assert_close(unf(x), eager(x))


class Stash(torch.nn.Module):
    def forward(self, x):
        self.stash = x * 2  # read by the caller, but not an output of the call
        return x + 1


class ReadsStash(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Stash()

    def forward(self, x):
        return self.child(x) + self.child.stash


def test_call_without_its_signature_refuses_a_replacement():
    x = torch.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(ReadsStash(), (x,), preserve_module_call_signature=("child",))
    with pytest.warns(UserWarning, match="raises an error"):
        unf = graphcap.unflatten(ep)
    torch.testing.assert_close(unf(x), ReadsStash()(x))  # as exported, it runs
    copied = copy.deepcopy(unf)
    unf.child = Stash()
    with pytest.raises(SubmoduleSignatureError, match="'child'.*replaced by Stash"):
        unf(x)
    torch.testing.assert_close(copied(x), ReadsStash()(x))  # a copy keeps the check and passes it


class Leaf(torch.nn.Module):
    def forward(self, x):
        return x.cos()


class Tree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = Leaf()
        self.seq = torch.nn.Sequential(torch.nn.ReLU())

    def forward(self, x):
        return self.seq(self.leaf(self.leaf(x)))


def test_unflattened_modules_name_the_eager_classes():
    ep = graphcap.export(Tree(), (torch.ones(2),))
    unf = graphcap.unflatten(ep)
    assert unf.type_name() == f"{__name__}.Tree"
    assert unf.leaf.type_name() == f"{__name__}.Leaf"
    assert unf.seq.type_name() == "torch.nn.modules.container.Sequential"
    views = [m for name, m in unf.named_modules(remove_duplicate=False) if "@" in name]
    assert all(v.type_name() == f"{__name__}.Leaf" for v in views)
    assert str(unf).startswith("Tree(")  # printing keeps the short names
