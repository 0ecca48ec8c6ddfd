"""graphcap's programs in less common shapes, handed to the tools that take torch.export's
(consumers audit 2, bench/probes/consumers_audit2.py, docs/torch-suite.md).

* A model exported in training mode: batch norm updating its running statistics, dropout, buffers
  the output reads after writing them. ``ep.module()`` trains like the model; ExecuTorch takes the
  program once batch norm's functional form is decomposed, and its ``.pte`` carries the state from
  one call to the next.
* Multi-method programs (``export_methods``) with torchao's pt2e quantization per method, and as
  one ExecuTorch ``.pte`` after ``strict=True``, ``run_decompositions()`` and save/load.
* Real models with a dynamic batch through ``torch.onnx.export`` + onnxruntime and AOTInductor on
  CPU, at sizes other than the example.

Slow (out of the default run): each test lowers or compiles.
"""
from __future__ import annotations

import copy
import io
import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import graphcap
from conftest import HAVE_SHARED_ZOO, NEEDS_EXECUTORCH, NEEDS_ONNX, NEEDS_TORCHAO, build_zoo, quiet_warnings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_export_methods import TinyDecoder, _generate  # the decoder of the multi-method tests

NEEDS_ZOO = pytest.mark.skipif(not HAVE_SHARED_ZOO, reason="real models of ../shared/zoo (torchvision, timm, "
                                                           "transformers configs), absent beside this clone")

pytestmark = pytest.mark.slow

aten = torch.ops.aten


def _tensors(value) -> list:
    from graphcap.auto_flatten import flatten
    return [t for t in flatten(value)[0] if isinstance(t, torch.Tensor)]


def _assert_close(got, want, atol=1e-5):
    got, want = _tensors(got), _tensors(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.as_tensor(g), w, atol=atol, rtol=1e-4)


# -- training mode --------------------------------------------------------------------------------

class NormsWithState(torch.nn.Module):
    """Batch norm in training mode (2-d, momentum 0.5, one without affine parameters), and buffers
    the output reads after the forward wrote them: a consumer that drops a write differs on call 2."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4, momentum=0.5)
        self.bn_plain = torch.nn.BatchNorm1d(4, affine=False)
        self.drop = torch.nn.Dropout(0.0)
        self.register_buffer("ema", torch.zeros(4))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        y = self.drop(torch.relu(self.bn(self.conv(x)))).mean((2, 3))
        y = self.bn_plain(y)
        self.ema.mul_(0.8).add_(y.detach().mean(0) * 0.2)
        self.calls.add_(1)
        return y - self.ema, self.calls * 2.0


class Dropouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.drop = torch.nn.Dropout(0.5)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return self.bn(self.drop(self.fc(x))) + torch.nn.functional.dropout(x, 0.25, training=True)


def _training_table():
    """torch.export's default table plus batch norm's functional form (torch's own decomposition,
    the reference's) and var_mean in core operators, which ExecuTorch's kernels cover."""
    from torch._decomp import decomposition_table
    table = torch.export.default_decompositions()
    bn = aten._native_batch_norm_legit_functional.default
    table[bn] = decomposition_table[bn]

    def var_mean(x, dim=None, *, correction=None, keepdim=False):
        return aten.var.correction(x, dim, correction=correction, keepdim=keepdim), aten.mean.dim(x, dim, keepdim)
    table[aten.var_mean.correction] = var_mean
    return table


def _pte_calls(buffer: bytes, calls: list) -> list:
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(buffer)
    method = program.load_method("forward")
    return [list(method.execute(_tensors(copy.deepcopy(args)))) for args in calls]


def _lower(ep, partitioned: bool) -> bytes:
    from executorch.exir import to_edge, to_edge_transform_and_lower
    if partitioned:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return to_edge(ep).to_executorch().buffer


@NEEDS_EXECUTORCH
@pytest.mark.parametrize("partitioned", [False, True], ids=["portable", "xnnpack"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_training_mode_program_runs_in_executorch_and_carries_its_state(partitioned, dynamic):
    torch.manual_seed(0)
    model = NormsWithState().train()
    x1, x2 = torch.randn(5, 3, 6, 6), torch.randn(7, 3, 6, 6)
    calls = [(x1,), (x2 if dynamic else x1,), (x1,)]
    spec = ({0: graphcap.Dim("b", min=2, max=16)},) if dynamic else None
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(model), (x1,), dynamic_shapes=spec)
        before = str(ep.graph)
        got = _pte_calls(_lower(ep.run_decompositions(_training_table()), partitioned), calls)
    eager = copy.deepcopy(model)
    with torch.no_grad():
        want = [eager(*copy.deepcopy(args)) for args in calls]
    for g, w in zip(got, want):
        _assert_close(g, w)
    assert got[2][1].item() == 6.0  # the step counter the .pte wrote, read back on its third call
    assert str(ep.graph) == before  # the program itself is untouched by the decomposition it was given


@NEEDS_EXECUTORCH
def test_executorch_refuses_training_batch_norm_as_for_torchs_program():
    """Without batch norm's decomposition both programs stop at ExecuTorch's verifier, naming the op."""
    torch.manual_seed(0)
    model = NormsWithState().train()
    x = torch.randn(5, 3, 6, 6)
    messages = []
    for export in (graphcap.export, torch.export.export):
        with quiet_warnings():
            ep = export(copy.deepcopy(model), (x,))
        with pytest.raises(Exception) as info, quiet_warnings():  # ExecuTorch's SpecViolationError
            _lower(ep, partitioned=False)
        messages.append(f"{type(info.value).__name__}: {info.value}")
    assert messages[0] == messages[1] and "_native_batch_norm_legit_functional" in messages[0]


def _sgd(module, calls):
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = []
    for args in calls:
        opt.zero_grad()
        torch.manual_seed(3)  # the same dropout masks in eager and in the program
        loss = (module(*copy.deepcopy(args)) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_a_training_mode_module_trains_like_the_model(strict):
    """Dropout masks (seeded), batch norm's running statistics and the parameters after three SGD
    steps through ``ep.module()``, at two batch sizes of a dynamic program, equal eager's."""
    torch.manual_seed(0)
    model = Dropouts().train()
    x1, x2 = torch.randn(5, 6), torch.randn(9, 6)
    calls = [(x1,), (x2,), (x1,)]
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(model), (x1,), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=32)},),
                             strict=strict)
    m = ep.module()
    got_losses, got_state = _sgd(m, calls)
    want_losses, want_state = _sgd(copy.deepcopy(model), calls)
    assert got_losses == pytest.approx(want_losses, abs=1e-6)
    assert got_state.keys() == want_state.keys()
    for k in want_state:
        torch.testing.assert_close(got_state[k], want_state[k])
    assert want_state["bn.num_batches_tracked"].item() == 3


