"""Lifting of tensor attributes and constants, and the names torch.export gives placeholders."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.export.graph_signature import InputKind as TorchInputKind

import graphcap
from graphcap import InputKind


def _placeholders(ep):
    return [n for n in ep.graph.nodes if n.op == "placeholder"]


def test_attribute_read_twice_is_one_input_and_program_matches_eager():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.foo = torch.randn(2, 2)

        def forward(self, x):
            return self.foo, self.foo + x

    m, x = M(), torch.ones(2, 2)
    ep = graphcap.export(m, (x,))
    assert [(s.kind, s.arg.name, s.target) for s in ep.graph_signature.input_specs] == [
        (InputKind.CONSTANT_TENSOR, "c_foo", "foo"), (InputKind.USER_INPUT, "x", None)]
    for got, want in zip(ep.module()(x), m(x)):
        torch.testing.assert_close(got, want)


def test_tensor_held_by_parent_and_child_is_one_input_under_both_fqns():
    class Child(nn.Module):
        def __init__(self):
            super().__init__()
            self.foo = torch.ones(3, 3, requires_grad=True)

        def forward(self, x):
            return x + self.foo

    class Parent(nn.Module):
        def __init__(self, child):
            super().__init__()
            self.m2 = child
            self.foo = child.foo

        def forward(self, x):
            return x + self.foo + self.m2(x)

    m, x = Parent(Child()), torch.ones(3, 3)
    ep = graphcap.export(m, (x,))
    assert sorted(ep.constants) == ["foo", "m2.foo"]
    assert ep.constants["foo"] is ep.constants["m2.foo"]
    consts = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.CONSTANT_TENSOR]
    assert [(s.arg.name, s.target) for s in consts] == [("c_foo", "foo")]
    assert len(_placeholders(ep)) == 2
    torch.testing.assert_close(ep.module()(x), m(x))


def test_tensor_made_in_a_submodule_forward_is_named_after_that_module():
    class Inner(nn.Module):
        def forward(self, x):
            return x + torch.tensor([1.0, 2.0])

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) * 2

    ep = graphcap.export(Outer(), (torch.ones(2),))
    assert ep.graph_signature.inputs_to_lifted_tensor_constants == {"c_inner_lifted_tensor_0": "inner.lifted_tensor_0"}
    torch.testing.assert_close(ep.module()(torch.ones(2)), Outer()(torch.ones(2)))


def test_unused_constants_are_dropped():
    class M(nn.Module):
        def forward(self, x):
            torch.tensor(3)
            res = [torch.Tensor([])] * 2
            for i in range(2):
                res[i] = x * (i + 1)
            return res

    ep = graphcap.export(M(), (torch.ones(3),))
    assert ep.constants == {}
    assert not any(s.kind is InputKind.CONSTANT_TENSOR for s in ep.graph_signature.input_specs)


def test_placeholders_keep_requires_grad_of_the_real_tensors():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(torch.randn(3, 3))
            self.frozen = nn.Parameter(torch.randn(3, 3), requires_grad=False)

        def forward(self, x, y):
            return self.p + self.frozen + x + y

    ep = graphcap.export(M(), (torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)))
    assert [n.meta["val"].requires_grad for n in _placeholders(ep)] == [True, False, False, True]


def test_user_inputs_keep_their_names_and_state_takes_the_next_suffix():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.param = nn.Parameter(torch.randn(4))
            self.alpha = nn.Buffer(torch.randn(4))
            self.gamma = torch.randn(4)

        def forward(self, p, b_alpha, c_gamma):
            return p["param"] + self.param, self.alpha + b_alpha, self.gamma + c_gamma

    ep = graphcap.export(M(), ({"param": torch.randn(4)}, torch.randn(4), torch.randn(4)))
    assert [(s.arg.name, s.kind) for s in ep.graph_signature.input_specs] == [
        ("p_param_1", InputKind.PARAMETER), ("b_alpha_1", InputKind.BUFFER),
        ("c_gamma_1", InputKind.CONSTANT_TENSOR), ("p_param", InputKind.USER_INPUT),
        ("b_alpha", InputKind.USER_INPUT), ("c_gamma", InputKind.USER_INPUT)]


def test_operator_nodes_make_way_for_input_names():
    class M(nn.Module):
        def forward(self, mul, add, add_1):
            return mul * mul + add * add_1

    ep = graphcap.export(M(), (torch.randn(4), torch.randn(4), torch.randn(4)))
    assert [n.name for n in ep.graph.nodes] == ["mul", "add", "add_1", "mul_1", "mul_2", "add_2", "output"]
    x = torch.randn(4)
    torch.testing.assert_close(ep.module()(x, x, x), x * x + x * x)


def test_nested_input_names_collide_into_suffixes_and_builtin_names_are_kept():
    class M(nn.Module):
        def forward(self, x, x_foo, input):
            return x["foo"][0] + x_foo[0] + input

    ep = graphcap.export(M(), ({"foo": [torch.randn(2)]}, (torch.randn(2),), torch.randn(2)))
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["x_foo_0", "x_foo_0_1", "input"]


def test_kwargs_keep_the_order_given():
    class M(nn.Module):
        def forward(self, x1, x2, flag=True):
            return x1 + x2 if flag else x1 - x2

    args, kwargs = (torch.rand(1, 3),), {"flag": False, "x2": torch.rand(1, 3)}
    ep = graphcap.export(M(), args, kwargs)
    assert ep.graph_signature.user_inputs == ("x1", False, "x2")
    torch.testing.assert_close(ep.module()(args[0], x2=kwargs["x2"], flag=False), M()(*args, **kwargs))


def test_signature_kinds_equal_torch_kinds_of_the_same_name():
    assert InputKind.CONSTANT_TENSOR == TorchInputKind.CONSTANT_TENSOR
    assert TorchInputKind.PARAMETER == InputKind.PARAMETER
    assert InputKind.PARAMETER != TorchInputKind.BUFFER
    assert len({InputKind.BUFFER, TorchInputKind.BUFFER}) == 1  # same hash: one set member


def test_no_grad_parameter_update_is_a_parameter_mutation_of_the_inference_ir():
    class Foo(nn.Module):
        def __init__(self):
            super().__init__()
            self.parameter = nn.Parameter(torch.ones(4, 4))

        def forward(self, x):
            with torch.no_grad():
                self.parameter.div_(2)
            return x + self.parameter

    ep = graphcap.export(Foo(), (torch.rand(4, 4),)).run_decompositions()
    assert list(ep.graph_signature.parameters_to_mutate.values()) == ["parameter"]
    eager, exported = Foo(), ep.module()
    x = torch.rand(4, 4)
    for _ in range(2):
        torch.testing.assert_close(exported(x), eager(x))
        torch.testing.assert_close(exported.parameter.detach(), eager.parameter.detach())


def test_training_ir_keeps_the_parameter_write_in_place():
    class Foo(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2), requires_grad=False)

        def forward(self, x):
            self.w.add_(1)
            return x * self.w

    ep = graphcap.export(Foo(), (torch.ones(2),))
    assert ep.graph_signature.parameters_to_mutate == {}
    exported, eager = ep.module(), Foo()
    for _ in range(2):
        torch.testing.assert_close(exported(torch.ones(2)), eager(torch.ones(2)))


def test_writing_to_a_constant_is_refused_at_export_and_leaves_the_tensor():
    """torch.export refuses it at run_decompositions, after export wrote the model's tensor;
    graphcap refuses at export, before anything is written (tests/unit/test_export_constant_writes.py)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.foo = torch.randn(2, 2)

        def forward(self, x):
            self.foo.add_(5)
            return self.foo + x

    m = M()
    before = m.foo.clone()
    with pytest.raises(RuntimeError, match="Constant foo is") as info:
        graphcap.export(m, (torch.ones(2, 2),)).run_decompositions()
    assert isinstance(info.value, graphcap.UnsupportedError) and "register_buffer" in str(info.value)
    assert torch.equal(m.foo, before)


