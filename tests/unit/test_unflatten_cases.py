"""unflatten(ep) on the cases users report as strange with torch's unflatten.

A module called more than once (one module, every call kept), shared
submodules and tied parameters, sliced / indexed ModuleList and Sequential,
a submodule feeding a sibling, functions and modules mixed at one level,
kwargs and pytrees into submodules, modules inside torch.cond branches,
dynamic shapes, and programs loaded from a file.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from conftest import save_load
from graphcap.hierarchy import unflatten


def _check(model, args, kwargs=None, *, others=(), loaded=False, **export_kw):
    """Unflatten (optionally after save/load) and compare with eager at ``args`` and ``others``."""
    kwargs = kwargs or {}
    ep = graphcap.export(model, args, kwargs, **export_kw)
    if loaded:
        ep = save_load(ep)
    unf = unflatten(ep)
    eager = copy.deepcopy(model)
    for call_args in (args, *others):
        expected = eager(*call_args, **kwargs)
        got = unf(*call_args, **kwargs)
        for e, g in zip(pytree.tree_leaves(expected), pytree.tree_leaves(got)):
            torch.testing.assert_close(g, e)
    assert set(unf.state_dict()) == set(model.state_dict())
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(unf.state_dict()[key], value)
    return unf, ep


class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, scale: float = 1.0):
        self.count.add_(1)
        return self.lin(x) * scale


class CalledTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = Step()

    def forward(self, x):
        return self.step(self.step(x), scale=0.5) + self.step(x)


@pytest.mark.parametrize("loaded", [False, True])
def test_a_module_called_several_times_is_one_module_with_every_call_kept(loaded):
    unf, _ = _check(CalledTwice(), (torch.randn(2, 4),), loaded=loaded)
    assert [n for n, _ in unf.named_modules()] == ["", "step", "step.lin"]
    assert list(unf.state_dict()) == ["step.count", "step.lin.weight", "step.lin.bias"]
    calls = [n for n in unf.graph.nodes if n.op == "call_module"]
    assert len(calls) == 3  # every call kept
    assert unf.step.count.item() == 3  # all three updated the one buffer
    view = getattr(unf, "step@1")  # the call that ran another graph (scale=0.5) reads the module's state
    assert view.lin is unf.step.lin and view.count is unf.step.count


class Sliced(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))

    def forward(self, x):
        for layer in self.layers[1:3]:
            x = layer(x)
        x = self.layers[-1](x)
        return self.seq[1:](x) + self.seq(x)


def test_sliced_and_indexed_module_lists_and_sequentials():
    unf, _ = _check(Sliced(), (torch.randn(2, 4),))
    names = {n for n, _ in unf.named_modules()}
    assert {"layers.0", "layers.1", "layers.2", "layers.3", "seq", "seq.0", "seq.1", "seq.2"} <= names
    assert "layers.0.weight" in unf.state_dict()  # never called, still holds its state
    assert unf.layers[-1] is unf.layers.get_submodule("3")  # indexable as the original list
    with pytest.raises(RuntimeError, match="never ran"):
        unf.layers[0](torch.randn(2, 4))


class Shared(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.b(self.a(self.emb(ids))))


def test_shared_submodules_and_tied_parameters_stay_shared():
    unf, _ = _check(Shared(), (torch.tensor([1, 2, 3]),))
    assert unf.a is unf.b
    assert unf.head.weight is unf.emb.weight
    with torch.no_grad():
        unf.emb.weight.zero_()
    assert unf(torch.tensor([1, 2, 3])).abs().sum() == 0


class Siblings(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(4, 4)
        self.dec = torch.nn.Linear(4, 4)

    def forward(self, x):
        e = self.enc(x)
        return self.dec(e) + torch.relu(e) * torch.nn.functional.gelu(x)


def test_a_submodule_feeding_a_sibling_and_functions_mixed_with_modules():
    unf, _ = _check(Siblings(), (torch.randn(2, 4),))
    calls = [n.target for n in unf.graph.nodes if n.op == "call_module"]
    assert calls == ["enc", "dec"]
    assert any(n.target == torch.ops.aten.gelu.default for n in unf.graph.nodes)


class TakesPytrees(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, *, scale=1.0, extra=None):
        return {"out": self.lin(x) * scale + extra["t"][0], "aux": [x]}


class PassesPytrees(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = TakesPytrees()

    def forward(self, x, d):
        return self.inner(x, scale=2.0, extra={"t": (d["y"],)})["out"]


@pytest.mark.parametrize("preserve", [(), ("inner",)])
def test_kwargs_and_pytrees_into_submodules(preserve):
    args = (torch.randn(2, 4), {"y": torch.randn(2, 4)})
    unf, _ = _check(PassesPytrees(), args, preserve_module_call_signature=preserve)
    if preserve:
        out = unf.inner(args[0], scale=2.0, extra={"t": (args[1]["y"],)})
        assert set(out) == {"out", "aux"}


class Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 4)
        self.l2 = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.l1(x), lambda x: self.l2(x), (x,))


class WithCond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Branches()

    def forward(self, x):
        return self.inner(x) + 1


@pytest.mark.parametrize("loaded", [False, True])
def test_modules_inside_cond_branches(loaded):
    unf, _ = _check(WithCond(), (torch.randn(2, 4),), others=[(-torch.ones(2, 4),), (torch.ones(2, 4),)],
                    loaded=loaded)
    assert {"inner", "inner.l1", "inner.l2"} <= {n for n, _ in unf.named_modules()}
    assert any(n.target is torch.ops.higher_order.cond for n in unf.inner.graph.nodes)


class Reshapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y.view(y.shape[0] * 2, 2)


class Dynamic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Reshapes()

    def forward(self, x):
        return self.body(x).sum(0)


@pytest.mark.parametrize("preserve,loaded", [((), False), (("body",), False), ((), True)])
def test_dynamic_shapes_across_the_range(preserve, loaded):
    batch = torch.export.Dim("batch", min=2, max=64)
    unf, _ = _check(Dynamic(), (torch.randn(3, 4),), others=[(torch.randn(2, 4),), (torch.randn(64, 4),)],
                    dynamic_shapes=({0: batch},), preserve_module_call_signature=preserve, loaded=loaded)
    # the submodule takes its tensor only; the size it needs is recomputed inside
    assert len([n for n in unf.body.graph.nodes if n.op == "placeholder"]) == 1
    with pytest.raises(Exception, match="to be <= 64"):
        unf(torch.randn(65, 4))


def test_a_function_is_unflattened_to_a_flat_root():
    def f(x, y):
        return x * y + 1

    ep = graphcap.export(f, (torch.randn(2), torch.randn(2)))
    unf = unflatten(ep)
    x, y = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(unf(x, y), f(x, y))
    assert [n for n, _ in unf.named_modules()] == [""]
