"""run_decompositions splits tensor-subclass parameters and buffers into their inner tensors.

The subclasses here are graphcap's own test types (a pair that runs every
operator on both halves, and a scaled tensor whose scale is flatten metadata),
so the tests do not lean on torch's testing helpers.
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.utils._pytree as pytree
from torch.nn.utils import parametrize

import graphcap
from graphcap import ir_checks
from graphcap.errors import SubclassDecompositionError, UnsupportedError


class PairTensor(torch.Tensor):
    """Holds two tensors of one shape and applies every operator to both."""

    @staticmethod
    def __new__(cls, first, second, outer_size=None, outer_stride=None):
        size = first.size() if outer_size is None else outer_size
        stride = first.stride() if outer_stride is None else outer_stride
        return torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=first.dtype,
                                                   device=first.device, requires_grad=first.requires_grad)

    def __init__(self, first, second, outer_size=None, outer_stride=None):
        self.first = first
        self.second = second

    def __tensor_flatten__(self):
        return ["first", "second"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return PairTensor(inner["first"], inner["second"], outer_size, outer_stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kwargs = kwargs or {}
        halves = []
        for pick in (lambda t: t.first, lambda t: t.second):
            halves.append(func(*pytree.tree_map_only(PairTensor, pick, args),
                               **pytree.tree_map_only(PairTensor, pick, kwargs)))
        if func._schema.is_mutable:  # in place: both halves were written, the pair is the result
            return args[0]
        if isinstance(halves[0], torch.Tensor):
            return PairTensor(halves[0], halves[1])
        return halves[0]


class ScaledTensor(torch.Tensor):
    """A tensor times a Python scale; the scale travels as ``__tensor_flatten__`` metadata."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=data.dtype,
                                                   device=data.device)

    def __init__(self, data, scale):
        self.data_ = data
        self.scale = scale

    def __tensor_flatten__(self):
        return ["data_"], self.scale

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return ScaledTensor(inner["data_"], meta)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        if func in (torch.ops.aten.detach.default, torch.ops.aten.clone.default):
            return ScaledTensor(func(args[0].data_), args[0].scale)

        def plain(t):
            return t.data_ * t.scale
        return func(*pytree.tree_map_only(ScaledTensor, plain, args),
                    **pytree.tree_map_only(ScaledTensor, plain, kwargs or {}))


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(PairTensor(torch.randn(4), torch.randn(4)))

    def forward(self, x):
        product = x * self.w
        return product.first - 2 * product.second


