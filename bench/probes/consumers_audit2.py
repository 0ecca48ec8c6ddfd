"""Consumers audit 2: graphcap's programs in less common shapes, handed to the tools that take
torch.export's, beside torch.export's program of the same model (``strict=False`` unless said).

Three parts (``--part train|methods|dynamic``):

* ``train``: models exported in training mode (``model.train()``: batch norm updating its running
  statistics, dropout, a buffer the output reads after writing it, ``momentum=None`` batch norm).
  ``ep.module()`` run three times against eager (outputs and buffers), trained with SGD for three
  steps (losses and the state after); ExecuTorch ``to_edge`` (portable) and XNNPACK as exported,
  after ``run_decompositions()``, and after ``run_decompositions`` with a table adding batch norm's
  functional decomposition (the ``.pte`` then runs: three calls, its state carried between them).
* ``methods``: ``graphcap.export_methods`` (the tiny decoder of tests/unit/test_export_methods.py,
  prefill + decode over one KV cache) against torch.export of each method through a wrapper:
  each method's ``module()`` in sequence, ``unflatten`` of each method, torchao pt2e
  (``prepare_pt2e`` of each method's module, calibrated by a prefill + decode sequence, converted,
  exported again, one XNNPACK ``.pte`` with shared mutable buffers), the float methods as one ``.pte``
  (portable and XNNPACK) as exported, decomposed, saved and loaded, ``strict=True``; the quantized
  methods gathered in one module and exported with ``export_methods`` again.
* ``dynamic``: three zoo models with a dynamic batch (torchvision resnet18, transformers BERT with
  batch and sequence dynamic, timm vit_tiny) through ``torch.onnx.export(ep)`` + onnxruntime and
  AOTInductor on CPU, run at the zoo's second input and at batch 1 and 5; for BERT also the
  ``strict=True`` program, the program after ``graphcap.save``/``load`` and after
  ``run_decompositions()``.

Each line: case, consumer, graphcap's result, torch's, SAME/DIFF. Needs ../shared/zoo for ``dynamic``.

    PYTHONPATH=src python bench/probes/consumers_audit2.py --part train
"""
from __future__ import annotations

import argparse
import copy
import io
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch

import graphcap

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT.parent / "shared" / "zoo"))
import consumers  # noqa: E402  (bench/consumers.py)

warnings.filterwarnings("ignore")
aten = torch.ops.aten
EXPORT = {"graphcap": graphcap.export, "torch": torch.export.export}


def flat(value):
    return [t for t in consumers.flat_values(value) if isinstance(t, torch.Tensor)]


def diff(a, b) -> float:
    a, b = flat(a), flat(b)
    if len(a) != len(b):
        return float("inf")
    return max([float((x.double() - torch.as_tensor(y).double()).abs().max()) for x, y in zip(a, b) if x.numel()]
               + [0.0])


def show(tag: str, results: dict) -> None:
    for key in sorted(set(results["graphcap"]) | set(results["torch"])):
        g, t = results["graphcap"].get(key), results["torch"].get(key)
        print(f"{tag} {key}: {'SAME' if g == t else 'DIFF'} | graphcap: {g} | torch: {t}", flush=True)


# -- training mode ------------------------------------------------------------------------------

class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.drop, self.fc = torch.nn.Dropout(0.0), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.drop(torch.relu(self.bn(self.conv(x)))).mean((2, 3)))


