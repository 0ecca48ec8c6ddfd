"""The training IR records updates of buffers and inputs as torch's does.

``export()`` keeps in-place writes (``buf.add_(1)``, ``x[:, 0].add_(1)``,
batch norm's running statistics) as operators of the graph and lists no
mutation outputs; a buffer forward reassigns becomes an in-graph ``copy_``
into its placeholder. ``run_decompositions`` finds the writes by
functionalization and lists them as ``BUFFER_MUTATION`` /
``USER_INPUT_MUTATION`` outputs before the user outputs. At every level, and
after save/load, ``module()`` updates buffers and inputs exactly as eager does.
A file written with the older form (mutation outputs in the training IR) is
upgraded as it loads.
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from conftest import save_load
from graphcap.ir_checks import violations
from graphcap.signature import OutputKind, OutputSpec, TensorArgument

aten = torch.ops.aten
MUTATION_KINDS = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION, OutputKind.PARAMETER_MUTATION)


class BufferAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        self.buf.add_(1)
        return x + self.buf


class InputAdd(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class Reassigned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        old = self.buf
        self.buf = self.buf + x
        return x + self.buf, old  # the old tensor keeps its value, as in eager


class BatchNormTrain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(x)


class ViewWrite(torch.nn.Module):
    def forward(self, x):
        x[:, 0].add_(1)
        return x * 2


# model, example inputs, in-place op expected in the training IR,
# expected mutation outputs after run_decompositions as (kind, target)
CASES = {
    "buffer_add_": (BufferAdd, lambda: (torch.randn(3),), aten.add_.Tensor,
                    [(OutputKind.BUFFER_MUTATION, "buf")]),
    "input_add_": (InputAdd, lambda: (torch.randn(3),), aten.add_.Tensor,
                   [(OutputKind.USER_INPUT_MUTATION, "x")]),
    "reassigned_buffer": (Reassigned, lambda: (torch.randn(3),), aten.copy_.default,
                          [(OutputKind.BUFFER_MUTATION, "buf")]),
    "batch_norm_train": (BatchNormTrain, lambda: (torch.randn(4, 3),), aten.batch_norm.default,
                         [(OutputKind.BUFFER_MUTATION, "bn.running_mean"),
                          (OutputKind.BUFFER_MUTATION, "bn.running_var"),
                          (OutputKind.BUFFER_MUTATION, "bn.num_batches_tracked")]),
    "view_write": (ViewWrite, lambda: (torch.randn(2, 3),), aten.add_.Tensor,
                   [(OutputKind.USER_INPUT_MUTATION, "x")]),
}


def _export(name):
    model_cls, make_args, _, _ = CASES[name]
    torch.manual_seed(0)
    model = model_cls().train()
    return model, make_args(), graphcap.export(copy.deepcopy(model), make_args())


def _targets(ep):
    graph = ep.graph
    return {n.target for n in graph.nodes if n.op == "call_function"}


def _check_against_eager(ep, model, args):
    """Three calls: results, the (mutated) inputs and every buffer match eager's each time."""
    eager, eager_args = copy.deepcopy(model), copy.deepcopy(args)
    module, module_args = ep.module(), copy.deepcopy(args)
    for _ in range(3):
        torch.testing.assert_close(module(*module_args), eager(*eager_args))
        torch.testing.assert_close(module_args, eager_args)
        torch.testing.assert_close(dict(module.named_buffers()), dict(eager.named_buffers()))
    # the module updated the program's own buffers, as eager updates the model's (as torch's module() does)
    for name, buffer in module.named_buffers():
        assert buffer is ep.state_dict.get(name, ep.constants.get(name))


@pytest.mark.parametrize("name", list(CASES))
def test_training_ir_keeps_writes_in_graph(name):
    _, _, inplace_op, _ = CASES[name]
    model, args, ep = _export(name)
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    assert kinds and all(k is OutputKind.USER_OUTPUT for k in kinds), ep.graph_signature
    assert inplace_op in _targets(ep)
    assert not violations(ep)


