"""Core non-strict export: lifting, naming, mutations, metadata, specialization, binding."""
from __future__ import annotations

import collections
import copy
import dataclasses

import pytest
import torch
import torch.nn as nn

import graphcap
from conftest import assert_same_outputs
from graphcap import InputKind, OutputKind
from graphcap.trace.mutations import written_placeholders


def _kinds(specs):
    return [(s.kind, s.arg.name, s.target) for s in specs]


class WithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.register_buffer("tmp", torch.ones(4), persistent=False)
        self.offset = torch.tensor([0.5, 0.25, 0.0, 1.0])  # plain tensor attribute → constant

    def forward(self, x):
        return self.lin(x) * self.scale + self.tmp + self.offset + torch.tensor(3.0)


def test_lifting_names_kinds_and_order():
    ep = graphcap.export(WithState(), (torch.randn(2, 4),))
    assert _kinds(ep.graph_signature.input_specs) == [
        (InputKind.PARAMETER, "p_lin_weight", "lin.weight"),
        (InputKind.PARAMETER, "p_lin_bias", "lin.bias"),
        (InputKind.BUFFER, "b_scale", "scale"),
        (InputKind.BUFFER, "b_tmp", "tmp"),
        (InputKind.CONSTANT_TENSOR, "c_offset", "offset"),
        (InputKind.CONSTANT_TENSOR, "c_lifted_tensor_0", "lifted_tensor_0"),
        (InputKind.USER_INPUT, "x", None),
    ]
    persistent = {s.target: s.persistent for s in ep.graph_signature.input_specs if s.kind is InputKind.BUFFER}
    assert persistent == {"scale": True, "tmp": False}
    sig = ep.graph_signature
    assert sig.parameters == ("lin.weight", "lin.bias")
    assert sig.buffers == ("scale", "tmp")
    assert sig.user_inputs == ("x",)
    assert sig.inputs_to_parameters == {"p_lin_weight": "lin.weight", "p_lin_bias": "lin.bias"}
    assert sig.inputs_to_buffers == {"b_scale": "scale", "b_tmp": "tmp"}
    assert set(ep.state_dict) == {"lin.weight", "lin.bias", "scale"}
    assert set(ep.constants) == {"tmp", "offset", "lifted_tensor_0"}
    assert [n for n, _ in ep.named_parameters()] == ["lin.weight", "lin.bias"]
    assert [n for n, _ in ep.named_buffers()] == ["scale", "tmp"]
    assert len(list(ep.parameters())) == 2 and len(list(ep.buffers())) == 2
    assert not [n for n in ep.graph.nodes if n.op == "get_attr"]


def test_module_state_dict_keys_are_fqns_and_results_match():
    model = WithState()
    x = torch.randn(2, 4)
    ep = graphcap.export(model, (x,))
    m = ep.module()
    assert set(m.state_dict()) == {"lin.weight", "lin.bias", "scale"}
    assert_same_outputs(model(x), m(x))
    # load_state_dict on the runnable module changes what it computes
    new = {k: torch.zeros_like(v) for k, v in m.state_dict().items()}
    m.load_state_dict(new)
    torch.testing.assert_close(m(x), torch.ones(2, 4) + model.offset + 3.0)


def test_example_inputs_and_call_graph():
    x = torch.randn(2, 4)
    ep = graphcap.export(WithState(), (x,))
    args, kwargs = ep.example_inputs
    assert args[0] is x and kwargs == {}
    root = ep.module_call_graph[0]
    assert root.fqn == ""
    assert root.signature.in_spec == torch.utils._pytree.tree_structure(((x,), {}))
    assert root.signature.forward_arg_names == ["x"]


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("hist", torch.zeros(4))

    def forward(self, x):
        self.steps.add_(1)
        self.hist[1:3].add_(x.sum())  # a write through a view of the buffer
        return x + self.steps


