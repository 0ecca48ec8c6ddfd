"""The consumer matrix: graphcap's program and torch.export's, handed as is to the tools that take them.

For each selected zoo model, both exporters make a program (static, or with the
model's dynamic spec for ``--dynamic``); each program goes, without any
conversion call, to every consumer:

* ``et_xnnpack``: ExecuTorch ``to_edge_transform_and_lower`` with the XNNPACK
  partitioner, ``.to_executorch()``, the ``.pte`` buffer loaded and run in
  ``executorch.runtime.Runtime``, compared with eager (and at the model's second
  input size when the program is dynamic);
* ``et_portable``: the same through ``to_edge`` (no partitioner, portable kernels);
* ``pt2e``: torchao's ``prepare_pt2e`` / ``convert_pt2e`` on ``ep.module()`` with
  ExecuTorch's ``XNNPACKQuantizer``, calibrated on the example inputs, exported
  again by the same exporter, lowered with XNNPACK and run (compared with the
  quantized module, loosely: int8);
* ``onnx``: ``torch.onnx.export(ep)`` run in onnxruntime; a dynamic program must
  keep its dynamic axes (a symbolic ONNX dimension) and is run at the second size;
* ``aoti``: ``torch._inductor.aoti_compile_and_package(ep)`` then
  ``aoti_load_package`` and a run (a second size when dynamic);
* ``coreml``: ``coremltools.convert(ep.run_decompositions({}))`` (coremltools takes
  the ATEN dialect); on Linux it converts but cannot run, so a conversion counts.

A cell is ``ok`` (with the largest difference from eager), or the consumer's own
error, first line. ``make consumers`` runs it and writes bench/CONSUMERS.md.

    .venv/bin/python bench/consumers.py                           # whole zoo, static
    .venv/bin/python bench/consumers.py --models tv_resnet18,hf_bert --consumers onnx,et_xnnpack
    .venv/bin/python bench/consumers.py --dynamic --out bench/CONSUMERS_dynamic.md

The functions ``CONSUMERS[name](ep, case, exporter)`` are what tests/e2e/test_consumers.py
calls too; each raises the consumer's error, or ``Skip`` when the consumer is not installed.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # puts ../shared/zoo on the path

EXPORTERS = ("graphcap", "torch")


class Skip(Exception):
    """The consumer cannot be tried here (its package is not installed, or the platform lacks it)."""


def require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"{', '.join(missing)} not installed (the 'consumers' extra pins them on torch 2.14)")


@dataclass
class Case:
    """One model to hand over: the model, its example and second inputs, and its dynamic spec."""

    name: str
    model: torch.nn.Module
    args: tuple
    kwargs: dict
    dynamic_shapes: Any = None
    args2: Optional[tuple] = None
    kwargs2: Optional[dict] = None

    @property
    def dynamic(self) -> bool:
        return self.dynamic_shapes is not None


def zoo_case(name: str, dynamic: bool = False) -> Case:
    import zoo
    with torch.random.fork_rng():
        torch.manual_seed(0)
        built = zoo.REGISTRY[name].builder()
    return Case(name, built.model.eval(), tuple(built.args), dict(built.kwargs or {}),
                built.dynamic_shapes if dynamic else None, built.args2, built.kwargs2)


def export_with(exporter: str, model: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None,
                dynamic_shapes: Any = None):
    """The program of ``exporter`` ("graphcap" or "torch") for the model, as a user gets it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "graphcap":
            import graphcap
            return graphcap.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
        return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)


def export_case(exporter: str, case: Case):
    return export_with(exporter, copy.deepcopy(case.model), case.args, case.kwargs, case.dynamic_shapes)


# -- comparing ------------------------------------------------------------------

def flat_values(value: Any) -> list:
    """The leaves of a model's inputs or outputs, as the programs flatten them (graphcap's
    flattening also opens classes such as transformers' caches and dataclass outputs)."""
    from graphcap.auto_flatten import flatten
    return list(flatten(value)[0])


def max_difference(expected: Any, got: Any) -> float:
    want = [t for t in flat_values(expected) if isinstance(t, torch.Tensor)]
    # a consumer's flat outputs (ExecuTorch, onnxruntime) or a rebuilt structure (AOTInductor's
    # package rebuilds the program's output classes): the leaves either way
    have = [torch.as_tensor(t) for t in flat_values(got) if isinstance(t, torch.Tensor) or hasattr(t, "shape")]
    if len(want) != len(have):
        raise AssertionError(f"{len(have)} tensor outputs, eager has {len(want)}")
    worst = 0.0
    for w, h in zip(want, have):
        if tuple(w.shape) != tuple(h.shape):
            raise AssertionError(f"output shape {tuple(h.shape)}, eager {tuple(w.shape)}")
        if w.numel():
            worst = max(worst, float((w.detach().double() - h.detach().double()).abs().max()))
    return worst


