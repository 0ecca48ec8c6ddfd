"""run_decompositions: the inference IR — functional core ATen, mutations as outputs."""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from graphcap import OutputKind, default_decompositions
from graphcap.errors import TraceError
from graphcap.ir_checks import is_inference_ir, verify

aten = torch.ops.aten


def _ops(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def _assert_functional_core(ep):
    for op in _ops(ep):
        schema = getattr(op, "_schema", None)
        assert schema is None or not schema.is_mutable, f"{op} mutates"
    verify(ep)


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_train_mode_batchnorm_running_stats_become_buffer_mutations():
    model = ConvBN().train()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(model, (x,)).run_decompositions()
    assert is_inference_ir(ep)
    _assert_functional_core(ep)
    assert aten._native_batch_norm_legit_functional.default in _ops(ep)

    specs = ep.graph_signature.output_specs
    mutations = [s for s in specs if s.kind is OutputKind.BUFFER_MUTATION]
    assert [s.target for s in mutations] == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert specs[:3] == mutations  # listed before the user output
    placeholders = {n.name for n in ep.graph.nodes if n.op == "placeholder"}
    assert not any(s.arg.name in placeholders for s in mutations)  # new values, not the inputs

    eager = copy.deepcopy(model)
    runnable = ep.module()
    for _ in range(2):  # buffers keep updating call after call, exactly as eager
        expected = eager(x)
        got = runnable(x)
        torch.testing.assert_close(got, expected)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(runnable.bn, name), getattr(eager.bn, name)), name


def test_eval_mode_batchnorm_is_inference_only():
    model = ConvBN().eval()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(model, (x,)).run_decompositions()
    assert aten._native_batch_norm_legit_no_training.default in _ops(ep)
    assert not ep.graph_signature.buffers_to_mutate
    torch.testing.assert_close(ep.module()(x), model(x))


class InputMutation(torch.nn.Module):
    def forward(self, x, y):
        x.add_(y)
        return x * 2


def test_user_input_mutation_updates_callers_tensor():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    ep = graphcap.export(InputMutation(), (x.clone(), y)).run_decompositions()
    _assert_functional_core(ep)
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    assert kinds == [OutputKind.USER_INPUT_MUTATION, OutputKind.USER_OUTPUT]
    assert ep.graph_signature.user_inputs_to_mutate
    assert list(ep.graph_signature.user_inputs_to_mutate.values()) == ["x"]

    mine, theirs = x.clone(), x.clone()
    expected = InputMutation()(theirs, y)
    got = ep.module()(mine, y)
    torch.testing.assert_close(got, expected)
    assert torch.equal(mine, theirs)


class SliceMutation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 6))

    def forward(self, x):
        x[:, 1:3].mul_(2)            # a slice of an input
        x.view(-1)[::5].zero_()      # a strided view of a view
        self.state[1].add_(x.sum(0))  # a row of a buffer
        return x + 1


def test_in_place_ops_on_views_are_functionalized():
    x = torch.randn(4, 6)
    model = SliceMutation()
    ep = graphcap.export(copy.deepcopy(model), (x.clone(),)).run_decompositions()
    _assert_functional_core(ep)
    assert not any(str(op).endswith("_.Tensor") or str(op).endswith("_.default") for op in _ops(ep))
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    assert kinds == [OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION, OutputKind.USER_OUTPUT]

    mine, theirs = x.clone(), x.clone()
    eager = copy.deepcopy(model)
    runnable = ep.module()
    torch.testing.assert_close(runnable(mine), eager(theirs))
    assert torch.equal(mine, theirs)
    assert torch.equal(runnable.state, eager.state)


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.lin = torch.nn.Linear(6, 5)

    def forward(self, x):
        return self.lin(self.conv(x))


def test_custom_table_keeping_conv2d():
    x = torch.randn(2, 3, 6, 8)
    model = Conv().eval()
    table = default_decompositions()
    del table[aten.conv2d.default]
    ep = graphcap.export(model, (x,)).run_decompositions(table)
    ops = _ops(ep)
    assert aten.conv2d.default in ops and aten.convolution.default not in ops
    assert aten.linear.default not in ops  # everything else still decomposes
    verify(ep)  # conv2d is not core, but the table keeps it
    torch.testing.assert_close(ep.module()(x), model(x))


