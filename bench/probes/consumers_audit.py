"""The consumers matrix by feature: small programs each exercising one export feature, made by
graphcap and by torch.export (non-strict, the reference), handed as is to the deployment tools
and compared with eager.

Consumers: ExecuTorch with the XNNPACK partitioner and without (portable kernels), the ``.pte``
run by ExecuTorch's runtime; ``torch.onnx.export(ep)`` run by onnxruntime; AOTInductor on CPU
(a few programs: slow here); torchao ``quantize_`` int8 weight-only before export, the program's
``module()`` and its ExecuTorch portable ``.pte`` compared with the quantized eager model.

A dynamic program's second input is at the top of its range (ExecuTorch plans memory for it).
Each cell is ``ok <largest difference>`` or the consumer's error, first line. A dynamic program
runs at its example and at a second size. The runners are bench/consumers.py's.

    PYTHONPATH=src python bench/probes/consumers_audit.py [--only NAME,...] [--consumers et_xnnpack,onnx] [--strict]
"""
from __future__ import annotations

import argparse
import copy
import io
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch.export.graph_signature import InputKind, OutputKind

import graphcap

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import consumers  # bench/consumers.py

torch.set_num_threads(1)
warnings.filterwarnings("ignore")
Dim = torch.export.Dim


# -- the feature programs ---------------------------------------------------------------------

class CondModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: t * 2.0 - 1.0, (x,))


class WhileModel(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        i0 = torch.zeros((), dtype=torch.int64)
        _, out = while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 1.5 + 1.0), (i0, x))
        return out


class ScanModel(torch.nn.Module):
    def forward(self, xs):
        from torch._higher_order_ops.scan import scan

        def step(carry, x):
            nxt = carry + x
            return nxt, nxt * 2
        init = torch.zeros_like(xs[0])
        final, ys = scan(step, init, xs)
        return final, ys


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class DerivedDim(torch.nn.Module):
    def forward(self, x, y):
        # y is twice as long as x along dim 0
        return y[: x.shape[0]] + x, y[x.shape[0]:] * 2


class DerivedPlusOne(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] * y


class SharedDim(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, a, b):
        return self.lin(a) * b


class BufferInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.count.add_(1.0)
        return self.lin(x) + self.count


class InputInPlace(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(2.0)
        return x + y


class KwargsContainers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, pair, *, scale, extra=None):
        a, b = pair
        h = self.lin(x) * scale["s"] + a
        return {"h": h, "parts": [h.sum(-1), b * 2], "t": (extra + 1,)}


class ScalarOutputs(torch.nn.Module):
    def forward(self, x):
        return x * 2, 3, 0.5, None


class NoneOutput(torch.nn.Module):
    def forward(self, x):
        return x.relu(), None