class BNWithEMA(torch.nn.Module):
    """The output reads buffers the forward wrote: a .pte that drops a write differs on call 2."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)
        self.register_buffer("ema", torch.zeros(6))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        y = self.bn(x)
        self.ema.mul_(0.9).add_(y.detach().mean(0) * 0.1)
        self.steps += 1
        return y - self.ema, self.steps * 1.0


class Dropouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop, self.bn = torch.nn.Linear(6, 6), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return self.bn(self.drop(self.fc(x))) + torch.nn.functional.dropout(x, 0.3, training=True)


class NoRunningStats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn, self.ln = torch.nn.BatchNorm1d(6, track_running_stats=False), torch.nn.LayerNorm(6)

    def forward(self, x):
        return self.ln(self.bn(x))


class CumulativeBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3, momentum=None)

    def forward(self, x):
        return self.bn(x)


TRAIN_CASES = {
    "conv_bn": (ConvBN, (torch.randn(4, 3, 8, 8),), (torch.randn(6, 3, 8, 8),)),
    "bn_ema_steps": (BNWithEMA, (torch.randn(5, 6),), (torch.randn(7, 6),)),
    "dropout_half": (Dropouts, (torch.randn(5, 6),), (torch.randn(7, 6),)),
    "bn_no_running_stats": (NoRunningStats, (torch.randn(5, 6),), (torch.randn(9, 6),)),
    "bn_momentum_none": (CumulativeBN, (torch.randn(4, 3, 5, 5),), (torch.randn(2, 3, 5, 5),)),
}


def training_table():
    """torch.export's default table plus batch norm's functional form and var_mean, written out
    in core ATen operators: what a training-mode program needs before ExecuTorch's kernels."""
    from torch._decomp import decomposition_table  # the reference's own decomposition
    table = torch.export.default_decompositions()
    bn = aten._native_batch_norm_legit_functional.default
    table[bn] = decomposition_table[bn]

    def var_mean(x, dim=None, *, correction=None, keepdim=False):
        return aten.var.correction(x, dim, correction=correction, keepdim=keepdim), aten.mean.dim(x, dim, keepdim)
    table[aten.var_mean.correction] = var_mean
    return table


def run_pte(buffer: bytes, calls, seed=None) -> list:
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(buffer).load_method("forward")
    got = []
    for args in calls:
        if seed is not None:
            torch.manual_seed(seed)
        got.append(list(method.execute(flat(copy.deepcopy(args)))))
    return got


def lower(ep, how: str) -> bytes:
    from executorch.exir import to_edge, to_edge_transform_and_lower
    if how == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return to_edge(ep).to_executorch().buffer


def train_steps(m, calls):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    losses = []
    for args in calls:
        opt.zero_grad()
        torch.manual_seed(3)
        out = m(*copy.deepcopy(args))
        loss = ((out[0] if isinstance(out, tuple) else out) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in m.state_dict().items()}


def train_case(name, dynamic, exporter, strict):
    make, a1, a2 = TRAIN_CASES[name]
    torch.manual_seed(0)
    model = make().train()
    spec = ({0: torch.export.Dim("b", min=2, max=32)},) if dynamic else None
    calls = [a1, a2 if dynamic else a1, a1]
    reference = copy.deepcopy(model)
    want = []
    with torch.no_grad():
        for args in calls:
            torch.manual_seed(7)
            want.append(reference(*copy.deepcopy(args)))
    out = {}
    try:
        ep = EXPORT[exporter](copy.deepcopy(model), a1, dynamic_shapes=spec, strict=strict)
    except Exception as e:
        return {"export": consumers.first_line(e)}
    m = ep.module()
    got = []
    for args in calls:
        torch.manual_seed(7)
        got.append(m(*copy.deepcopy(args)))
    buffers = dict(reference.named_buffers())
    out["module"] = (f"{max(diff(w, g) for w, g in zip(want, got)):.0e} buffers "
                     f"{max([diff(buffers[k], v) for k, v in m.named_buffers()] + [0.0]):.0e}")
    if name != "bn_ema_steps":  # its ema keeps no graph; training through it is the same as eager's
        wl, ws = train_steps(copy.deepcopy(model), calls)
        try:
            gl, gs = train_steps(EXPORT[exporter](copy.deepcopy(model), a1, dynamic_shapes=spec,
                                                  strict=strict).module(), calls)
            out["sgd"] = (f"loss {max(abs(x - y) for x, y in zip(gl, wl)):.0e} state "
                          f"{max(float((gs[k].double() - ws[k].double()).abs().max()) for k in ws):.0e}")
        except Exception as e:
            out["sgd"] = consumers.first_line(e)
    forms = {"as_exported": lambda: ep, "decomposed": lambda: ep.run_decompositions(),
             "decomposed_bn_table": lambda: EXPORT[exporter](copy.deepcopy(model), a1, dynamic_shapes=spec,
                                                             strict=strict).run_decompositions(training_table())}
    for form, make_program in forms.items():
        for how in ("portable", "xnnpack"):
            try:
                got = run_pte(lower(make_program(), how), calls, seed=7)
                out[f"{form}/{how}"] = " ".join(f"{diff(w, g):.0e}" for w, g in zip(want, got))
            except Exception as e:
                out[f"{form}/{how}"] = consumers.first_line(e)
    return out


