"""strict=True: dynamo's bytecode front end, then the same pipeline as non-strict.

For one model and one set of inputs, the strict and the non-strict program
must agree on everything the pipeline decides: signature, placeholder names,
operator multiset, range constraints, node metadata keys; and the strict one
must compute what eager computes.
"""
from __future__ import annotations

import collections

import pytest
import torch
from torch.export import Dim

import graphcap
from conftest import assert_same_outputs, build_zoo, run_eager_and_exported


def _ops(ep) -> collections.Counter:
    return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def _meta_keys(ep) -> set:
    keys = set()
    for n in ep.graph.nodes:
        if n.op == "call_function":
            keys |= {k for k in n.meta if k in ("val", "stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn")}
    return keys


def _module_stacks(ep) -> list:
    return [n.meta.get("nn_module_stack") for n in ep.graph.nodes if n.op == "call_function"]


def _symbols_by_input_size(ep, other) -> dict:
    """``ep``'s size symbols mapped to ``other``'s at the same input dim."""
    sizes = [(a, b) for x, y in zip(ep.graph.nodes, other.graph.nodes) if x.op == y.op == "placeholder"
             and isinstance(x.meta.get("val"), torch.Tensor) for a, b in zip(x.meta["val"].shape, y.meta["val"].shape)]
    return {a.node.expr: b.node.expr for a, b in sizes
            if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt) and a.node.expr.is_symbol}


def assert_equivalent(strict_ep, non_strict_ep, *, same_stacks=True):
    assert str(strict_ep.graph_signature) == str(non_strict_ep.graph_signature)
    assert [n.name for n in strict_ep.graph.nodes if n.op == "placeholder"] == \
        [n.name for n in non_strict_ep.graph.nodes if n.op == "placeholder"]
    assert _ops(strict_ep) == _ops(non_strict_ep)
    # the same ranges over the same input sizes; each mode numbers its symbols as torch's does
    # (strict by the input's flat position: tests/unit/test_strict_symbol_numbers.py)
    renamed = _symbols_by_input_size(strict_ep, non_strict_ep)
    assert {str(k.xreplace(renamed)): str(v) for k, v in strict_ep.range_constraints.items()} == \
        {str(k): str(v) for k, v in non_strict_ep.range_constraints.items()}
    assert _meta_keys(strict_ep) == _meta_keys(non_strict_ep)
    if same_stacks:
        assert _module_stacks(strict_ep) == _module_stacks(non_strict_ep)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x, bias=None):
        for block in self.blocks:
            x = block(x)
        if x.shape[0] > 2:
            x = x + 1
        out = self.head(x)
        return out + bias if bias is not None else out


def test_strict_matches_non_strict_on_a_module_tree():
    model = Net().eval()
    args, kwargs = (torch.randn(5, 4),), {"bias": torch.randn(2)}
    strict = graphcap.export(model, args, kwargs, strict=True)
    non_strict = graphcap.export(model, args, kwargs)
    assert_equivalent(strict, non_strict)
    expected, got = run_eager_and_exported(model, strict, args, kwargs)
    assert_same_outputs(expected, got)


def test_parameters_lifted_under_their_fqns():
    ep = graphcap.export(Net(), (torch.randn(3, 4),), strict=True)
    targets = [s.target for s in ep.graph_signature.input_specs if s.target]
    assert targets[:3] == ["blocks.0.lin.weight", "blocks.0.lin.bias", "blocks.1.lin.weight"]
    assert "blocks.0.scale" in targets
    assert set(ep.state_dict) == set(Net().state_dict())


def test_metadata_points_at_user_lines_and_modules():
    ep = graphcap.export(Net(), (torch.randn(3, 4),), strict=True)
    linears = [n for n in ep.graph.nodes if n.target is torch.ops.aten.linear.default]
    assert len(linears) == 3
    first = linears[0]
    assert "return torch.relu(self.lin(x)) * self.scale" in first.meta["stack_trace"]
    assert __file__ in first.meta["stack_trace"]
    stack = first.meta["nn_module_stack"]
    assert [path for path, _ in stack.values()] == ["", "blocks.0", "blocks.0.lin"]
    assert list(stack.values())[-1][1] == "torch.nn.modules.linear.Linear"
    assert first.meta["source_fn_stack"] == [(list(stack)[-1], torch.nn.Linear)]  # torch's strict form
    # the second call of a block is told apart by its path
    assert [path for path, _ in linears[1].meta["nn_module_stack"].values()] == ["", "blocks.1", "blocks.1.lin"]