def test_buffer_mutation_recorded_and_written_back():
    model = Counter()
    ep = graphcap.export(model, (torch.randn(3),))
    # training IR (as torch's): the writes are in-place operators of the graph, no mutation outputs
    kinds = [(s.kind, s.target) for s in ep.graph_signature.output_specs]
    assert kinds == [(OutputKind.USER_OUTPUT, None)]
    assert [n.name for n in written_placeholders(ep.graph)] == ["b_steps", "b_hist"]
    # the inference IR lists them as outputs, before the user output
    kinds = [(s.kind, s.target) for s in ep.run_decompositions().graph_signature.output_specs]
    assert kinds == [(OutputKind.BUFFER_MUTATION, "steps"), (OutputKind.BUFFER_MUTATION, "hist"),
                     (OutputKind.USER_OUTPUT, None)]
    eager, runnable = Counter(), copy.deepcopy(ep.module())
    for _ in range(3):
        x = torch.randn(3)
        assert_same_outputs(eager(x), runnable(x))
    torch.testing.assert_close(runnable.get_buffer("steps"), eager.steps)
    torch.testing.assert_close(runnable.get_buffer("hist"), eager.hist)


def test_running_module_updates_the_program_state_a_copy_keeps_its_own():
    """module() holds the program's state, as torch's does; copy.deepcopy gives one of its own."""
    ep = graphcap.export(Counter(), (torch.randn(3),))
    first, second = ep.module(), ep.module()
    own = copy.deepcopy(ep.module())
    first(torch.randn(3))
    first(torch.randn(3))
    assert ep.state_dict["steps"].item() == 2 and second.get_buffer("steps").item() == 2
    assert own.get_buffer("steps").item() == 0


def test_batchnorm_train_mode_updates_running_stats():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(copy.deepcopy(model), (x,))
    assert not ep.graph_signature.buffers_to_mutate  # training IR: batch_norm writes them in the graph
    targets = set(ep.run_decompositions().graph_signature.buffers_to_mutate.values())
    assert targets == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    runnable = copy.deepcopy(ep.module())
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        assert_same_outputs(model(x), runnable(x))
    for name, buf in model.named_buffers():
        torch.testing.assert_close(runnable.get_buffer(name), buf)


def test_user_input_mutation_updates_callers_tensor():
    def f(x, y):
        x.mul_(2)
        return x + y

    x, y = torch.randn(3), torch.randn(3)
    ep = graphcap.export(f, (x.clone(), y))
    assert not ep.graph_signature.user_inputs_to_mutate  # training IR: mul_ stays in the graph
    assert list(ep.run_decompositions().graph_signature.user_inputs_to_mutate.values()) == ["x"]
    a, b = x.clone(), x.clone()
    assert_same_outputs(f(a, y), ep.module()(b, y))
    torch.testing.assert_close(a, b)


def test_node_metadata_present():
    ep = graphcap.export(WithState(), (torch.randn(2, 4),))
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert ops
    for n in ops:
        assert "val" in n.meta
        assert n.meta["nn_module_stack"] is not None
        assert n.meta["source_fn_stack"]
    linear = next(n for n in ops if n.target is torch.ops.aten.linear.default)
    assert "test_export_core.py" in linear.meta["stack_trace"] and "linear.py" in linear.meta["stack_trace"]
    assert ("lin", "torch.nn.modules.linear.Linear") in linear.meta["nn_module_stack"].values()
    # as torch's strict capture records it, for source-partition tools: the torch.nn module, keyed by its call
    lin_key = next(k for k, (fqn, _) in linear.meta["nn_module_stack"].items() if fqn == "lin")
    assert linear.meta["source_fn_stack"] == [(lin_key, torch.nn.Linear)]
    mul = next(n for n in ops if n.target is torch.ops.aten.mul.Tensor)
    assert "test_export_core.py" in mul.meta["stack_trace"]
    for n in ep.graph.nodes:
        if n.op == "placeholder":
            assert "stack_trace" not in n.meta and "val" in n.meta


def test_training_ir_keeps_composites():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2)).eval()
    x = torch.randn(1, 3, 6, 6)
    model(x)  # materialize the lazy layer
    ep = graphcap.export(model, (x,))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert {torch.ops.aten.conv2d.default, torch.ops.aten.batch_norm.default,
            torch.ops.aten.linear.default} <= targets


