"""Unflatten against eager on cases the public suite does not pin down (docs/torch-suite.md,
"Unflatten audit"): buffers updated inside submodules and read around them, buffers
reassigned (``self.n = self.n + ...``), inputs updated inside a preserved submodule, all
with and without swapping the submodule for an eager copy and with and without
``run_decompositions``; every case runs several times, since state carries over.
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from graphcap.hierarchy import SubmoduleSignatureError


class Doubling(torch.nn.Module):
    """Reads its buffer, doubles it in place, reads it again."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.ones(4))

    def forward(self, x):
        y = x + self.n
        self.n.mul_(2)
        return y + self.n


class ReadsChildBufferBetweenCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Doubling()

    def forward(self, x):
        y = self.a(x)
        z = y * self.a.n
        return self.a(z) + self.a.n


class Reassigning(torch.nn.Module):
    """Replaces its buffer with a new tensor (not an in-place update)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(4))

    def forward(self, x):
        self.n = self.n + x.sum(0)
        return x - self.n


class CallsTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.r = Reassigning()

    def forward(self, x):
        return self.r(self.r(x)) * self.r.n


class ReturnsSnapshot(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.r = Reassigning()

    def forward(self, x):
        y = self.r(x)
        snapshot = self.r.n  # a new tensor in eager: the next call does not change it
        return self.r(y), snapshot


class IncrementsInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class ReadsInputAfter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = IncrementsInput()

    def forward(self, x):
        return self.m(x) + x


def _unflattened(model, args, preserve=(), swap=(), decompose=False, dynamic_shapes=None):
    ep = graphcap.export(copy.deepcopy(model), args, preserve_module_call_signature=preserve,
                         dynamic_shapes=dynamic_shapes)
    if decompose:
        ep = ep.run_decompositions()
    unf = graphcap.unflatten(ep)
    for fqn in swap:
        unf.set_submodule(fqn, copy.deepcopy(model.get_submodule(fqn)))
    return unf


def _same_as_eager_over_runs(model, args_of_run, runs=3, **kw):
    unf = _unflattened(model, args_of_run(), **kw)
    eager = copy.deepcopy(model)
    kept = []
    for _ in range(runs):
        got, expected = unf(*args_of_run()), eager(*args_of_run())
        torch.testing.assert_close(got, expected)
        kept.append((got, expected))
    for got, expected in kept:  # outputs of earlier runs were not changed by later ones
        torch.testing.assert_close(got, expected)
    for name, buf in eager.named_buffers():
        torch.testing.assert_close(unf.get_buffer(name), buf)


VARIANTS = [dict(), dict(decompose=True), dict(preserve=("{0}",)), dict(preserve=("{0}",), swap=("{0}",)),
            dict(preserve=("{0}",), swap=("{0}",), decompose=True)]


def _variant(variant, fqn):
    return {k: tuple(s.format(fqn) for s in v) if isinstance(v, tuple) else v for k, v in variant.items()}


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_a_parent_reading_the_childs_buffer_between_calls(variant):
    x = torch.randn(3, 4)
    _same_as_eager_over_runs(ReadsChildBufferBetweenCalls(), lambda: (x,), **_variant(variant, "a"))


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_a_reassigned_buffer_in_a_submodule_called_twice(variant):
    x = torch.randn(3, 4)
    _same_as_eager_over_runs(CallsTwice(), lambda: (x,), **_variant(variant, "r"))


@pytest.mark.parametrize("variant", VARIANTS[:3], ids=str)
def test_a_returned_snapshot_of_a_reassigned_buffer_keeps_its_value(variant):
    x = torch.randn(3, 4)
    _same_as_eager_over_runs(ReturnsSnapshot(), lambda: (x,), **_variant(variant, "r"))


@pytest.mark.parametrize("decompose", [False, True])
def test_a_swapped_submodule_whose_buffer_is_returned_is_refused_not_wrong(decompose):
    """The returned value is the buffer as one call left it; a replacement keeps that inside
    itself, so the program cannot take it from the call: a clear error, never other numbers."""
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning, match="rebuilt without its recorded signature"):
        unf = _unflattened(ReturnsSnapshot(), (x,), preserve=("r",), swap=("r",), decompose=decompose)
    with pytest.raises(SubmoduleSignatureError, match="Submodule 'r' was replaced by Reassigning"):
        unf(x)


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_an_input_updated_inside_a_submodule_and_read_after(variant):
    model = ReadsInputAfter()
    unf = _unflattened(model, (torch.zeros(3),), **_variant(variant, "m"))
    for _ in range(2):
        a, b = torch.zeros(3), torch.zeros(3)
        torch.testing.assert_close(unf(b), model(a))
        torch.testing.assert_close(b, a)  # the caller's tensor was updated, as eager updates it


def test_swapped_decomposed_and_dynamic_across_the_range():
    model = ReadsChildBufferBetweenCalls()
    batch = graphcap.Dim("batch", min=2, max=16)
    unf = _unflattened(model, (torch.randn(4, 4),), preserve=("a",), swap=("a",), decompose=True,
                       dynamic_shapes=({0: batch},))
    eager = copy.deepcopy(model)
    for n in (2, 9, 16):
        x = torch.randn(n, 4)
        torch.testing.assert_close(unf(x), eager(x))


def test_a_module_list_in_a_loop_each_block_called_twice_swapped_and_decomposed():
    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Doubling() for _ in range(3)])

        def forward(self, x):
            for b in list(self.blocks) + list(self.blocks)[::-1]:
                x = b(x)
            return x

    x = torch.randn(3, 4)
    _same_as_eager_over_runs(Loop(), lambda: (x,), runs=2, preserve=("blocks.0", "blocks.2"),
                             swap=("blocks.0", "blocks.2"), decompose=True)


def test_two_modules_sharing_one_buffer_tensor():
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Doubling(), Doubling()
            self.b.n = self.a.n

        def forward(self, x):
            return self.a(x) + self.b(x)

    x = torch.randn(3, 4)
    _same_as_eager_over_runs(Shared(), lambda: (x,), runs=2)


def test_type_names_constants_and_train_mode_batch_norm():
    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = torch.tensor([1.0, 2.0, 3.0, 4.0])
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return self.bn(x * self.k)

    class Top(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = WithConstant()

        def forward(self, x):
            return self.c(x)

    x = torch.randn(5, 4)
    model = Top().train()
    _same_as_eager_over_runs(model, lambda: (x,), runs=2)
    unf = _unflattened(model, (x,))
    assert unf.type_name().endswith("Top") and unf.c.type_name().endswith("WithConstant")
    assert unf.c.bn.type_name() == "torch.nn.modules.batchnorm.BatchNorm1d"
    torch.testing.assert_close(unf.c.k, model.c.k)


class TakesLength(torch.nn.Module):
    def forward(self, x, k):
        return x[:k] * 2


class PassesLength(torch.nn.Module):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset
        self.i = TakesLength()

    def forward(self, x):
        return self.i(x, x.shape[0] - self.offset) + 1


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("offset", [0, 1])
def test_a_size_passed_to_a_preserved_submodule_is_a_symint_of_the_signature(strict, offset):
    """``sub(x, x.shape[0] - 1)`` on a dynamic batch: the signature names the graph's value
    (``SymIntArgument``), not the expression, so the unflattened module runs (it raised a
    NameError on the expression's symbol), swapped, decomposed, and through torch's unflatten."""
    model = PassesLength(offset)
    batch = graphcap.Dim("batch", min=2, max=10)
    ep = graphcap.export(model, (torch.randn(4, 4),), dynamic_shapes=({0: batch},),
                         preserve_module_call_signature=("i",), strict=strict)
    size_arg = ep.module_call_graph[1].signature.inputs[1]
    assert isinstance(size_arg, graphcap.SymIntArgument)
    for program in (ep, ep.run_decompositions()):
        unf = graphcap.unflatten(program)
        swapped = graphcap.unflatten(program)
        swapped.set_submodule("i", TakesLength())
        torch_unf = torch.export.unflatten(program)
        for n in (2, 7, 10):
            x = torch.randn(n, 4)
            for runnable in (unf, swapped, torch_unf):
                torch.testing.assert_close(runnable(x), model(x))


class IgnoresLength(torch.nn.Module):
    def forward(self, x, k):
        return x * 2


class UsesLength(torch.nn.Module):
    def forward(self, x, k):
        return x * 2 + k


class PassesUnusedLength(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.i = IgnoresLength()

    def forward(self, x):
        return self.i(x, 2 * x.shape[0] + 1)


def test_a_size_the_callee_ignores_is_still_passed_to_a_replacement():
    """The trace drops a size nothing uses; the signature still names it (computed from the
    input sizes), so a replacement that reads it gets the call's value at every size."""
    batch = graphcap.Dim("batch", min=2, max=10)
    ep = graphcap.export(PassesUnusedLength(), (torch.randn(4, 4),), dynamic_shapes=({0: batch},),
                         preserve_module_call_signature=("i",))
    for program in (ep, ep.run_decompositions()):
        unf = graphcap.unflatten(program)
        unf.set_submodule("i", UsesLength())
        for n in (2, 5, 10):
            x = torch.randn(n, 4)
            torch.testing.assert_close(unf(x), x * 2 + (2 * n + 1))