def test_shared_parameter_keeps_its_first_name():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.ones(3))
            self.b = self.a

        def forward(self, x):
            return x * self.a + x * self.b

    strict = graphcap.export(Tied(), (torch.ones(3),), strict=True)
    assert_equivalent(strict, graphcap.export(Tied(), (torch.ones(3),)))
    assert [name for name, _ in strict.module().named_parameters()] == ["a"]


def test_function_and_method_exports():
    def fn(x, y):
        return torch.sin(x) + y.cos()

    args = (torch.randn(3), torch.randn(3))
    assert_equivalent(graphcap.export(fn, args, strict=True), graphcap.export(fn, args))
    model = Net()
    strict = graphcap.export(model.head, (torch.randn(2, 4),), strict=True)
    assert [s.target for s in strict.graph_signature.input_specs if s.target] == ["weight", "bias"]


def test_dynamic_dims_follow_the_spec():
    model = Net().eval()
    batch = Dim("batch", min=3, max=64)
    spec = {"x": {0: batch}, "bias": None}
    args, kwargs = (torch.randn(5, 4),), {"bias": torch.randn(2)}
    strict = graphcap.export(model, args, kwargs, dynamic_shapes=spec, strict=True)
    assert_equivalent(strict, graphcap.export(model, args, kwargs, dynamic_shapes=spec))
    other = (torch.randn(9, 4),)
    expected, got = run_eager_and_exported(model, strict, other, kwargs)
    assert_same_outputs(expected, got)
    with pytest.raises(Exception, match=">= 3"):
        strict.module()(torch.randn(2, 4), bias=torch.randn(2))


def test_guard_dynamo_took_becomes_graphcaps_constraint_violation():
    """`if x.shape[0] > 2` is decided by dynamo, not in its graph: graphcap still sees the guard."""
    model = Net().eval()
    spec = {"x": {0: Dim("batch")}, "bias": None}
    args, kwargs = (torch.randn(5, 4),), {"bias": torch.randn(2)}
    with pytest.raises(graphcap.errors.ConstraintViolationError) as strict_err:
        graphcap.export(model, args, kwargs, dynamic_shapes=spec, strict=True)
    with pytest.raises(graphcap.errors.ConstraintViolationError) as non_strict_err:
        graphcap.export(model, args, kwargs, dynamic_shapes=spec)
    assert str(strict_err.value) == str(non_strict_err.value)
    assert "if x.shape[0] > 2:" in str(strict_err.value)
    assert "Dim('batch', min=3)" in str(strict_err.value)
    assert isinstance(strict_err.value, torch._dynamo.exc.UserError)


def test_specialized_dim_is_reported_as_in_non_strict():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 4:
                return x * 2
            return x

    spec = {"x": {0: Dim("n")}}
    with pytest.raises(graphcap.errors.ConstraintViolationError) as strict_err:
        graphcap.export(Fixed(), (torch.randn(4, 3),), dynamic_shapes=spec, strict=True)
    with pytest.raises(graphcap.errors.ConstraintViolationError) as non_strict_err:
        graphcap.export(Fixed(), (torch.randn(4, 3),), dynamic_shapes=spec)
    assert str(strict_err.value) == str(non_strict_err.value)