def test_python_scalars_are_specialized_and_checked():
    def f(x, n: int, mode: str, scale: float = 1.0):
        return x * n * scale if mode == "mul" else x + n

    ep = graphcap.export(f, (torch.ones(2), 3, "mul"), {"scale": 0.5})
    torch.testing.assert_close(ep.module()(torch.ones(2), 3, "mul", scale=0.5), torch.full((2,), 1.5))
    with pytest.raises(graphcap.RuntimeInputError, match=r"Expected input at \*args\[1\] to be equal to 3, but got 4"):
        ep.module()(torch.ones(2), 4, "mul", scale=0.5)
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*\*kwargs\['scale'\]"):
        ep.module()(torch.ones(2), 3, "mul", scale=2.0)


def test_runtime_checks_dtype_rank_shape_structure():
    ep = graphcap.export(lambda x, y: x @ y, (torch.randn(2, 3), torch.randn(3, 4)))
    m = ep.module()
    with pytest.raises(graphcap.RuntimeInputError,
                       match=r"\*args\[0\] to have dtype torch.float32, but got torch.float64"):
        m(torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 4))
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*args\[1\] to have 2 dimensions, but got 3"):
        m(torch.randn(2, 3), torch.randn(3, 4, 1))
    with pytest.raises(graphcap.RuntimeInputError,
                       match=r"Expected input at \*args\[0\]\.shape\[0\] to be equal to 2, but got 5"):
        m(torch.randn(5, 3), torch.randn(3, 4))
    with pytest.raises(graphcap.RuntimeInputError, match="structure"):
        m(torch.randn(2, 3))
    with pytest.raises(graphcap.RuntimeInputError, match="to be a tensor"):
        m(torch.randn(2, 3), 1.0)
    # a RuntimeError too, as code written against torch.export expects
    with pytest.raises(RuntimeError):
        m(torch.randn(5, 3), torch.randn(3, 4))


def test_checks_happen_before_compute():
    class Spy(nn.Module):
        def forward(self, x, y):
            return x + y

    ep = graphcap.export(Spy(), (torch.randn(2), torch.randn(2)))
    m = ep.module()
    # The leaf checks are the graph's first call, before any operator.
    calls = [n.op for n in m.graph.nodes if n.op in ("call_module", "call_function")]
    assert calls[0] == "call_module" and calls[1:] == ["call_function"] * (len(calls) - 1)
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountOps(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ran = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ran.append(func)
            return func(*args, **(kwargs or {}))

    x, bad, good = torch.randn(2), torch.randn(3), torch.randn(2)
    with CountOps() as counter, pytest.raises(graphcap.RuntimeInputError):
        m(x, bad)
    assert counter.ran == [], f"operators ran before the input was refused: {counter.ran}"
    with CountOps() as counter:
        m(x, good)
    assert torch.ops.aten.add.Tensor in counter.ran  # the spy sees operators when they do run


Pair = collections.namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Batch:
    image: torch.Tensor
    label: torch.Tensor


graphcap.register_dataclass(Batch)


def test_namedtuple_dataclass_nested_io():
    def f(p: Pair, batch: Batch, extra: dict):
        return Batch(image=p.a * batch.image, label=batch.label + 1), [extra["k"][0] - p.b]

    args = (Pair(torch.randn(2), torch.randn(2)), Batch(torch.randn(2), torch.tensor([1, 2])),
            {"k": [torch.randn(2)]})
    ep = graphcap.export(f, args)
    names = ep.graph_signature.user_inputs
    assert names == ("p_a", "p_b", "batch_image", "batch_label", "extra_k_0")
    expected, got = f(*args), ep.module()(*args)
    assert isinstance(got[0], Batch)
    assert_same_outputs(expected, got)


def test_binding_defaults_kwonly_varargs():
    class M(nn.Module):
        def forward(self, x, y=None, *rest, scale=2.0, **extra):
            out = x * scale
            if y is not None:
                out = out + y
            for r in rest:
                out = out - r
            return out + extra["bias"]

    m = M()
    args = (torch.randn(3), torch.randn(3), torch.randn(3))
    kwargs = {"bias": torch.randn(3), "scale": 3.0}
    ep = graphcap.export(m, args, kwargs)
    # kwargs keep the order they were given in (as in torch.export); *rest values are named rest_<i>
    assert ep.graph_signature.user_inputs == ("x", "y", "rest_0", "bias", 3.0)
    assert_same_outputs(m(*args, **kwargs), ep.module()(*args, **kwargs))
    assert_same_outputs(m(*args, **kwargs), ep.module()(*args, bias=kwargs["bias"], scale=3.0))


def test_bound_method_and_function():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x)

        def double(self, x):
            return self.lin(x) * 2

    m = M()
    x = torch.randn(1, 2)
    ep = graphcap.export(m.double, (x,))
    assert ep.graph_signature.parameters == ("lin.weight", "lin.bias")
    assert_same_outputs(m.double(x), ep.module()(x))
    ep = graphcap.export(torch.nn.functional.relu, (x,))
    assert_same_outputs(torch.relu(x), ep.module()(x))


