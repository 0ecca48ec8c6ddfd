"""A submodule called more than once, or reachable under two names, recorded call by call.

Node metadata names each call (``L__self__sub`` then ``L__self__sub@1``), a
shared module is recorded under the name each call used, and
``preserve_module_call_signature`` keeps one signature per call, so that
torch's own ``torch.export.unflatten`` rebuilds the hierarchy from a graphcap
program and computes what eager does.
"""
from __future__ import annotations

import torch
from torch import nn

import graphcap


class Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


class CalledTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        return self.sub(self.sub(x)) + 1


class SharedUnderTwoNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Sub()
        self.b = self.a

    def forward(self, x):
        return self.b(self.a(x))


class WithFlag(nn.Module):
    def forward(self, x, flag):
        return x + 1 if flag else x * 2


class CalledWithFlags(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = WithFlag()

    def forward(self, x):
        x = self.n(x + 3, True)
        return self.n(x + 4, False) + 5


def _stacks(ep):
    return {n.name: n.meta["nn_module_stack"] for n in ep.graph.nodes if n.op == "call_function"}


def _check_runs_like_eager(model, ep, x):
    expected = model(x)
    torch.testing.assert_close(ep.module()(x), expected)
    torch.testing.assert_close(torch.export.unflatten(ep)(x), expected)


def test_second_call_has_its_own_call_keys():
    model, x = CalledTwice(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,))
    stacks = _stacks(ep)
    assert stacks["linear"] == {"L__self__": ("", f"{__name__}.CalledTwice"),
                                "L__self__sub": ("sub", f"{__name__}.Sub"),
                                "L__self__sub.linear": ("sub.linear", "torch.nn.modules.linear.Linear")}
    assert stacks["linear_1"] == {"L__self__": ("", f"{__name__}.CalledTwice"),
                                  "L__self__sub@1": ("sub", f"{__name__}.Sub"),
                                  "L__self__sub.linear@1": ("sub.linear", "torch.nn.modules.linear.Linear")}
    assert stacks["add"] == {"L__self__": ("", f"{__name__}.CalledTwice")}
    # the module tree, no signatures (none preserved)
    assert [(e.fqn, e.signature) for e in ep.module_call_graph[1:]] == [("sub", None), ("sub.linear", None)]
    _check_runs_like_eager(model, ep, x)


def test_shared_module_recorded_under_the_name_each_call_used():
    model, x = SharedUnderTwoNames(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,))
    paths = {name: [path for path, _ in stack.values()] for name, stack in _stacks(ep).items()}
    assert paths["linear"] == ["", "a", "a.linear"]
    assert paths["linear_1"] == ["", "b", "b.linear"]
    assert [e.fqn for e in ep.module_call_graph] == ["", "a", "a.linear", "b", "b.linear"]
    _check_runs_like_eager(model, ep, x)


def test_preserved_signature_per_call():
    model, x = CalledTwice(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("sub",))
    entries = {e.fqn: e.signature for e in ep.module_call_graph}
    assert list(entries) == ["", "sub", "sub.linear", "sub@1"]
    assert entries["sub.linear"] is None
    first, second = entries["sub"], entries["sub@1"]
    assert [a.name for a in first.inputs] == ["x"] and [a.name for a in first.outputs] == ["relu"]
    assert [a.name for a in second.inputs] == ["relu"] and [a.name for a in second.outputs] == ["relu_1"]
    assert first.forward_arg_names is None and first.in_spec == second.in_spec
    _check_runs_like_eager(model, ep, x)


def test_preserved_calls_with_different_constants_dispatch():
    model, x = CalledWithFlags(), torch.ones(1)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("n",))
    entries = {e.fqn: e.signature for e in ep.module_call_graph}
    assert [a.value for a in entries["n"].inputs[1:]] == [True]
    assert [a.value for a in entries["n@1"].inputs[1:]] == [False]
    _check_runs_like_eager(model, ep, x)
    unflat = torch.export.unflatten(ep)
    unflat.set_submodule("n", WithFlag())  # a preserved signature lets the module be swapped
    torch.testing.assert_close(unflat(x), model(x))


def test_preserving_one_name_of_a_shared_module_keeps_only_its_calls():
    model, x = SharedUnderTwoNames(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("a",))
    entries = {e.fqn: e.signature for e in ep.module_call_graph}
    assert [a.name for a in entries["a"].inputs] == ["x"] and [a.name for a in entries["a"].outputs] == ["relu"]
    assert entries["b"] is None and "a@1" not in entries
    _check_runs_like_eager(model, ep, x)


def test_module_after_unflatten():
    """torch's unflatten hangs itself on the graph's meta; module() still builds."""
    model, x = CalledTwice(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,))
    torch.export.unflatten(ep)
    torch.testing.assert_close(ep.module()(x), model(x))


def test_method_target_with_shared_module():
    model, x = SharedUnderTwoNames(), torch.randn(2, 4)
    ep = graphcap.export(model.forward, (x,))
    paths = {name: [path for path, _ in stack.values()] for name, stack in _stacks(ep).items()}
    assert paths["linear_1"][-2:] == ["b", "b.linear"]
    torch.testing.assert_close(ep.module()(x), model(x))


class Buffered(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buffer", torch.ones(2, 2))

    def forward(self, x):
        return x + self.buffer


class DisabledMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = Buffered()

    @torch._dynamo.disable()
    def foo1(self, x):
        return self.n(x) @ x

    def foo2(self, x):
        return self.n(x) * x

    def forward(self, x):
        return self.foo1(x) + self.foo2(x) + self.foo1(x)


def test_disable_annotation_kept_for_the_users_function_only():
    """Under preserve_node_meta, nodes made inside the user's ``@torch._dynamo.disable``
    method keep its annotation (torch's unflatten lifts it onto each call of ``n``);
    torch's own disabled machinery leaves none."""
    x = torch.randn(2, 2)
    with torch.fx.traceback.preserve_node_meta():
        ep = graphcap.export(DisabledMethod(), (x,))
    methods = {n.name: n.meta.get("custom", {}).get("_torchdynamo_disable_method") for n in ep.graph.nodes}
    assert methods == {"b_n_buffer": None, "x": None, "add": "foo1", "matmul": "foo1", "add_1": None,
                       "mul": None, "add_2": None, "add_3": "foo1", "matmul_1": "foo1", "add_4": None,
                       "output": None}
    unflat = torch.export.unflatten(ep)
    calls = {n.name: n.meta.get("custom") for n in unflat.graph.nodes if n.op == "call_module"}
    assert calls["n"]["_torchdynamo_disable_method"] == "foo1" and calls["n_1"] is None
    torch.testing.assert_close(unflat(x), DisabledMethod()(x))