def eager(case: Case, second: bool = False):
    args, kwargs = (case.args2, case.kwargs2 or {}) if second else (case.args, case.kwargs)
    with torch.no_grad():
        return copy.deepcopy(case.model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))


def inputs_of(case: Case, second: bool = False) -> tuple[tuple, dict]:
    return (case.args2, case.kwargs2 or {}) if second else (case.args, case.kwargs)


def sizes(case: Case) -> list[bool]:
    """Which inputs to run: the example, and the second size when the program is dynamic."""
    return [False, True] if case.dynamic and case.args2 is not None else [False]


def check(name: str, diff: float, tol: float) -> float:
    if not diff <= tol:  # NaN fails too
        raise AssertionError(f"{name}: largest difference from eager {diff:.3g} > {tol:g}")
    return diff


# -- the consumers ---------------------------------------------------------------

def _run_pte(buffer: bytes, case: Case, second: bool) -> list:
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(buffer)
    method = program.load_method("forward")
    args, kwargs = inputs_of(case, second)
    # every flat input, non-tensor ones too: the method takes a specialized float or int as
    # an input of its own (an EValue), as the program's signature lists it
    return list(method.execute(flat_values((args, kwargs))))


def _lower_and_run(ep, case: Case, partitioned: bool, reference: Optional[Callable[[bool], Any]] = None,
                   tol: float = 1e-3) -> float:
    from executorch.exir import to_edge, to_edge_transform_and_lower
    if partitioned:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    buffer = edge.to_executorch().buffer
    with tempfile.TemporaryDirectory() as d:  # written and read back, as a deployment does
        path = Path(d) / "model.pte"
        path.write_bytes(buffer)
        buffer = path.read_bytes()
    worst = 0.0
    for second in sizes(case):
        expected = reference(second) if reference else eager(case, second)
        worst = max(worst, check("ExecuTorch", max_difference(expected, _run_pte(buffer, case, second)), tol))
    return worst


def et_xnnpack(ep, case: Case, exporter: str) -> float:
    require("executorch")
    return _lower_and_run(ep, case, partitioned=True)


def et_portable(ep, case: Case, exporter: str) -> float:
    require("executorch")
    return _lower_and_run(ep, case, partitioned=False)