def test_no_grad_and_train_eval_modes():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    x = torch.randn(8, 4)
    with torch.no_grad():
        ep = graphcap.export(model.eval(), (x,))
    assert_same_outputs(model(x), ep.module()(x))
    assert torch.is_grad_enabled()
    ep_train = graphcap.export(copy.deepcopy(model).train(), (x,))
    targets = {n.target for n in ep_train.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.dropout.default in targets


def test_model_left_untouched_by_export():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.cache = {}

        def forward(self, x):
            if "w2" not in self.cache:
                self.cache["w2"] = self.w * 2
            self.last = x.sum()
            return x * self.cache["w2"]

    m = Cache()
    x = torch.randn(3)
    graphcap.export(m, (x,))
    assert m.cache == {} and not hasattr(m, "last")
    assert isinstance(m.w, nn.Parameter) and not isinstance(m.w, torch._subclasses.FakeTensor)
    m(x)  # eager still works


def test_tied_weights_share_one_tensor():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids):
            return self.out(self.emb(ids))

    m = Tied()
    ids = torch.tensor([[1, 2, 3]])
    ep = graphcap.export(m, (ids,))
    assert_same_outputs(m(ids), ep.module()(ids))


def test_preserve_module_call_signature():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    x = torch.randn(4, 2)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("0", "2"))
    entries = {e.fqn: e for e in ep.module_call_graph}
    # torch.export's layout: the root, every submodule (signature only where preserved)
    assert [e.fqn for e in ep.module_call_graph] == ["", "0", "1", "2"]
    assert entries["1"].signature is None
    sig0 = entries["0"].signature
    assert [a.name for a in sig0.inputs] == ["input"] and [a.name for a in sig0.outputs] == ["linear"]
    sig2 = entries["2"].signature
    assert [a.name for a in sig2.inputs] == ["relu"] and [a.name for a in sig2.outputs] == ["linear_1"]
    with pytest.raises(graphcap.ExportInputError, match="not submodules"):
        graphcap.export(model, (x,), preserve_module_call_signature=("nope",))


def test_device_kept_in_ir():
    def f(x):
        return x + torch.ones(2, device=x.device)

    ep = graphcap.export(f, (torch.randn(2),))
    vals = [n.meta["val"] for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    assert vals and all(v.device.type == "cpu" for v in vals)
    ones = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.ones.default)
    assert ones.kwargs["device"] == torch.device("cpu")


def test_outputs_of_python_values_and_inputs():
    def f(x, y):
        return x.shape[0], "tag", y, x * 2

    ep = graphcap.export(f, (torch.randn(2), torch.randn(3)))
    assert ep.module()(torch.randn(2), torch.randn(3))[:2] == (2, "tag")
    y = torch.randn(3)
    assert torch.equal(ep.module()(torch.randn(2), y)[2], y)


def test_symbolic_size_output_keeps_its_spec():
    def f(h):
        return h * 2, h.shape[0]

    ep = graphcap.export(f, (torch.randn(4, 3),), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=10)},))
    out, n = ep.module()(torch.randn(6, 3))
    assert n == 6 and out.shape == (6, 3)