class Model(torch.nn.Module):
    """A subclass parameter on a submodule, a nested subclass buffer, a plain parameter."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.plain = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("nested", PairTensor(PairTensor(torch.randn(4), torch.randn(4)),
                                                  PairTensor(torch.randn(4), torch.randn(4))))

    def forward(self, x):
        y = self.inner(x) + self.nested + self.plain  # a pair of pairs
        z = (y * 2).sum(dim=-1)
        return z.first.second - z.second.first


def _subclass_free(ep) -> bool:
    values = [n.meta.get("val") for n in ep.graph.nodes]
    return all(type(v) is not PairTensor and type(v) is not ScaledTensor for v in values)


def _dynamic_program(model):
    batch = graphcap.Dim("batch", min=1, max=64)
    ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: batch}})
    return ep.run_decompositions()


def test_inner_tensors_become_inputs_named_as_torch_names_them():
    ep = _dynamic_program(Model())
    placeholders = [n.name for n in ep.graph.nodes if n.op == "placeholder"]
    assert placeholders == [
        "p_plain", "p_inner_parametrizations_w_original0", "p_inner_parametrizations_w_original1",
        "b_parametrizations_nested_original0", "b_parametrizations_nested_original1",
        "b_parametrizations_nested_original2", "b_parametrizations_nested_original3", "x"]
    assert set(ep.state_dict) == {
        "plain", "inner.parametrizations.w.original0", "inner.parametrizations.w.original1",
        "parametrizations.nested.original0", "parametrizations.nested.original1",
        "parametrizations.nested.original2", "parametrizations.nested.original3"}
    assert all(type(v) in (torch.Tensor, torch.nn.Parameter) for v in ep.state_dict.values())
    assert isinstance(ep.state_dict["inner.parametrizations.w.original1"], torch.nn.Parameter)
    assert not isinstance(ep.state_dict["parametrizations.nested.original3"], torch.nn.Parameter)
    assert _subclass_free(ep)
    assert ir_checks.violations(ep) == []


def test_state_dict_keys_are_those_of_torch_parametrize():
    """The keys match what torch.nn.utils.parametrize gives a module whose parameter is kept as its inner tensors."""

    class FromHalves(torch.nn.Module):
        def forward(self, first, second):
            return PairTensor(first, second)

        def right_inverse(self, pair):
            return [pair.first, pair.second]

    m = Inner()
    ep = graphcap.export(m, (torch.randn(2, 4),)).run_decompositions()
    parametrize.register_parametrization(m, "w", FromHalves(), unsafe=True)
    assert set(ep.state_dict) == {"parametrizations.w.original0", "parametrizations.w.original1"}
    assert set(ep.state_dict) == set(m.state_dict())
    for key, value in m.state_dict().items():
        torch.testing.assert_close(ep.state_dict[key], value)


@pytest.mark.parametrize("batch", [1, 5, 17])
def test_program_computes_what_eager_computes(batch):
    model = Model()
    ep = _dynamic_program(model)
    x = torch.randn(batch, 4)
    torch.testing.assert_close(ep.module()(x), model(x))


def test_save_load_round_trip():
    model = Model()
    ep = _dynamic_program(model)
    buffer = io.BytesIO()
    graphcap.save(ep, buffer)
    buffer.seek(0)
    loaded = graphcap.load(buffer)
    assert set(loaded.state_dict) == set(ep.state_dict)
    assert [s.target for s in loaded.graph_signature.input_specs] == \
        [s.target for s in ep.graph_signature.input_specs]
    assert ir_checks.violations(loaded) == []
    for batch in (2, 9):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(loaded.module()(x), model(x))


def test_flatten_metadata_reaches_the_rebuilt_subclass():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", ScaledTensor(torch.randn(3, 3), 0.5))

        def forward(self, x):
            return x @ self.w

    m = Scaled()
    ep = graphcap.export(m, (torch.randn(2, 3),)).run_decompositions()
    assert list(ep.state_dict) == ["parametrizations.w.original0"]
    assert not ep.state_dict["parametrizations.w.original0"].requires_grad
    assert _subclass_free(ep) and ir_checks.violations(ep) == []
    x = torch.randn(2, 3)
    torch.testing.assert_close(ep.module()(x), m(x))


def test_subclass_buffer_written_in_place_updates_its_inner_tensors():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", PairTensor(torch.zeros(2), torch.ones(2)))

        def forward(self, x):
            self.count.add_(x)
            return (self.count * 1).first + 0

    ep = graphcap.export(Counter(), (torch.ones(2),)).run_decompositions()
    mutated = sorted(ep.graph_signature.buffers_to_mutate.values())
    assert mutated == ["parametrizations.count.original0", "parametrizations.count.original1"]
    assert ir_checks.violations(ep) == []
    eager, module = Counter(), ep.module()
    for step in range(3):
        x = torch.full((2,), float(step + 1))
        torch.testing.assert_close(module(x), eager(x))
    torch.testing.assert_close(module.parametrizations.count.original1, torch.full((2,), 7.0))


def test_subclass_user_input_is_refused_before_tracing():
    class Double(torch.nn.Module):
        def forward(self, x):
            return (x * 2).first

    ep = graphcap.export(Double(), (PairTensor(torch.randn(3), torch.randn(3)),))
    with pytest.raises(SubclassDecompositionError, match="x is a tensor subclass") as info:
        ep.run_decompositions()
    assert isinstance(info.value, ValueError) and isinstance(info.value, UnsupportedError)


def test_subclass_output_is_refused_before_tracing():
    class Out(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(PairTensor(torch.randn(3), torch.randn(3)))

        def forward(self, x):
            return x + self.w

    ep = graphcap.export(Out(), (torch.randn(3),))
    with pytest.raises(ValueError, match="returns .*a tensor subclass"):
        ep.run_decompositions()


def test_preserved_submodule_call_taking_a_subclass_is_refused_naming_the_parameter():
    class Total(torch.nn.Module):
        def forward(self, x):
            return x.sum()

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.total = Total()
            self.w = torch.nn.Parameter(PairTensor(torch.ones(2, 2), torch.ones(2, 2)))

        def forward(self, x):
            return self.total(self.w.to(torch.float)).first + x.sum()

    ep = graphcap.export(Outer(), (torch.randn(2, 2),), preserve_module_call_signature=("total",))
    with pytest.raises(ValueError, match="It looks like p_w is a tensor subclass"):
        ep.run_decompositions()
    # without the preserved signature the same program decomposes
    m = Outer()
    ep = graphcap.export(m, (torch.randn(2, 2),)).run_decompositions()
    x = torch.randn(2, 2)
    torch.testing.assert_close(ep.module()(x), m(x))


def test_non_persistent_subclass_buffer_stays_out_of_the_state_dict():
    class Scratch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scratch", PairTensor(torch.randn(3), torch.randn(3)), persistent=False)

        def forward(self, x):
            y = x + self.scratch
            return y.first * y.second

    m = Scratch()
    ep = graphcap.export(m, (torch.randn(3),)).run_decompositions()
    assert ep.state_dict == {}
    assert sorted(ep.constants) == ["parametrizations.scratch.original0", "parametrizations.scratch.original1"]
    assert all(s.persistent is False for s in ep.graph_signature.input_specs if s.kind.name == "BUFFER")
    module = ep.module()
    assert set(module.state_dict()) == set()
    x = torch.randn(3)
    torch.testing.assert_close(module(x), m(x))