@pytest.mark.parametrize("name", list(CASES))
def test_run_decompositions_lists_the_writes(name):
    _, _, _, expected = CASES[name]
    _, _, ep = _export(name)
    inference = ep.run_decompositions({})
    specs = inference.graph_signature.output_specs
    mutations = [(s.kind, s.target) for s in specs if s.kind in MUTATION_KINDS]
    assert mutations == expected
    # mutations first, then the user outputs
    assert all(s.kind in MUTATION_KINDS for s in specs[:len(mutations)])
    assert all(s.kind is OutputKind.USER_OUTPUT for s in specs[len(mutations):])
    schemas = [getattr(n.target, "_schema", None) for n in inference.graph.nodes if n.op == "call_function"]
    assert not any(s is not None and s.is_mutable for s in schemas)


def test_reassigned_buffer_decomposes_to_its_new_value():
    _, _, ep = _export("reassigned_buffer")
    inference = ep.run_decompositions({})
    new_value = inference.graph_signature.output_specs[0].arg.name
    node = next(n for n in inference.graph.nodes if n.name == new_value)
    assert node.target is aten.add.Tensor  # no copy left: the new value is the sum itself


@pytest.mark.parametrize("level", ["training", "inference"])
@pytest.mark.parametrize("saved", [False, True], ids=["in_memory", "save_load"])
@pytest.mark.parametrize("name", list(CASES))
def test_module_updates_state_like_eager(name, level, saved):
    model, args, ep = _export(name)
    if level == "inference":
        ep = ep.run_decompositions({})
    if saved:
        ep = save_load(ep)
        assert not violations(ep)
    _check_against_eager(ep, model, args)


@pytest.mark.parametrize("name", list(CASES))
def test_save_load_keeps_the_form(name):
    _, _, ep = _export(name)
    loaded = save_load(ep)
    assert str(loaded.graph_signature) == str(ep.graph_signature)
    assert _targets(loaded) == _targets(ep)


def _to_old_form(ep):
    """What graphcap's training IR looked like before: one output per written buffer/input."""
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    old_outputs, old_specs = [], []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "BUFFER" and spec.target == "buf":
            old_outputs.append(placeholders[spec.arg.name])
            old_specs.append(OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(spec.arg.name), "buf"))
        if spec.kind.name == "USER_INPUT":
            old_outputs.append(placeholders[spec.arg.name])
            old_specs.append(OutputSpec(OutputKind.USER_INPUT_MUTATION, TensorArgument(spec.arg.name),
                                        spec.arg.name))
    output.args = (tuple(old_outputs) + tuple(output.args[0]),)
    ep.graph_signature.output_specs[:0] = old_specs
    ep.graph_module.recompile()
    return ep


class BufferAndInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        self.buf.add_(1)
        x.add_(1)
        return x + self.buf


def test_old_form_file_is_upgraded_on_load():
    model, args = BufferAndInput(), (torch.randn(3),)
    ep = _to_old_form(graphcap.export(copy.deepcopy(model), copy.deepcopy(args)))
    assert [r for r, _, _ in violations(ep)] == ["writes-in-graph", "writes-in-graph"]
    # each saved before any run: module() updates the program's own state
    loaded, inference = save_load(ep), save_load(ep).run_decompositions({})
    _check_against_eager(ep, model, args)  # module() runs the old form too
    assert [s.kind for s in loaded.graph_signature.output_specs] == [OutputKind.USER_OUTPUT]
    assert not violations(loaded)
    _check_against_eager(loaded, model, args)
    assert [(s.kind, s.target) for s in inference.graph_signature.output_specs] == [
        (OutputKind.BUFFER_MUTATION, "buf"), (OutputKind.USER_INPUT_MUTATION, "x"), (OutputKind.USER_OUTPUT, None)]
    _check_against_eager(inference, model, args)


class InputThenBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.ones(3))

    def forward(self, x):
        x.add_(1)
        self.buf.add_(2)
        return self.buf + x


def test_printed_signature_matches_torch():
    ep = graphcap.export(InputThenBuffer(), (torch.ones(3),))
    assert str(ep.graph_signature).split("# outputs")[1].strip() == "add: USER_OUTPUT"
    decomposed = str(ep.run_decompositions({}).graph_signature).split("# outputs")[1].strip()
    assert decomposed.splitlines() == ["add_1: BUFFER_MUTATION target='buf'",
                                       "add: USER_INPUT_MUTATION target='x'", "add_2: USER_OUTPUT"]
