"""Consumers matrix audit (docs/torch-suite.md): what deployment tools read of graphcap's program.

ExecuTorch's write-back pass asks ``spec.kind is torch.export.graph_signature.InputKind.USER_INPUT``;
with kinds that only compared equal to torch's, a program writing one of its inputs lost that
write in the ``.pte``. The kinds are now torch's members under graphcap's names.
"""
from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.export.graph_signature as tsig

import graphcap
from conftest import NEEDS_EXECUTORCH


class WritesInputsAndState(torch.nn.Module):
    """A buffer, a positional input and a keyword input written in place; a lifted constant."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(3))
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.lin = torch.nn.Linear(3, 3)
        self.table = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x, *, acc):
        self.steps.add_(1.0)
        x[:, 0].mul_(2.0)
        acc.add_(x.sum(0))
        return self.lin(x) * self.table + self.scratch, acc.clone()


def _model():
    torch.manual_seed(0)
    return WritesInputsAndState()


def _inputs():
    torch.manual_seed(1)
    return (torch.randn(2, 3),), {"acc": torch.zeros(3)}


def _program(**options):
    args, kwargs = _inputs()
    return graphcap.export(_model(), args, kwargs, **options)


def _every_spec_kind(ep):
    sig = ep.graph_signature
    return [s.kind for s in sig.input_specs] + [s.kind for s in sig.output_specs]


def _copies(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return {"exported": ep, "decomposed": ep.run_decompositions(), "loaded": graphcap.load(buf),
            "deepcopy": copy.deepcopy(ep)}


@pytest.mark.parametrize("stage", ["exported", "decomposed", "loaded", "deepcopy"])
def test_every_kind_is_torchs_own_member(stage):
    ep = _copies(_program())[stage]
    kinds = _every_spec_kind(ep)
    assert {k.name for k in kinds} >= {"USER_INPUT", "PARAMETER", "BUFFER", "CONSTANT_TENSOR", "USER_OUTPUT"}
    for kind in kinds:
        torchs = getattr(tsig, type(kind).__name__)
        assert kind is torchs[kind.name]
        assert isinstance(kind, torchs)


def test_code_written_for_torch_finds_user_inputs_and_non_persistent_buffers_by_identity():
    ep = _program().run_decompositions()
    sig = ep.graph_signature
    users = [s.arg.name for s in sig.input_specs if s.kind is tsig.InputKind.USER_INPUT]
    assert users == ["x", "acc"]
    non_persistent = [s.target for s in sig.input_specs if s.kind is tsig.InputKind.BUFFER and s.persistent is False]
    assert non_persistent == ["scratch"]
    written = [s.target for s in sig.output_specs if s.kind is tsig.OutputKind.USER_INPUT_MUTATION]
    assert written == ["x", "acc"]
    assert [s.target for s in sig.output_specs if s.kind is tsig.OutputKind.BUFFER_MUTATION] == ["steps"]


def test_graphcaps_names_and_torchs_are_the_same_members():
    for name in tsig.InputKind.__members__:
        assert getattr(graphcap.InputKind, name) is tsig.InputKind[name] is graphcap.InputKind[name]
    for name in tsig.OutputKind.__members__:
        assert getattr(graphcap.OutputKind, name) is tsig.OutputKind[name] is graphcap.OutputKind[name]
    assert graphcap.InputKind(tsig.InputKind.BUFFER) is tsig.InputKind.BUFFER
    assert graphcap.OutputKind(tsig.OutputKind.TOKEN.value) is tsig.OutputKind.TOKEN
    assert isinstance(tsig.OutputKind.LOSS_OUTPUT, graphcap.OutputKind)
    assert not isinstance(tsig.OutputKind.LOSS_OUTPUT, graphcap.InputKind)
    assert list(graphcap.OutputKind) == list(tsig.OutputKind) and len(graphcap.InputKind) == len(tsig.InputKind)
    with pytest.raises(ValueError):
        graphcap.InputKind(99)


def test_a_kind_torchs_code_sets_stays_the_same_member():
    ep = _program()
    spec = ep.graph_signature.input_specs[0]
    spec.kind = tsig.InputKind.CONSTANT_TENSOR
    assert spec.kind is graphcap.InputKind.CONSTANT_TENSOR is tsig.InputKind.CONSTANT_TENSOR


def _pte_graph_and_buffer(ep, partitioned: bool):
    from executorch.exir import to_edge, to_edge_transform_and_lower
    if partitioned:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    program = edge.to_executorch()
    return program.exported_program(), program.buffer


class WritesAnInput(torch.nn.Module):
    """XNNPACK's delegate takes no graph that passes a value through; this one it takes whole."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, *, acc):
        acc.mul_(2.0)
        return self.lin(x) + acc


@NEEDS_EXECUTORCH
@pytest.mark.parametrize("model_class, partitioned", [(WritesInputsAndState, False), (WritesAnInput, True)],
                         ids=["portable", "xnnpack"])
def test_executorch_writes_back_every_input_the_program_writes(model_class, partitioned):
    from executorch.runtime import Runtime
    args, kwargs = _inputs()

    def model():
        torch.manual_seed(0)
        return model_class()
    programs = {"torch": torch.export.export(model(), args, kwargs, strict=False),
                "graphcap": graphcap.export(model(), args, kwargs)}
    lowered = {name: _pte_graph_and_buffer(ep, partitioned) for name, ep in programs.items()}
    written_inputs = [s.target for s in lowered["torch"][0].graph_signature.output_specs
                      if s.kind == tsig.OutputKind.USER_INPUT_MUTATION]
    assert written_inputs == (["x", "acc"] if model_class is WritesInputsAndState else ["acc"])
    for name, (program, _) in lowered.items():
        written = {n.args[0].name for n in program.graph.nodes
                   if n.op == "call_function" and "copy_" in str(n.target) and n.args[0].op == "placeholder"}
        assert set(written_inputs) <= written, (name, written)
    # the method's outputs: the written inputs, then the user's (a buffer stays inside), as for torch's
    a, k = copy.deepcopy((args, kwargs))
    with torch.no_grad():
        out = model()(*a, **k)
    after = {"x": a[0], "acc": k["acc"]}
    expected = [after[name] for name in written_inputs] + list(out if isinstance(out, tuple) else (out,))
    for name, (_, buffer) in lowered.items():
        got = Runtime.get().load_program(buffer).load_method("forward").execute([args[0].clone(),
                                                                                 kwargs["acc"].clone()])
        assert len(got) == len(expected), name
        for want, have in zip(expected, got):
            torch.testing.assert_close(have, want, msg=name)


def test_the_file_format_names_every_kind_torch_has():
    from graphcap.serialize import schema
    assert set(tsig.InputKind.__members__) <= set(schema.INPUT_KINDS)
    assert set(tsig.OutputKind.__members__) <= set(schema.OUTPUT_KINDS)