def train_zoo(name: str):
    """A zoo model in training mode (dropout p=0): module() and the XNNPACK .pte after the table."""
    import zoo
    built = zoo.REGISTRY[name].builder()
    model = built.model.train()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    calls = [tuple(built.args), tuple(built.args2), tuple(built.args)]
    reference = copy.deepcopy(model)
    with torch.no_grad():
        want = [reference(*copy.deepcopy(a)) for a in calls]
    buffers = dict(reference.named_buffers())
    results = {}
    for exporter in ("graphcap", "torch"):
        out = results[exporter] = {}
        ep = EXPORT[exporter](copy.deepcopy(model), calls[0], dynamic_shapes=built.dynamic_shapes)
        m = ep.module()
        got = [m(*copy.deepcopy(a)) for a in calls]
        out["module"] = (f"{max(diff(w, g) for w, g in zip(want, got)):.0e} buffers "
                         f"{max(diff(buffers[k], v) for k, v in m.named_buffers()):.0e}")
        try:
            program = EXPORT[exporter](copy.deepcopy(model), calls[0], dynamic_shapes=built.dynamic_shapes)
            got = run_pte(lower(program.run_decompositions(training_table()), "xnnpack"), calls)
            out["bn_table/xnnpack"] = " ".join(f"{diff(w, g):.0e}" for w, g in zip(want, got))
        except Exception as e:
            out["bn_table/xnnpack"] = consumers.first_line(e)
    show(f"{name} train", results)


def part_train():
    for name in TRAIN_CASES:
        for dynamic in (False, True):
            for strict in (False, True):
                results = {ex: train_case(name, dynamic, ex, strict) for ex in EXPORT}
                show(f"{name} dynamic={int(dynamic)} strict={int(strict)}", results)
    if (ROOT.parent / "shared" / "zoo").is_dir():
        train_zoo("tv_resnet18")


# -- multi-method programs ----------------------------------------------------------------------

PROMPT = torch.tensor([[5, 1, 7, 2]])
METHOD_INPUTS = {"prefill": (torch.tensor([[1, 2, 3]]),), "decode": (torch.tensor([[4]]),)}
METHOD_SPECS = {"prefill": ({1: torch.export.Dim("seq", max=15)},)}


class Method(torch.nn.Module):
    """torch.export's way to one method: a wrapper whose forward calls it (FQNs under ``m.``)."""

    def __init__(self, model, name):
        super().__init__()
        self.m, self.name = model, name

    def forward(self, x):
        return getattr(self.m, self.name)(x)


def method_programs(exporter, model, strict=False):
    if exporter == "graphcap":
        return graphcap.export_methods(model, METHOD_INPUTS, dynamic_shapes=METHOD_SPECS, strict=strict)
    return {n: torch.export.export(Method(model, n), METHOD_INPUTS[n], dynamic_shapes=METHOD_SPECS.get(n),
                                   strict=strict) for n in METHOD_INPUTS}


def one_pte(programs, prefix, partitioned):
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    partitioner = []
    if partitioned:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        partitioner = [XnnpackPartitioner()]
    edge = to_edge_transform_and_lower(dict(programs), partitioner=partitioner)
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass([prefix + n for n in ("k_cache", "v_cache", "pos")])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True), emit_mutable_buffer_names=True)
    return edge.to_executorch(config).buffer


def pte_calls(buffer):
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(buffer)
    methods = {n: program.load_method(n) for n in sorted(program.method_names)}
    keep = (program, methods)  # the methods run while the program is alive
    return (lambda x: keep[1]["prefill"].execute([x])[0]), (lambda x: keep[1]["decode"].execute([x])[0])


def compare(got, want) -> str:
    (tokens, logits), (want_tokens, want_logits) = got, want
    worst = max(float((a - b).abs().max()) for a, b in zip(logits, want_logits))
    return ("tokens = " if tokens == want_tokens else f"tokens {tokens} != {want_tokens} ") + f"{worst:.0e}"