@torch.library.custom_op("consumers_audit::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.tanh(x) * s


@scaled_tanh.register_fake
def _(x, s):
    return torch.empty_like(x)


class CustomOp(torch.nn.Module):
    def forward(self, x):
        return scaled_tanh(x + 1, 3.0)


class LiftedConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.tensor([1.0, -2.0, 3.0, 0.5])  # neither parameter nor buffer

    def forward(self, x):
        return x * self.table + self.table.sum()


class TiedWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.head = torch.nn.Linear(8, 20, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.emb(ids).relu())


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        return self.lin(x) + y, x - y


class Preserved(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Inner()
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        a, b = self.sub(x, x * 0.5)
        return self.out(a * b)


class BatchNormEval(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return self.bn(self.lin(x)).relu()


class AttentionBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, ids):
        h = self.norm(self.emb(ids))
        b, s, _ = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(a.transpose(1, 2).reshape(b, s, 16)) + h


class ConvPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(8, 4, 3)
        self.avg = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.avg(self.conv2(self.pool(self.conv(x).relu()))).flatten(1)


def _case(name, model, args, kwargs=None, spec=None, args2=None, kwargs2=None) -> consumers.Case:
    return consumers.Case(name, model.eval(), args, kwargs or {}, spec, args2, kwargs2)


def _bn_eval() -> torch.nn.Module:
    m = BatchNormEval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    return m


def cases() -> dict[str, tuple[consumers.Case, dict]]:
    """name -> (case, options); options: ``post`` ("decomp" / "saveload"), ``preserve``."""
    torch.manual_seed(0)
    r = torch.randn
    b = Dim("b", min=1, max=16)
    n = Dim("n", min=2, max=16)
    out: dict[str, tuple[consumers.Case, dict]] = {}

    def add(case, **options):
        out[case.name] = (case, options)

    add(_case("cond", CondModel(), (r(3, 4),)))
    add(_case("cond_dynamic", CondModel(), (r(3, 4),), spec=({0: b},), args2=(-r(16, 4).abs(),)))
    add(_case("while_loop", WhileModel(), (r(3, 4),)))
    add(_case("scan", ScanModel(), (r(5, 3),)))
    add(_case("dynamic_batch", MLP(), (r(3, 8),), spec=({0: b},), args2=(r(16, 8),)))
    add(_case("derived_dim_x2", DerivedDim(), (r(3, 4), r(6, 4)), spec=({0: n}, {0: 2 * n}),
              args2=(r(16, 4), r(32, 4))))
    add(_case("derived_dim_plus1", DerivedPlusOne(), (r(4, 4), r(3, 4)), spec=({0: n + 1}, {0: n}),
              args2=(r(17, 4), r(16, 4))))
    add(_case("shared_dim", SharedDim(), (r(3, 8), r(3, 8)), spec=({0: b}, {0: b}), args2=(r(16, 8), r(16, 8))))
    add(_case("buffer_inplace", BufferInPlace(), (r(2, 4),)))
    add(_case("input_inplace", InputInPlace(), (r(2, 4), r(2, 4))))
    add(_case("kwargs_containers", KwargsContainers(), (r(2, 4), (r(2, 4), r(3))),
              {"scale": {"s": r(1)}, "extra": r(2)}))
    add(_case("scalar_outputs", ScalarOutputs(), (r(2, 3),)))
    add(_case("none_output", NoneOutput(), (r(2, 3),)))
    add(_case("custom_op", CustomOp(), (r(2, 5),)))
    add(_case("lifted_constant", LiftedConstant(), (r(3, 4),)))
    add(_case("tied_weights", TiedWeights(), (torch.randint(0, 20, (2, 5)),)))
    add(_case("after_decompositions", _bn_eval(), (r(4, 6),), spec=({0: b},), args2=(r(16, 6),)), post="decomp")
    add(_case("after_save_load", MLP(), (r(3, 8),), spec=({0: b},), args2=(r(5, 8),)), post="saveload")
    add(_case("preserved_signature", Preserved(), (r(2, 6),)), preserve=("sub",))
    add(_case("batchnorm_eval", _bn_eval(), (r(4, 6),), spec=({0: b},), args2=(r(16, 6),)))
    add(_case("attention_block", AttentionBlock(), (torch.randint(0, 50, (2, 8)),),
              spec=({0: b, 1: Dim("s", min=2, max=32)},), args2=(torch.randint(0, 50, (16, 32)),)))
    add(_case("conv_pool", ConvPool(), (r(2, 3, 16, 16),), spec=({0: b},), args2=(r(16, 3, 16, 16),)))
    return out


# -- exporting, as a user does with each library ---------------------------------------------

STRICT = False  # --strict: both libraries' strict mode

def export(exporter: str, case: consumers.Case, options: dict):
    model = copy.deepcopy(case.model)
    kw = dict(dynamic_shapes=case.dynamic_shapes, strict=STRICT)
    if options.get("preserve"):
        kw["preserve_module_call_signature"] = options["preserve"]
    lib: Any = graphcap if exporter == "graphcap" else torch.export
    ep = lib.export(model, copy.deepcopy(case.args), copy.deepcopy(case.kwargs), **kw)
    if options.get("post") == "decomp":
        ep = ep.run_decompositions()
    elif options.get("post") == "saveload":
        buf = io.BytesIO()
        lib.save(ep, buf)
        buf.seek(0)
        ep = lib.load(buf)
    return ep


def module_check(ep, case: consumers.Case, exporter: str) -> float:
    """The program's own ``module()`` against eager (a baseline for the consumers)."""
    worst = 0.0
    for second in consumers.sizes(case):
        args, kwargs = consumers.inputs_of(case, second)
        got = ep.module()(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        expected = consumers.eager(case, second)
        worst = max(worst, consumers.check("module()", consumers.max_difference(expected, got), 1e-4))
    return worst


def executorch(ep, case: consumers.Case, partitioned: bool) -> float:
    """Lower, emit, run the ``.pte``; a user input the program writes must be written back by the
    ``.pte`` (a ``copy_`` into its placeholder) and comes first among the method's outputs."""
    consumers.require("executorch")
    from executorch.exir import to_edge, to_edge_transform_and_lower
    from executorch.runtime import Runtime
    if partitioned:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    program = edge.to_executorch()
    sig = program.exported_program().graph_signature
    mutated = [s.target for s in sig.output_specs if s.kind == OutputKind.USER_INPUT_MUTATION]
    written = {n.args[0].name for n in program.exported_program().graph.nodes
               if n.op == "call_function" and "copy_" in str(n.target) and n.args[0].op == "placeholder"}
    if set(mutated) - written:
        raise AssertionError(f"the .pte does not write the input(s) {sorted(set(mutated) - written)} back")
    user_inputs = [s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    worst = 0.0
    for second in consumers.sizes(case):
        args, kwargs = copy.deepcopy(consumers.inputs_of(case, second))
        with torch.no_grad():
            out = copy.deepcopy(case.model)(*args, **kwargs)  # writes args / kwargs as the program does
        after = consumers.flat_values((args, kwargs))
        expected = [after[user_inputs.index(t)] for t in mutated] + consumers.flat_values(out)
        got = list(method.execute(consumers.flat_values(copy.deepcopy(consumers.inputs_of(case, second)))))
        worst = max(worst, consumers.check("ExecuTorch", consumers.max_difference(expected, got), 1e-3))
    return worst


def torchao_int8(ep_unused, case: consumers.Case, exporter: str, options: dict) -> float:
    """quantize_ int8 weight-only on the eager model, export, module() and a portable .pte."""
    consumers.require("torchao", "executorch")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    quantized = copy.deepcopy(case.model)
    quantize_(quantized, Int8WeightOnlyConfig())
    qcase = consumers.Case(case.name, quantized, case.args, case.kwargs, case.dynamic_shapes, case.args2, case.kwargs2)
    ep = export(exporter, qcase, options)
    worst = module_check(ep, qcase, exporter)
    return max(worst, executorch(ep, qcase, partitioned=False))


def torchao_aoti(ep_unused, case: consumers.Case, exporter: str, options: dict) -> float:
    """quantize_ int8 weight-only on the eager model, export, AOTInductor."""
    consumers.require("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    quantized = copy.deepcopy(case.model)
    quantize_(quantized, Int8WeightOnlyConfig())
    qcase = consumers.Case(case.name, quantized, case.args, case.kwargs, case.dynamic_shapes, case.args2, case.kwargs2)
    return consumers.aoti(export(exporter, qcase, options), qcase, exporter)


def aoti_inputs(ep, case: consumers.Case, exporter: str, options: dict) -> float:
    """AOTInductor's package run on the user's tensors: an input the program writes is written."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        runner = torch._inductor.aoti_load_package(
            torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2")))
        args, kwargs = copy.deepcopy((case.args, case.kwargs))
        got = runner(*args, **kwargs)
        ea, ek = copy.deepcopy((case.args, case.kwargs))
        with torch.no_grad():
            want = copy.deepcopy(case.model)(*ea, **ek)
        return max(consumers.check("AOTInductor", consumers.max_difference(want, got), 1e-4),
                   consumers.check("AOTInductor inputs", consumers.max_difference((ea, ek), (args, kwargs)), 1e-4))


CONSUMERS: dict[str, Callable] = {
    "module": lambda ep, case, exporter, options: module_check(ep, case, exporter),
    "et_xnnpack": lambda ep, case, exporter, options: executorch(ep, case, partitioned=True),
    "et_portable": lambda ep, case, exporter, options: executorch(ep, case, partitioned=False),
    "onnx": lambda ep, case, exporter, options: consumers.onnx(ep, case, exporter),
    "aoti": lambda ep, case, exporter, options: consumers.aoti(ep, case, exporter),
    "torchao": torchao_int8,
    "torchao_aoti": torchao_aoti,
    "aoti_inputs": aoti_inputs,
}
# AOTInductor compiles for minutes on this machine: a few programs only
AOTI_CASES = {"cond", "dynamic_batch", "buffer_inplace", "kwargs_containers", "custom_op", "attention_block"}
TORCHAO_CASES = {"dynamic_batch", "tied_weights", "attention_block", "after_save_load", "preserved_signature"}


def cell(consumer: str, ep, case, exporter: str, options: dict, trace: bool) -> str:
    try:
        diff = CONSUMERS[consumer](copy.deepcopy(ep) if consumer != "torchao" else None, case, exporter, options)
    except consumers.Skip as e:
        return f"skip ({e})"
    except Exception as e:
        if trace:
            traceback.print_exc()
        return f"FAIL {consumers.first_line(e)}"
    return f"ok {diff:.1e}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--consumers", default="module,et_xnnpack,et_portable,onnx,aoti,torchao")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--strict", action="store_true")
    a = parser.parse_args(argv)
    global STRICT
    STRICT = a.strict
    every = cases()
    names = [s for s in a.only.split(",") if s] or list(every)
    wanted = a.consumers.split(",")
    for name in names:
        case, options = every[name]
        programs = {}
        for exporter in ("torch", "graphcap"):
            try:
                programs[exporter] = export(exporter, case, options)
            except Exception as e:
                if a.trace:
                    traceback.print_exc()
                programs[exporter] = e
        for consumer in wanted:
            if consumer == "aoti" and name not in AOTI_CASES and a.only == "":
                continue
            if consumer == "torchao" and name not in TORCHAO_CASES and a.only == "":
                continue
            row = []
            for exporter in ("graphcap", "torch"):
                ep = programs[exporter]
                if isinstance(ep, Exception):
                    row.append(f"FAIL export: {consumers.first_line(ep)}")
                else:
                    row.append(cell(consumer, ep, case, exporter, options, a.trace))
            flag = "" if row[0].split()[0] == row[1].split()[0] else "  <<< DIFFERS"
            print(f"{name:22s} {consumer:12s} graphcap: {row[0]:60.60s} | torch: {row[1]:60.60s}{flag}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
