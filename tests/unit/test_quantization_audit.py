"""Quantization flows on graphcap's programs, against torch.export's pipeline (the reference).

The quantization audit (docs/torch-suite.md, "Quantization flows audit"; probe:
bench/probes/quantization_audit.py). Quantized outputs are compared with torch.export's
pipeline run on the same model and data, not with float eager.
"""
from __future__ import annotations

import copy
import dataclasses
import enum
import io
import operator

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from conftest import NEEDS_EXECUTORCH, NEEDS_TORCHAO
from graphcap import ir_checks
from graphcap.errors import SerializationError
from graphcap.serialize.archive import read_entries, write_archive

ACCESS = torch.ops.export.access_subclass_inner_tensor.default
BATCH = torch.export.Dim("batch", min=1, max=16)


class TwoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 24)
        self.fc2 = torch.nn.Linear(24, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 8, 1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        a = torch.relu(self.bn(self.a(x)))
        y = torch.cat([a + self.b(x), a], dim=1)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class Rounding(enum.Enum):
    NEAREST = 1
    FLOOR = 2


@dataclasses.dataclass(frozen=True)
class Granule:
    dim: int


@dataclasses.dataclass
class Options:
    granule: Granule
    rounding: Rounding
    scale: float


class OptionedPair(TwoTensor):
    """A subclass whose flatten context keeps options objects, as torchao's quantized weights do."""

    @staticmethod
    def __new__(cls, a, b, options=None, outer_size=None, outer_stride=None):
        return TwoTensor.__new__(cls, a, b, outer_size, outer_stride)

    def __init__(self, a, b, options=None, outer_size=None, outer_stride=None):
        super().__init__(a, b, outer_size, outer_stride)
        self.options = options

    def __tensor_flatten__(self):
        return ["a", "b"], {"options": self.options, "kinds": [Rounding.FLOOR]}

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return OptionedPair(inner["a"], inner["b"], meta["options"], outer_size, outer_stride)


class WithOptions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        options = Options(Granule(-1), Rounding.NEAREST, 0.5)
        self.register_buffer("pair", OptionedPair(torch.randn(4), torch.randn(4), options))

    def forward(self, input):  # named like the builtin, as nn.Linear's and nn.Sequential's inputs are
        return self.proj(input) + self.pair.b


def _quantized_linear(config_name: str) -> torch.nn.Module:
    import torchao.quantization as tq
    torch.manual_seed(0)
    model = TwoLinear().eval()
    tq.quantize_(model, getattr(tq, config_name)())
    return model


def _round_trip(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return graphcap.load(buf)


@NEEDS_TORCHAO
@pytest.mark.parametrize("config", ["Int8WeightOnlyConfig", "Int8DynamicActivationInt8WeightConfig"])
def test_a_model_quantized_with_torchao_exports_runs_decomposes_and_loads(config):
    """torchao's int8 weights are subclass parameters whose data torchao's linear reads while the
    tracer is still wrapping the inputs; those reads are the program's nodes (as in torch's
    graph) and carry no user line. graphcap's verifier refused the program for that."""
    model = _quantized_linear(config)
    x, other = torch.randn(3, 16), torch.randn(7, 16)
    ep = graphcap.export(model, (x,), dynamic_shapes=({0: BATCH},))
    assert ir_checks.violations(ep) == []
    reads = [n for n in ep.graph.nodes if n.target is ACCESS]
    assert reads and all(n.meta["stack_trace"] is None for n in reads)
    reference = torch.export.export(model, (x,), dynamic_shapes=({0: BATCH},))
    with torch.no_grad():
        for inp in (x, other):
            expected = reference.module()(inp)
            torch.testing.assert_close(ep.module()(inp), expected, rtol=0, atol=0)
            torch.testing.assert_close(model(inp), expected, rtol=0, atol=0)
    decomposed = ep.run_decompositions()
    assert ir_checks.violations(decomposed) == []
    for program in (decomposed, _round_trip(ep), _round_trip(decomposed)):
        with torch.no_grad():
            for inp in (x, other):
                torch.testing.assert_close(program.module()(inp), reference.module()(inp), rtol=1e-6, atol=1e-6)


@NEEDS_TORCHAO
def test_a_torchao_program_is_refused_out_of_range_before_computing():
    model = _quantized_linear("Int8DynamicActivationInt8WeightConfig")
    ep = graphcap.export(model, (torch.randn(3, 16),), dynamic_shapes=({0: BATCH},))
    with pytest.raises(AssertionError, match="x"):
        ep.module()(torch.randn(17, 16))


@NEEDS_TORCHAO
def test_a_torchao_model_exports_strict_as_non_strict():
    model = _quantized_linear("Int8WeightOnlyConfig")
    x = torch.randn(2, 16)
    ep = graphcap.export(model, (x,), strict=True)
    assert ir_checks.violations(ep) == []
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


def _pt2e(exporter, model, args, spec, quantizer, calibration):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    ep = exporter(model, args, dynamic_shapes=spec)
    prepared = prepare_pt2e(ep.module(), quantizer)
    annotated = sorted(n.name for n in prepared.graph.nodes if "quantization_annotation" in n.meta)
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    return convert_pt2e(prepared), annotated


@NEEDS_TORCHAO
@NEEDS_EXECUTORCH
@pytest.mark.parametrize("per_channel, dynamic", [(False, False), (True, False), (True, True)])
def test_pt2e_on_graphcaps_module_quantizes_as_on_torchs(per_channel, dynamic):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    torch.manual_seed(0)
    model = ConvBlock().eval()
    x = torch.randn(2, 3, 8, 8)
    calibration = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    tests = [torch.randn(2, 3, 8, 8), torch.randn(5, 3, 8, 8)]
    spec = ({0: BATCH},)

    def quantizer():
        config = get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
        return XNNPACKQuantizer().set_global(config)
    ours, ours_annotated = _pt2e(graphcap.export, copy.deepcopy(model), (x,), spec, quantizer(), calibration)
    theirs, their_annotated = _pt2e(torch.export.export, copy.deepcopy(model), (x,), spec, quantizer(), calibration)
    assert ours_annotated == their_annotated
    again = graphcap.export(ours, (x,), dynamic_shapes=spec)
    decomposed = again.run_decompositions()
    with torch.no_grad():
        for inp in tests:
            expected = theirs(inp)
            loaded = _round_trip(decomposed)
            for got in (ours(inp), again.module()(inp), decomposed.module()(inp), loaded.module()(inp)):
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return buf.getvalue()


def test_a_subclass_context_holding_enums_and_dataclasses_saves_and_loads():
    """torchao's int8 dynamic-activation weight keeps a dataclass (holding a frozen dataclass and an
    enum member) in its flatten context; graphcap.save refused it ("stores plain values only")
    while torch.export.save writes it."""
    torch.manual_seed(0)
    model = WithOptions()
    x, other = torch.randn(2, 4), torch.randn(3, 4)
    ep = graphcap.export(model, (x,), dynamic_shapes=({0: BATCH},))
    for program in (ep, ep.run_decompositions()):
        loaded = graphcap.load(io.BytesIO(_saved(program)))
        for inp in (x, other):
            torch.testing.assert_close(loaded.module()(inp), model(inp))
    loaded = graphcap.load(io.BytesIO(_saved(ep)))
    pair = loaded.constants.get("pair", loaded.state_dict.get("pair"))
    assert type(pair) is OptionedPair and pair.options == model.pair.options
    assert type(pair.options.granule) is Granule and pair.options.rounding is Rounding.NEAREST
    placeholder = next(n for n in loaded.graph.nodes if n.name == "b_pair")
    assert placeholder.meta["val"].__tensor_flatten__()[1]["kinds"] == [Rounding.FLOOR]
    assert _saved(loaded) == _saved(ep)


@pytest.mark.parametrize("change, words", [
    (lambda text: text.replace('"NEAREST"', '"UPWARDS"'), "no enum member 'UPWARDS'"),
    (lambda text: text.replace('"scale"', '"scales"'), "are not the fields of that dataclass"),
    (lambda text: text.replace('.Granule"', '.Absent"'), "has not imported"),
])
def test_a_file_whose_subclass_context_names_what_is_not_there_is_refused(change, words):
    data = _saved(graphcap.export(WithOptions(), (torch.randn(2, 4),)))
    entries = read_entries(io.BytesIO(data))
    entries["program.json"] = change(entries["program.json"].decode()).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    with pytest.raises(SerializationError, match=words):
        graphcap.load(io.BytesIO(out.getvalue()))


def test_a_program_with_subclass_state_and_an_input_named_input_decomposes():
    """Splitting the subclass state copies the graph, and fx's copy renamed the input ``input`` to
    ``input_1``: the decomposition's verifier refused its own program."""
    model = WithOptions()
    x = torch.randn(2, 4)
    ep = graphcap.export(model, (x,))
    decomposed = ep.run_decompositions()
    assert [s.arg.name for s in decomposed.graph_signature.input_specs][-1] == "input"
    assert ir_checks.violations(decomposed) == []
    torch.testing.assert_close(decomposed.module()(x), model(x))


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4))

    def forward(self, x):
        return x + self.conv(x)