def xnnpack_quantizer():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config())


def quantized_methods(progs):
    from test_export_methods import _generate
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    prepared = {n: prepare_pt2e(progs[n].module(), xnnpack_quantizer()) for n in METHOD_INPUTS}
    _generate(prepared["prefill"], prepared["decode"], PROMPT, 4)
    converted = {n: convert_pt2e(p) for n, p in prepared.items()}
    for c in converted.values():  # calibration wrote the cache: start from an empty one
        for fqn, b in c.named_buffers():
            if fqn.rsplit(".", 1)[-1] in ("k_cache", "v_cache", "pos"):
                b.zero_()
    return converted


def part_methods():
    from test_export_methods import TinyDecoder, _generate
    torch.manual_seed(0)
    model = TinyDecoder()
    reference = copy.deepcopy(model)
    want = _generate(reference.prefill, reference.decode, PROMPT, 4)
    results, quantized = {}, {}
    for exporter in EXPORT:
        out = results[exporter] = {}
        prefix = "" if exporter == "graphcap" else "m."
        progs = method_programs(exporter, copy.deepcopy(model))
        mods = {n: progs[n].module() for n in METHOD_INPUTS}
        out["module() of each method"] = compare(_generate(mods["prefill"], mods["decode"], PROMPT, 4), want)
        unflatten = graphcap.unflatten if exporter == "graphcap" else torch.export.unflatten
        progs = method_programs(exporter, copy.deepcopy(model))
        trees = {n: unflatten(progs[n]) for n in METHOD_INPUTS}
        prefill_tree, decode_tree = trees["prefill"], trees["decode"]
        out["unflatten of each method"] = compare(
            _generate(lambda x, t=prefill_tree: t(x), lambda x, t=decode_tree: t(x), PROMPT, 4), want)
        try:
            converted = quantized_methods(method_programs(exporter, copy.deepcopy(model)))
            quantized[exporter] = _generate(converted["prefill"], converted["decode"], PROMPT, 4)
            out["pt2e methods vs float"] = compare(quantized[exporter], want)
            again = {n: EXPORT[exporter](c, METHOD_INPUTS[n], dynamic_shapes=METHOD_SPECS.get(n))
                     for n, c in converted.items()}
            out["pt2e one .pte (XNNPACK)"] = compare(
                _generate(*pte_calls(one_pte(again, "", True)), PROMPT, 4), quantized[exporter])
        except Exception as e:
            out["pt2e"] = consumers.first_line(e)
        for partitioned in (False, True):
            try:
                progs = method_programs(exporter, copy.deepcopy(model))
                out[f"one .pte ({'XNNPACK' if partitioned else 'portable'})"] = compare(
                    _generate(*pte_calls(one_pte(progs, prefix, partitioned)), PROMPT, 4), want)
            except Exception as e:
                out[f"one .pte ({'XNNPACK' if partitioned else 'portable'})"] = consumers.first_line(e)
    show("decoder", results)
    print("pt2e graphcap vs torch:", compare(quantized["graphcap"], quantized["torch"]))
    forms = {}
    for strict in (False, True):
        forms[f"strict={int(strict)}"] = lambda s=strict: method_programs("graphcap", copy.deepcopy(model), s)
        forms[f"strict={int(strict)} decomposed"] = \
            lambda s=strict: method_programs("graphcap", copy.deepcopy(model), s).run_decompositions()

        def loaded(s=strict):
            buf = io.BytesIO()
            graphcap.save(method_programs("graphcap", copy.deepcopy(model), s), buf)
            return graphcap.load(io.BytesIO(buf.getvalue()))
        forms[f"strict={int(strict)} loaded"] = loaded
    for form, make in forms.items():
        for partitioned in (False, True):
            try:
                got = _generate(*pte_calls(one_pte(make(), "", partitioned)), PROMPT, 4)
                print(f"graphcap {form} one .pte ({'XNNPACK' if partitioned else 'portable'}): {compare(got, want)}")
            except Exception as e:
                print(f"graphcap {form}: {consumers.first_line(e)}")
    # the quantized methods gathered in one module, exported with export_methods again
    converted = quantized_methods(method_programs("graphcap", copy.deepcopy(model)))

    class Gathered(torch.nn.Module):
        def __init__(self, p, d):
            super().__init__()
            self.p, self.d = p, d

        def prefill(self, ids):
            return self.p(ids)

        def decode(self, tok):
            return self.d(tok)
    gathered = Gathered(converted["prefill"], converted["decode"])
    eager = copy.deepcopy(gathered)
    qwant = _generate(eager.prefill, eager.decode, PROMPT, 4)
    progs = graphcap.export_methods(copy.deepcopy(gathered), METHOD_INPUTS, dynamic_shapes=METHOD_SPECS)
    m = progs.module()
    print("gathered quantized methods, module():", compare(_generate(m.prefill, m.decode, PROMPT, 4), qwant))
    print("gathered quantized methods, one .pte (XNNPACK):",
          compare(_generate(*pte_calls(one_pte(progs, "p.", True)), PROMPT, 4), qwant))