# -- multi-method programs ------------------------------------------------------------------------

PROMPT = torch.tensor([[5, 1, 7, 2]])
INPUTS = {"prefill": (torch.tensor([[1, 2, 3]]),), "decode": (torch.tensor([[4]]),)}
SPECS = {"prefill": ({1: graphcap.Dim("seq", max=15)},)}


def _one_pte(programs, state_prefix=""):
    """Every method in one XNNPACK .pte over one shared KV cache."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    edge = to_edge_transform_and_lower(dict(programs), partitioner=[XnnpackPartitioner()])
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass([state_prefix + n for n in ("k_cache", "v_cache", "pos")])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True), emit_mutable_buffer_names=True)
    return edge.to_executorch(config).buffer


def _runtime_methods(buffer):
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(buffer)
    methods = {n: program.load_method(n) for n in sorted(program.method_names)}
    held = (program, methods)
    return (lambda x: held[1]["prefill"].execute([x])[0]), (lambda x: held[1]["decode"].execute([x])[0])


def _assert_same_generation(got, want, atol=1e-5):
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, atol=atol, rtol=1e-4)


def _quantize_methods(progs):
    """pt2e on each method's module, calibrated by one prefill + decode sequence, converted; the
    KV cache emptied after calibration."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = {name: prepare_pt2e(progs[name].module(), quantizer) for name in INPUTS}
    with torch.no_grad():
        _generate(prepared["prefill"], prepared["decode"], torch.tensor([[3, 8, 1]]), 3)
    converted = {name: convert_pt2e(p) for name, p in prepared.items()}
    for module in converted.values():
        for fqn, buf in module.named_buffers():
            if fqn.rsplit(".", 1)[-1] in ("k_cache", "v_cache", "pos"):
                buf.zero_()
    return converted


class _Method(torch.nn.Module):
    """torch.export's way to one method of a model: a wrapper whose forward calls it."""

    def __init__(self, model, name):
        super().__init__()
        self.m, self.name = model, name

    def forward(self, x):
        return getattr(self.m, self.name)(x)


@NEEDS_EXECUTORCH
@NEEDS_TORCHAO
def test_pt2e_per_method_shares_the_cache_and_reaches_one_pte():
    torch.manual_seed(0)
    model = TinyDecoder()
    with quiet_warnings():
        converted = _quantize_methods(graphcap.export_methods(copy.deepcopy(model), INPUTS, dynamic_shapes=SPECS))
        # the reference: pt2e on torch.export's program of each method of one model
        shared = copy.deepcopy(model)
        torch_specs = {"prefill": ({1: torch.export.Dim("seq", max=15)},), "decode": None}
        reference = _quantize_methods({n: torch.export.export(_Method(shared, n), INPUTS[n],
                                                               dynamic_shapes=torch_specs[n]) for n in INPUTS})
    caches = [dict(m.named_buffers())["k_cache"] for m in converted.values()]
    assert caches[0] is caches[1]  # what prefill writes is what decode reads
    with torch.no_grad():
        want = _generate(converted["prefill"], converted["decode"], PROMPT, 5)
        for m in converted.values():
            for fqn, buf in m.named_buffers():
                if fqn in ("k_cache", "v_cache", "pos"):
                    buf.zero_()
        _assert_same_generation(_generate(reference["prefill"], reference["decode"], PROMPT, 5), want, atol=0)
    with quiet_warnings():
        again = {name: graphcap.export(m, INPUTS[name], dynamic_shapes=SPECS.get(name))
                 for name, m in converted.items()}
        pte = _one_pte(again)
    _assert_same_generation(_generate(*_runtime_methods(pte), PROMPT, 5), want)