def test_tuple_dynamic_spec_follows_forward_order_whatever_the_kwargs_order():
    class Foo(nn.Module):
        def forward(self, a, b, kw1, kw2):
            return a.sum() + b.sum() + kw1.sum() - kw2.sum()

    ep = graphcap.export(Foo(), (torch.randn(4, 4), torch.randn(4, 4)),
                         {"kw2": torch.ones(4, 4), "kw1": torch.zeros(4, 4)},
                         dynamic_shapes=(None, {0: graphcap.Dim("d")}, {0: graphcap.Dim("d_kw1")}, None))
    assert ep.graph_signature.user_inputs == ("a", "b", "kw2", "kw1")
    args, kwargs = (torch.randn(4, 4), torch.randn(7, 4)), {"kw2": torch.ones(4, 4), "kw1": torch.zeros(9, 4)}
    torch.testing.assert_close(ep.module()(*args, **kwargs), Foo()(*args, **kwargs))
    with pytest.raises(RuntimeError):
        ep.module()(args[0], args[1], kw2=torch.ones(9, 4), kw1=torch.zeros(9, 4))


class _Holder:
    """A plain object that keeps a module's buffer, as transformers' StaticCache keeps its cache tensors."""

    def __init__(self, tensor):
        self.tensor = tensor


class _CacheThroughHolder(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4), persistent=False)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.holder = _Holder(self.cache)  # the same tensor object as the buffer
        self.counter = _Holder(self.steps)
        self.weight = nn.Parameter(torch.randn(4))
        self.weights = _Holder(self.weight)

    def forward(self, x):
        self.holder.tensor.index_copy_(0, self.counter.tensor.view(1), x * self.weights.tensor[:1])
        self.counter.tensor.add_(torch.ones_like(x, dtype=torch.long).sum())  # one step per call
        return self.holder.tensor.sum() + self.cache[0]


def test_a_buffer_reached_through_another_object_is_the_buffer_not_a_constant():
    m = _CacheThroughHolder()
    eager = _CacheThroughHolder()
    eager.load_state_dict(m.state_dict())
    ep = graphcap.export(m, (torch.tensor([2.0]),))
    kinds = {s.target: s.kind for s in ep.graph_signature.input_specs}
    assert InputKind.CONSTANT_TENSOR not in kinds.values()
    assert kinds == {"weight": InputKind.PARAMETER, "cache": InputKind.BUFFER, "steps": InputKind.BUFFER,
                     None: InputKind.USER_INPUT}
    mutated = ep.run_decompositions().graph_signature.buffers_to_mutate
    assert sorted(mutated.values()) == ["cache", "steps"]
    assert int(m.steps) == 0 and not m.cache.any()  # the trace wrote fakes, not the model's tensors
    runner = ep.module()
    for v in (2.0, -1.0, 5.0):
        torch.testing.assert_close(runner(torch.tensor([v])), eager(torch.tensor([v])))
    torch.testing.assert_close(runner.cache, eager.cache)
    assert int(runner.steps) == 3