def pt2e(ep, case: Case, exporter: str) -> float:
    """pt2e int8 quantization of the program's module, exported again and lowered to XNNPACK."""
    require("executorch", "torchao")
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(ep.module(), quantizer)
    with torch.no_grad():
        prepared(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
    quantized = convert_pt2e(prepared)
    if not any("quantize_per_tensor" in str(n.target) for n in quantized.graph.nodes):
        raise AssertionError("the quantizer annotated nothing: no quantize node in the converted module")
    again = export_with(exporter, quantized, case.args, case.kwargs, case.dynamic_shapes)

    def reference(second: bool):
        args, kwargs = inputs_of(case, second)
        with torch.no_grad():
            return quantized(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    return _lower_and_run(again, case, partitioned=True, reference=reference, tol=5e-2)


def onnx(ep, case: Case, exporter: str) -> float:
    require("onnx", "onnxruntime", "onnxscript")
    import onnxruntime
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(ep, verbose=False)
    model = program.model_proto
    if case.dynamic:
        symbolic = [d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param]
        if not symbolic:
            raise AssertionError("the ONNX model lost the program's dynamic axes (every input dimension is fixed)")
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    worst = 0.0
    for second in sizes(case):
        args, kwargs = inputs_of(case, second)
        leaves = [x for x in flat_values((args, kwargs)) if isinstance(x, torch.Tensor)]
        if len(leaves) != len(names):
            raise AssertionError(f"the ONNX model takes {len(names)} inputs, the program's tensors are {len(leaves)}")
        got = session.run(None, {n: t.numpy() for n, t in zip(names, leaves)})
        worst = max(worst, check("onnxruntime", max_difference(eager(case, second),
                                                                 [torch.from_numpy(g) for g in got]), 1e-3))
    return worst


def aoti(ep, case: Case, exporter: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))
        runner = torch._inductor.aoti_load_package(path)
        worst = 0.0
        for second in sizes(case):
            args, kwargs = inputs_of(case, second)
            got = runner(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            worst = max(worst, check("AOTInductor", max_difference(eager(case, second), got), 1e-3))
    return worst


def coreml(ep, case: Case, exporter: str) -> float:
    """coremltools' conversion (its documented recipe: the ATEN dialect). It only runs models on
    macOS; elsewhere a finished conversion is the result, reported as difference 0.0 when not run."""
    require("coremltools")
    import coremltools as ct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.convert(ep.run_decompositions({}))
    if sys.platform != "darwin":
        return float("nan") if mlmodel is None else 0.0
    spec_inputs = [i.name for i in mlmodel.get_spec().description.input]
    leaves = [x for x in flat_values((case.args, case.kwargs)) if isinstance(x, torch.Tensor)]
    got = mlmodel.predict({n: t.numpy() for n, t in zip(spec_inputs, leaves)})
    return check("coremltools", max_difference(eager(case), [torch.as_tensor(v) for v in got.values()]), 1e-2)


def model_explorer(ep, case: Case, exporter: str) -> float:
    """Model Explorer's PyTorch adapter (``model_explorer.config().add_model_from_pytorch``'s
    conversion, without its server): one graph node per fx node, each operator node with its
    output metadata and its layer (from ``nn_module_stack``). Nothing runs: difference 0.0."""
    require("model_explorer")
    from model_explorer.consts import DEFAULT_SETTINGS
    from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl
    graphs = PytorchExportedProgramAdapterImpl(ep, dict(DEFAULT_SETTINGS)).convert()["graphs"]
    nodes = graphs[0].nodes
    fx_nodes = list(ep.graph_module.graph.nodes)
    if len(nodes) != len(fx_nodes):
        raise AssertionError(f"Model Explorer shows {len(nodes)} nodes, the graph has {len(fx_nodes)}")
    for node, fx_node in zip(nodes, fx_nodes):
        if isinstance(fx_node.meta.get("val"), torch.Tensor) and not node.outputsMetadata:
            raise AssertionError(f"Model Explorer shows no output metadata for {fx_node.name}")
    if not any(node.namespace for node in nodes):
        raise AssertionError("Model Explorer shows no layer for any node (nn_module_stack)")
    return 0.0


CONSUMERS: dict[str, Callable[[Any, Case, str], float]] = {
    "et_xnnpack": et_xnnpack, "et_portable": et_portable, "pt2e": pt2e,
    "onnx": onnx, "aoti": aoti, "coreml": coreml, "model_explorer": model_explorer,
}


# -- the matrix --------------------------------------------------------------------

def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:160]


def run_cell(consumer: str, ep, case: Case, exporter: str) -> str:
    start = time.perf_counter()
    try:
        diff = CONSUMERS[consumer](ep, case, exporter)
    except Skip as e:
        return f"skip ({e})"
    except Exception as e:  # a consumer's failure is a result
        if os.environ.get("GRAPHCAP_CONSUMERS_TRACE"):
            traceback.print_exc()
        return f"FAIL {first_line(e)}"
    note = "converted" if consumer == "coreml" and sys.platform != "darwin" else f"{diff:.1e}"
    return f"ok {note} ({time.perf_counter() - start:.0f}s)"


def matrix(models: list[str], consumers: list[str], dynamic: bool, log=print) -> list[tuple[str, str, str, str]]:
    rows = []
    for name in models:
        case = zoo_case(name, dynamic)
        programs: dict[str, Any] = {}
        # torch.export's first: handing graphcap's program over registers the classes graphcap
        # flattened by attributes with torch's pytree, after which torch.export takes them too
        for exporter in reversed(EXPORTERS):
            try:
                programs[exporter] = export_case(exporter, case)
            except Exception as e:
                programs[exporter] = e
        for exporter in EXPORTERS:
            ep = programs[exporter]
            if isinstance(ep, Exception):
                for consumer in consumers:
                    rows.append((name, consumer, exporter, f"FAIL export: {first_line(ep)}"))
                continue
            for consumer in consumers:
                # a copy each: running torch.export's ep.module() (pt2e) writes a buffer update
                # into the program's own state, which the next consumer would then bake in
                cell = run_cell(consumer, copy.deepcopy(ep), case, exporter)
                rows.append((name, consumer, exporter, cell))
                log(f"{name:28s} {consumer:12s} {exporter:9s} {cell}")
    return rows


def passed(cell: str) -> bool:
    return cell.startswith("ok")


def render(rows, dynamic: bool, consumers: list[str]) -> str:
    header = harness.machine_header()
    lines = [f"# Consumer matrix ({'dynamic' if dynamic else 'static'} shapes)", "",
             "Each program handed as is (no conversion call) to each consumer; cell: graphcap / torch.export.",
             "`ok d`: ran and matched eager within `d` (largest absolute difference); `converted`: coremltools "
             "converted it (it runs models on macOS only); `FAIL`: the consumer's error.", "",
             " · ".join(f"{k}: {v}" for k, v in header.items()), ""]
    models = list(dict.fromkeys(r[0] for r in rows))
    cells = {(m, c, e): cell for m, c, e, cell in rows}
    lines.append("| model | " + " | ".join(consumers) + " |")
    lines.append("|---|" + "---|" * len(consumers))
    for m in models:
        row = []
        for c in consumers:
            g, t = cells.get((m, c, "graphcap"), "-"), cells.get((m, c, "torch"), "-")
            row.append(f"{_short(g)} / {_short(t)}")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    lines.append("")
    for c in consumers:
        tried = [m for m in models if (m, c, "graphcap") in cells or (m, c, "torch") in cells]
        g = sum(passed(cells.get((m, c, "graphcap"), "")) for m in tried)
        t = sum(passed(cells.get((m, c, "torch"), "")) for m in tried)
        lines.append(f"- {c}: graphcap {g}/{len(tried)}, torch.export {t}/{len(tried)}")
    worse = [(m, c) for m in models for c in consumers
             if passed(cells.get((m, c, "torch"), "")) and not passed(cells.get((m, c, "graphcap"), ""))]
    lines.append("")
    lines.append("Where torch.export's program works and graphcap's does not: "
                 + (", ".join(f"{m} × {c}" for m, c in worse) if worse else "none."))
    failures = [(m, c, e, cell) for m, c, e, cell in rows if cell.startswith("FAIL")]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {m} × {c} ({e}): `{cell[5:]}`" for m, c, e, cell in failures]
    return "\n".join(lines) + "\n"


def _short(cell: str) -> str:
    if cell.startswith("ok"):
        return cell.split(" (")[0]
    if cell.startswith("skip"):
        return "skip"
    return "FAIL" if cell.startswith("FAIL") else cell


def _as_json(rows: list) -> str:
    return "[\n" + ",\n".join(json.dumps(list(r)) for r in rows) + "\n]\n"


def _merged(earlier: list, rows: list) -> list:
    """Earlier runs' cells, then this run's; a cell this run has replaces the earlier one."""
    fresh = {r[:3] for r in rows}
    return [r for r in earlier if r[:3] not in fresh] + list(rows)


def _models_named(names: str) -> list:
    """Exact zoo names in the order given; anything else as zoo.select takes it (globs, substrings,
    families); none named: the whole public zoo. Imported here: merging earlier runs needs no zoo."""
    import zoo
    models = list(dict.fromkeys(n for item in names.split(",") if item
                                for n in ([item] if item in zoo.REGISTRY else [c.name for c in zoo.select(item)])))
    return models or list(zoo.REGISTRY)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated zoo names, globs or families, as zoo.select "
                                                     "takes them (default: the whole public zoo)")
    parser.add_argument("--consumers", default=",".join(CONSUMERS), help="comma-separated: " + ", ".join(CONSUMERS))
    parser.add_argument("--dynamic", action="store_true", help="export with each model's dynamic spec")
    parser.add_argument("--out", default=None, help="results file (default bench/CONSUMERS[_dynamic].md); "
                                                    "its cells are also kept in the same name with .json")
    parser.add_argument("--merge", default="", help="comma-separated .json files of earlier runs: their cells "
                                                    "go into the table too (this run's win where both have one)")
    ns = parser.parse_args(argv)
    consumers = [c for c in ns.consumers.split(",") if c]
    out = Path(ns.out or Path(__file__).parent / ("CONSUMERS_dynamic.md" if ns.dynamic else "CONSUMERS.md"))
    earlier_cells: dict = {}  # a later file's cell replaces an earlier file's (a rerun), in the first one's place
    for f in (f for f in ns.merge.split(",") if f):
        for r in json.loads(Path(f).read_text()):
            earlier_cells[tuple(r[:3])] = tuple(r)
    earlier = list(earlier_cells.values())
    rows: list = []
    only_merging = ns.models == "" and earlier  # no model named: no run
    models = [] if only_merging else _models_named(ns.models)
    for name in models:  # the files are rewritten after each model: a long run leaves what it did
        rows += matrix([name], consumers, ns.dynamic)
        out.with_suffix(".json").write_text(_as_json(_merged(earlier, rows)))
        out.write_text(render(_merged(earlier, rows), ns.dynamic, consumers))
    text = render(_merged(earlier, rows), ns.dynamic, consumers)
    out.write_text(text)
    out.with_suffix(".json").write_text(_as_json(_merged(earlier, rows)))
    print(text)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