def test_custom_table_replacing_conv2d_with_users_function():
    x = torch.randn(2, 3, 6, 8)
    model = Conv().eval()
    calls = []

    def conv_times_two(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        calls.append(1)
        out = aten.convolution.default(input, weight, bias, stride, padding, dilation, False, [0, 0], groups)
        return aten.mul.Tensor(out, 2.0)

    table = default_decompositions()
    table[aten.conv2d.default] = conv_times_two
    ep = graphcap.export(model, (x,)).run_decompositions(table)
    assert calls
    ops = _ops(ep)
    assert aten.conv2d.default not in ops and aten.mul.Tensor in ops
    verify(ep)
    expected = model.lin(model.conv(x) * 2)
    torch.testing.assert_close(ep.module()(x), expected)


def test_plain_dict_table_keeps_composites_but_functionalizes():
    model = ConvBN().train()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(model, (x,)).run_decompositions({})
    ops = _ops(ep)
    assert aten.conv2d.default in ops
    _assert_functional_core(ep)
    assert len(ep.graph_signature.buffers_to_mutate) == 3


def test_metadata_follows_the_source_node():
    model = Conv().eval()
    ep = graphcap.export(model, (torch.randn(2, 3, 6, 8),)).run_decompositions()
    conv = next(n for n in ep.graph.nodes if n.target is aten.convolution.default)
    assert "conv" in [fqn for fqn, _ in conv.meta["nn_module_stack"].values()]
    assert "conv.py" in conv.meta["stack_trace"]
    assert conv.meta["source_fn_stack"]
    addmm = next(n for n in ep.graph.nodes if n.target is aten.addmm.default)
    assert "lin" in [fqn for fqn, _ in addmm.meta["nn_module_stack"].values()]


class ReturnsInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return x, self.w.t(), x + 1


def test_outputs_never_alias_inputs():
    x = torch.randn(4, 3)
    ep = graphcap.export(ReturnsInputs(), (x,)).run_decompositions()
    verify(ep)
    a, wt, _ = ep.module()(x)
    assert torch.equal(a, x) and a.data_ptr() != x.data_ptr()
    a.add_(1)  # changing an output leaves the input and the parameter alone
    assert not torch.equal(a, x)
    wt.zero_()
    assert ep.state_dict["w"].abs().sum() > 0


def test_dynamic_shapes_and_ranges_survive():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).view(x.shape[0], 2, 2) * x.shape[0]

    x = torch.randn(3, 4)
    ep = graphcap.export(M(), (x,), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=32)},))
    dep = ep.run_decompositions()
    assert dep.range_constraints == ep.range_constraints and dep.range_constraints
    x_val = next(n for n in dep.graph.nodes if n.op == "placeholder" and n.name == "x").meta["val"]
    assert isinstance(x_val.shape[0], torch.SymInt)
    verify(dep)
    y = torch.randn(7, 4)
    torch.testing.assert_close(dep.module()(y), ep.module()(y))
    assert dep.module()(y).shape == (7, 2, 2)


def test_decomposing_twice_is_stable():
    model = ConvBN().train()
    x = torch.randn(2, 3, 8, 8)
    once = graphcap.export(model, (x,)).run_decompositions()
    twice = once.run_decompositions()
    assert [str(t) for t in _ops(once)] == [str(t) for t in _ops(twice)]
    assert [s.kind for s in once.graph_signature.output_specs] == [s.kind for s in twice.graph_signature.output_specs]


def test_failing_custom_decomposition_names_the_node():
    def broken(*args, **kwargs):
        raise ValueError("no thanks")

    table = default_decompositions()
    table[aten.linear.default] = broken
    ep = graphcap.export(Conv().eval(), (torch.randn(2, 3, 6, 8),))
    with pytest.raises(TraceError, match="no thanks") as info:
        ep.run_decompositions(table)
    assert "linear" in str(info.value)


class WithCond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x).relu(), lambda x: self.lin(x) * 2, (x,))


def test_control_flow_branches_are_decomposed_too():
    x = torch.randn(3, 4)
    ep = graphcap.export(WithCond(), (x,))
    dep = ep.run_decompositions()
    verify(dep)
    branch_ops = {n.target for m in dep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)
                  and m is not dep.graph_module for n in m.graph.nodes if n.op == "call_function"}
    assert aten.addmm.default in branch_ops and aten.linear.default not in branch_ops
    for sample in (x, -x.abs() - 1, x.abs() + 1):
        torch.testing.assert_close(dep.module()(sample), ep.module()(sample))


def test_metadata_mutation_of_an_input_is_refused_clearly():
    class Transposes(torch.nn.Module):
        def forward(self, x):
            x.t_()
            return x + 1

    ep = graphcap.export(Transposes(), (torch.randn(3, 4),))
    with pytest.raises(graphcap.UnsupportedError, match="shape or strides of its input 'x'"):
        ep.run_decompositions()


def test_the_decomposed_program_prints_as_a_graphmodule_like_the_exported_one():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x.relu(), lambda x: x.abs(), (x,))

    ep = graphcap.export(M(), (torch.randn(3),))
    for program in (ep, ep.run_decompositions({}), ep.run_decompositions()):
        assert program.graph_module.print_readable(print_output=False).startswith("class GraphModule(")
    a, b = ep.run_decompositions({}).graph_module, ep.run_decompositions({}).graph_module
    assert type(a) is not type(b), "each program's module has a class of its own (the name is set on it)"


def test_inputs_keep_whether_they_require_grad():
    """The inference IR's placeholders say requires_grad as the training IR's do (parameters, an
    input given with requires_grad=True), buffers and plain inputs do not."""
    class WithGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 3))
            self.register_buffer("b", torch.ones(3))

        def forward(self, x, y, n):
            return (self.w @ x + y) * self.b + n

    args = (torch.randn(3, 3), torch.randn(3, 3, requires_grad=True), torch.arange(3))
    for strict in (False, True):
        ep = graphcap.export(WithGrad(), args, strict=strict)
        flags = [n.meta["val"].requires_grad for n in ep.graph.nodes if n.op == "placeholder"]
        assert flags == [True, False, False, True, False]
        decomposed = ep.run_decompositions({})
        assert [n.meta["val"].requires_grad for n in decomposed.graph.nodes if n.op == "placeholder"] == flags
        torch.testing.assert_close(decomposed.module()(*args), ep.module()(*args))


def test_state_inputs_keep_the_source_of_their_first_reader():
    """strict=True marks each parameter/buffer placeholder with the source_fn_stack of the operator
    that first reads it; the inference IR keeps the mark."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    ep = graphcap.export(model, (torch.randn(1, 3, 8, 8),), strict=True)
    marked = {n.name: n.meta["source_fn_stack"] for n in ep.graph.nodes
              if n.op == "placeholder" and "source_fn_stack" in n.meta}
    assert set(marked) == {"p_0_weight", "p_0_bias"}
    decomposed = ep.run_decompositions({})
    assert {n.name: n.meta["source_fn_stack"] for n in decomposed.graph.nodes
            if n.op == "placeholder" and "source_fn_stack" in n.meta} == marked
