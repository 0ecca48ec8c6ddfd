"""Custom operators (torch.library) and torch.autograd.Function in exported programs.

A custom operator with a fake kernel is recorded as one ``torch.ops.<ns>.<op>``
node and its real kernel runs when the program runs; one without a fake
kernel is refused with an error that names it and shows how to register one.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import graphcap
from conftest import assert_same_outputs
from graphcap.errors import MissingFakeKernelError

CALLS = {"scaled_sin": 0}


@torch.library.custom_op("graphcap_cf_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    CALLS["scaled_sin"] += 1
    return x.sin() * scale


@scaled_sin.register_fake
def _(x, scale):
    return torch.empty_like(x)


@torch.library.custom_op("graphcap_cf_test::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@torch.library.custom_op("graphcap_cf_test::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x)


@add_into.register_fake
def _(x, out):
    return None


_LIB = torch.library.Library("graphcap_cf_test2", "DEF")
_LIB.define("top2(Tensor x) -> (Tensor, Tensor)")
_LIB.impl("top2", lambda x: torch.topk(x, 2, dim=-1), "CompositeExplicitAutograd")
torch.library.register_fake("graphcap_cf_test2::top2", lambda x: (x.new_empty(*x.shape[:-1], 2),
                                                                   x.new_empty(*x.shape[:-1], 2,
                                                                               dtype=torch.int64)),
                            lib=_LIB)
_LIB.define("legacy_abs(Tensor x) -> Tensor")
_LIB.impl("legacy_abs", lambda x: x.abs(), "CompositeExplicitAutograd")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # impl_abstract is the older name of register_fake
    torch.library.impl_abstract("graphcap_cf_test2::legacy_abs", lambda x: torch.empty_like(x), lib=_LIB)
_LIB.define("cpu_only(Tensor x) -> Tensor")
_LIB.impl("cpu_only", lambda x: x * 3, "CPU")


def _export(model, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, args, **kw)


def _targets(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def test_custom_op_is_one_node_and_runs_when_the_program_runs():
    class M(torch.nn.Module):
        def forward(self, x):
            return scaled_sin(x, 2.5) + 1

    m = M()
    x = torch.randn(4)
    ep = _export(m, (x,))
    assert torch.ops.graphcap_cf_test.scaled_sin.default in _targets(ep)
    assert "torch.ops.graphcap_cf_test.scaled_sin.default" in ep.graph_module.code
    before = CALLS["scaled_sin"]
    got = ep.module()(x)
    assert CALLS["scaled_sin"] == before + 1  # the real kernel ran
    assert_same_outputs(m(x), got)


def test_library_define_with_register_fake_and_impl_abstract():
    class M(torch.nn.Module):
        def forward(self, x):
            values, idx = torch.ops.graphcap_cf_test2.top2(x)
            return torch.ops.graphcap_cf_test2.legacy_abs(values), idx

    m = M()
    x = torch.randn(3, 5)
    ep = _export(m, (x,))
    targets = _targets(ep)
    assert torch.ops.graphcap_cf_test2.top2.default in targets
    assert torch.ops.graphcap_cf_test2.legacy_abs.default in targets
    got = ep.module()(x)
    assert got[1].dtype == torch.int64
    assert_same_outputs(m(x), got)
    y = torch.randn(3, 5)
    assert_same_outputs(m(y), ep.module()(y))


def test_custom_op_that_mutates_an_input():
    class M(torch.nn.Module):
        def forward(self, x, acc):
            add_into(x * 2, acc)
            return acc + 1

    m = M()
    x = torch.randn(3)
    ep = _export(m, (x, torch.zeros(3)))
    # training IR: the custom op's write stays in the graph; the inference IR lists it as an output
    assert [s.kind for s in ep.graph_signature.output_specs] == [graphcap.OutputKind.USER_OUTPUT]
    kinds = [s.kind for s in ep.run_decompositions().graph_signature.output_specs]
    assert graphcap.OutputKind.USER_INPUT_MUTATION in kinds
    acc_eager, acc_ep = torch.ones(3), torch.ones(3)
    expected = m(x, acc_eager)
    got = ep.module()(x, acc_ep)
    assert_same_outputs(expected, got)
    assert_same_outputs(acc_eager, acc_ep)


def test_custom_op_inside_a_branch():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: scaled_sin(x, 3.0), lambda x: x * 0, (x,))

    m = M()
    x = torch.rand(4)
    ep = _export(m, (x,))
    branch = ep.graph_module.true_graph_0
    assert any(n.target is torch.ops.graphcap_cf_test.scaled_sin.default for n in branch.graph.nodes)
    assert_same_outputs(m(x), ep.module()(x))
    assert_same_outputs(m(-x), ep.module()(-x))


@pytest.mark.parametrize("call, op_name", [
    (lambda x: no_fake(x), "graphcap_cf_test::no_fake"),
    (lambda x: torch.ops.graphcap_cf_test2.cpu_only(x), "graphcap_cf_test2::cpu_only"),
], ids=["custom_op", "library_define"])
def test_custom_op_without_fake_kernel_names_it_and_shows_the_fix(call, op_name):
    class M(torch.nn.Module):
        def forward(self, x):
            return call(x) * 2

    with pytest.raises(MissingFakeKernelError) as info:
        _export(M(), (torch.randn(3),))
    err = info.value
    assert isinstance(err, graphcap.UnsupportedError)
    assert err.op_name == op_name
    text = str(err)
    assert f"torch.ops.{op_name.replace('::', '.')}" in text
    assert f'@torch.library.register_fake("{op_name}")' in text
    assert "test_custom_ops.py" in text  # where: the user's line


class ClampGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bound):
        ctx.bound = bound
        return x.clamp(-bound, bound) * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


def test_autograd_function_exports_its_forward():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return ClampGrad.apply(self.lin(x), 0.5).sum(-1)

    m = M()
    x = torch.randn(3, 4)
    ep = _export(m, (x,))
    targets = _targets(ep)
    assert torch.ops.aten.clamp.default in targets
    assert all(isinstance(t, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)) or callable(t)
               for t in targets)
    with torch.no_grad():
        assert_same_outputs(m(x), ep.module()(x))
        y = torch.randn(3, 4) * 10
        assert_same_outputs(m(y), ep.module()(y))