def test_related_dims_and_auto():
    class Cat(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    spec = {"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}}
    args = (torch.randn(4, 3), torch.randn(4, 3))
    strict = graphcap.export(Cat(), args, dynamic_shapes=spec, strict=True)
    assert_equivalent(strict, graphcap.export(Cat(), args, dynamic_shapes=spec))
    assert strict.module()(torch.ones(7, 3), torch.ones(7, 3)).shape == (7, 3)


def test_data_dependent_values_and_checks():
    class Narrow(torch.nn.Module):
        def forward(self, x, n):
            k = n.item()
            torch._check(k >= 0)
            torch._check(k <= x.shape[0])
            return x[:k] * 2

    args = (torch.randn(6), torch.tensor(3))
    ep = graphcap.export(Narrow(), args, strict=True)
    assert torch.equal(ep.module()(*args), Narrow()(*args))
    assert torch.equal(ep.module()(torch.arange(6.0), torch.tensor(5)), torch.arange(5.0) * 2)


def test_compiling_flags_and_logging_calls():
    class Flags(torch.nn.Module):
        def forward(self, x):
            print("inside forward")  # logging is not a graph break in strict mode
            if torch.compiler.is_compiling():
                return x * 2
            return x * 3

    ep = graphcap.export(Flags(), (torch.ones(2),), strict=True)
    assert torch.equal(ep.module()(torch.ones(2)), torch.full((2,), 2.0))


def test_buffer_mutation_same_as_non_strict():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x + self.n

    args = (torch.ones(2),)
    strict = graphcap.export(Counter(), args, strict=True)
    assert_equivalent(strict, graphcap.export(Counter(), args))
    m = strict.module()
    m(torch.ones(2))
    assert torch.equal(m(torch.ones(2)), torch.full((2,), 3.0))


def test_cond_in_strict_mode():
    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))

    ep = graphcap.export(Branch(), (torch.ones(3),), strict=True)
    for x in (torch.ones(3), -torch.ones(3)):
        assert torch.allclose(ep.module()(x), Branch()(x))


FAST_ZOO = ["custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only", "tv_squeezenet1_0"]


@pytest.mark.parametrize("name", FAST_ZOO)
def test_fast_zoo_strict_equals_non_strict(name):
    built = build_zoo(name)
    for spec in (None, built.dynamic_shapes):
        strict = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=spec, strict=True)
        non_strict = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=spec)
        assert_equivalent(strict, non_strict, same_stacks=False)
        expected, got = run_eager_and_exported(built.model, strict, built.args, built.kwargs)
        assert_same_outputs(expected, got)
        if spec is not None and built.args2 is not None:
            expected, got = run_eager_and_exported(built.model, strict, built.args2, built.kwargs2 or {})
            assert_same_outputs(expected, got)


def test_repeated_module_calls_get_their_own_call_keys():
    class Reuse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.act(self.lin(self.act(x)))

    args = (torch.randn(2, 3),)
    strict = graphcap.export(Reuse(), args, strict=True)
    assert_equivalent(strict, graphcap.export(Reuse(), args))
    keys = [list(n.meta["nn_module_stack"])[-1] for n in strict.graph.nodes if n.op == "call_function"]
    assert keys == ["L__self__act", "L__self__lin", "L__self__act@1"]


def test_strict_program_unflattens_to_the_module_tree():
    model = Net().eval()
    ep = graphcap.export(model, (torch.randn(3, 4),), strict=True)
    tree = graphcap.unflatten(ep)
    assert isinstance(tree.blocks[1].lin, torch.nn.Module)
    x = torch.randn(3, 4)
    torch.testing.assert_close(tree(x), model(x))


def test_dynamic_int_input_stays_symbolic_and_unmarked_ones_are_specialized():
    """dynamo reads Python ints as constants; one the spec makes dynamic is handed over marked and
    stays a SymInt input (tests/unit/test_strict_dynamic_ints.py), the others are baked in."""
    class Scale(torch.nn.Module):
        def forward(self, x, n: int):
            return x * n

    ep = graphcap.export(Scale(), (torch.randn(3), 4), dynamic_shapes={"x": None, "n": Dim.DYNAMIC}, strict=True)
    torch.testing.assert_close(ep.module()(torch.ones(3), 5), torch.full((3,), 5.0))
    ep = graphcap.export(Scale(), (torch.randn(3), 4), strict=True)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.ones(3), 5)