# -- dynamic batch: ONNX and AOTInductor -------------------------------------------------------------

def resized(built, batch):
    def cut(t):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return t.repeat((batch + t.shape[0] - 1) // t.shape[0], *([1] * (t.dim() - 1)))[:batch].clone()
        return t
    return tuple(cut(a) for a in built.args2), {k: cut(v) for k, v in (built.kwargs2 or {}).items()}


def dynamic_model(name, forms=("as_exported",)):
    import zoo
    built = zoo.REGISTRY[name].builder()
    model = built.model.eval()
    sizes = [(built.args2, built.kwargs2 or {})] + [resized(built, b) for b in (1, 5)]

    def eager(args, kwargs):
        with torch.no_grad():
            return copy.deepcopy(model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    wants = [eager(a, k) for a, k in sizes]
    results = {}
    for exporter in EXPORT:
        out = results[exporter] = {}
        for form in forms:
            ep = EXPORT[exporter](copy.deepcopy(model), tuple(built.args), dict(built.kwargs or {}),
                                  dynamic_shapes=built.dynamic_shapes, strict=form == "strict")
            if form == "decomposed":
                ep = ep.run_decompositions()
            elif form == "loaded":
                buf = io.BytesIO()
                (graphcap.save if exporter == "graphcap" else torch.export.save)(ep, buf)
                ep = (graphcap.load if exporter == "graphcap" else torch.export.load)(io.BytesIO(buf.getvalue()))
            try:
                import onnxruntime
                proto = torch.onnx.export(ep, verbose=False).model_proto
                dims = [[bool(d.dim_param) for d in i.type.tensor_type.shape.dim] for i in proto.graph.input]
                session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
                names = [i.name for i in session.get_inputs()]
                worst = []
                for (args, kwargs), want in zip(sizes, wants):
                    feed = {n: t.numpy() for n, t in zip(names, flat((args, kwargs)))}
                    worst.append(diff(want, [torch.from_numpy(g) for g in session.run(None, feed)]))
                out[f"{form} onnx"] = f"symbolic {dims} " + " ".join(f"{w:.0e}" for w in worst)
            except Exception as e:
                out[f"{form} onnx"] = consumers.first_line(e)
            try:
                with tempfile.TemporaryDirectory() as d:
                    path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "m.pt2"))
                    runner = torch._inductor.aoti_load_package(path)
                    worst = [diff(want, runner(*copy.deepcopy(a), **copy.deepcopy(k)))
                             for (a, k), want in zip(sizes, wants)]
                out[f"{form} aoti"] = " ".join(f"{w:.0e}" for w in worst)
            except Exception as e:
                out[f"{form} aoti"] = consumers.first_line(e)
    show(name, results)


def part_dynamic():
    dynamic_model("tv_resnet18")
    dynamic_model("hf_bert", forms=("as_exported", "strict", "loaded", "decomposed"))
    dynamic_model("timm_vit_tiny_patch16_224")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["train", "methods", "dynamic"], action="append")
    parts = parser.parse_args(argv).part or ["train", "methods", "dynamic"]
    for part in parts:
        {"train": part_train, "methods": part_methods, "dynamic": part_dynamic}[part]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