class ResidualStack(torch.nn.Module):
    """mobilenet_v2's shape: residual blocks (a user's class) held by an ``nn.Sequential``."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.features = torch.nn.Sequential(Residual(), Residual(), torch.nn.ReLU())

    def forward(self, x):
        return self.features(self.stem(x)).mean((2, 3))


def test_an_operator_a_users_block_runs_inside_a_sequential_is_its_own_source():
    """The residual ``+`` was attributed to the enclosing ``nn.Sequential`` (the innermost torch.nn
    module on the stack, skipping the user's block): both adds became one Sequential partition
    and no ``operator.add`` partition existed, so the X86 quantizer's conv+add pattern found
    nothing in mobilenet_v2 (89 annotated nodes against torch's 99)."""
    from torch.fx.passes.utils.source_matcher_utils import get_source_partitions
    model, x = ResidualStack().eval(), torch.randn(1, 3, 6, 6)
    ours = graphcap.export(model, (x,))
    theirs = torch.export.export(model, (x,), strict=True)
    for program in (ours, ours.run_decompositions(), _round_trip(ours)):
        adds = [n for n in program.graph.nodes if n.target in (torch.ops.aten.add.Tensor,)]
        assert [n.meta["source_fn_stack"][-1][1] for n in adds] == [operator.add] * 2
    wanted = [operator.add, torch.nn.Sequential, torch.nn.Conv2d, torch.nn.ReLU]

    def partitions(graph):  # operator nodes only: strict programs also tag the weights a call reads
        return {k: sorted(sum(n.op == "call_function" for n in p.nodes) for p in v)
                for k, v in get_source_partitions(graph, wanted).items()}
    assert partitions(ours.graph) == partitions(theirs.graph)
    assert torch.nn.Sequential not in partitions(ours.graph)


@NEEDS_TORCHAO
def test_x86_quantizer_annotates_residual_adds_as_on_torchs_program():
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )
    torch.manual_seed(0)
    model, x = ResidualStack().eval(), torch.randn(2, 3, 6, 6)

    def quantizer():
        return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    calibration = [torch.randn(2, 3, 6, 6) for _ in range(2)]
    ours, ours_annotated = _pt2e(graphcap.export, copy.deepcopy(model), (x,), None, quantizer(), calibration)
    theirs, their_annotated = _pt2e(torch.export.export, copy.deepcopy(model), (x,), None, quantizer(), calibration)
    assert ours_annotated == their_annotated and "add" in ours_annotated
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6)