@NEEDS_EXECUTORCH
@NEEDS_TORCHAO
def test_quantized_methods_gathered_in_one_module_export_as_methods_again():
    """The two converted methods as submodules of one module: their cache is one tensor under two
    names; export_methods, module() and one .pte keep it one state."""
    torch.manual_seed(0)
    with quiet_warnings():
        converted = _quantize_methods(graphcap.export_methods(TinyDecoder(), INPUTS, dynamic_shapes=SPECS))

    class Gathered(torch.nn.Module):
        def __init__(self, prefill, decode):
            super().__init__()
            self.p, self.d = prefill, decode

        def prefill(self, ids):
            return self.p(ids)

        def decode(self, tok):
            return self.d(tok)
    gathered = Gathered(converted["prefill"], converted["decode"])
    eager = copy.deepcopy(gathered)
    assert eager.p.k_cache is eager.d.k_cache
    with torch.no_grad():
        want = _generate(eager.prefill, eager.decode, PROMPT, 5)
    with quiet_warnings():
        progs = graphcap.export_methods(copy.deepcopy(gathered), INPUTS, dynamic_shapes=SPECS)
        pte = _one_pte(progs, state_prefix="p.")
    m = progs.module()
    _assert_same_generation(_generate(m.prefill, m.decode, PROMPT, 5), want)
    _assert_same_generation(_generate(*_runtime_methods(pte), PROMPT, 5), want)


def _strict(model):
    return graphcap.export_methods(model, INPUTS, dynamic_shapes=SPECS, strict=True)


def _decomposed(model):
    return graphcap.export_methods(model, INPUTS, dynamic_shapes=SPECS).run_decompositions()


def _loaded(model):
    buf = io.BytesIO()
    graphcap.save(graphcap.export_methods(model, INPUTS, dynamic_shapes=SPECS, strict=True), buf)
    return graphcap.load(io.BytesIO(buf.getvalue()))


@NEEDS_EXECUTORCH
@pytest.mark.parametrize("make", [_strict, _decomposed, _loaded], ids=["strict", "decomposed", "strict_loaded"])
def test_every_form_of_a_multi_method_program_is_one_pte_over_one_cache(make):
    torch.manual_seed(1)
    model = TinyDecoder()
    eager = copy.deepcopy(model)
    with torch.no_grad():
        want = _generate(eager.prefill, eager.decode, PROMPT, 5)
    with quiet_warnings():
        pte = _one_pte(make(copy.deepcopy(model)))
    _assert_same_generation(_generate(*_runtime_methods(pte), PROMPT, 5), want)


# -- a dynamic batch, ONNX and AOTInductor -------------------------------------------------------------

def _at_batch(inputs, batch):
    def cut(t):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return t.repeat((batch + t.shape[0] - 1) // t.shape[0], *([1] * (t.dim() - 1)))[:batch].clone()
        return t
    args, kwargs = inputs
    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


def _dynamic_case(name):
    built = build_zoo(name)
    model = built.model.eval()
    with quiet_warnings():
        ep = graphcap.export(model, tuple(built.args), dict(built.kwargs or {}), dynamic_shapes=built.dynamic_shapes)
    second = (tuple(built.args2), dict(built.kwargs2 or {}))
    sizes = [_at_batch(second, 1), _at_batch(second, 5)]

    def eager(args, kwargs):
        with torch.no_grad():
            return copy.deepcopy(model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    return ep, sizes, [eager(a, k) for a, k in sizes]


REAL_MODELS = ["tv_resnet18", "hf_bert", "timm_vit_tiny_patch16_224"]


@NEEDS_ZOO
@NEEDS_ONNX
@pytest.mark.parametrize("name", REAL_MODELS)
def test_onnx_runs_a_real_models_dynamic_program_at_other_batches(name):
    import onnxruntime
    ep, sizes, wants = _dynamic_case(name)
    with quiet_warnings():
        proto = torch.onnx.export(ep, verbose=False).model_proto
    assert all(i.type.tensor_type.shape.dim[0].dim_param for i in proto.graph.input)  # the batch stays symbolic
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for (args, kwargs), want in zip(sizes, wants):
        got = session.run(None, {n: t.numpy() for n, t in zip(names, _tensors((args, kwargs)))})
        _assert_close([torch.from_numpy(g) for g in got], want, atol=1e-4)


@NEEDS_ZOO
@pytest.mark.parametrize("name", REAL_MODELS)
def test_aoti_runs_a_real_models_dynamic_program_at_other_batches(name):
    ep, sizes, wants = _dynamic_case(name)
    with tempfile.TemporaryDirectory() as d, quiet_warnings():
        path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))
        runner = torch._inductor.aoti_load_package(path)
        for (args, kwargs), want in zip(sizes, wants):
            _assert_close(runner(*copy.deepcopy(args), **copy.deepcopy(kwargs)), want, atol=1e-4)
