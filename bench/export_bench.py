"""graphcap.export against torch.export.export on the public model zoo.

For each selected zoo model, in one process and on the same model object and
inputs, both exporters run non-strict with static shapes:

* time: one warm-up export each (torch first, see EXPORTERS), then three timed
  exports each, interleaved (torch, graphcap, torch, ...) so that drift on a
  shared machine hits both alike; the median of wall and of CPU time is
  reported;
* memory: one more export each under ``tracemalloc`` (untimed, as tracing
  slows Python down), reporting the peak of memory allocated during the call
  above what was allocated before it (see bench/README.md for why);
* nodes: the number of nodes of each exported program, subgraphs included
  (and of operator nodes).

The table shows graphcap/torch ratios per model and their medians; ``--json``
writes the raw figures. ``--profile N`` instead profiles graphcap's export of
each selected model with cProfile and prints the top N functions.

    .venv/bin/python bench/export_bench.py                      # whole zoo
    .venv/bin/python bench/export_bench.py --models tv_resnet18,hf_bert --json out.json
    .venv/bin/python bench/export_bench.py --models hf_llama --profile 25
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import platform
import pstats
import statistics
import sys
import tracemalloc
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import harness  # the shared timing harness; also puts ../shared/zoo on the path
import torch
from harness import GOAL_RATIO, REPEATS
from harness import describe as _describe

import graphcap


@dataclass
class Figures:
    """One exporter on one model. ``error`` is set when the export failed."""

    times_s: list[float] = field(default_factory=list)  # wall clock
    cpu_times_s: list[float] = field(default_factory=list)  # this process's CPU time
    peak_alloc_mb: Optional[float] = None
    rss_peak_mb: Optional[float] = None  # largest resident-set rise in a timed run (Linux)
    nodes: Optional[int] = None
    op_nodes: Optional[int] = None
    error: Optional[str] = None

    @property
    def time_s(self) -> Optional[float]:
        return statistics.median(self.times_s) if self.times_s else None

    @property
    def cpu_s(self) -> Optional[float]:
        return statistics.median(self.cpu_times_s) if self.cpu_times_s else None


@dataclass
class Row:
    model: str
    graphcap: Figures
    torch: Figures

    def ratio(self, attr: str) -> Optional[float]:
        a, b = getattr(self.graphcap, attr), getattr(self.torch, attr)
        if a is None or b is None or self.graphcap.error or self.torch.error or not b:
            return None
        return a / b


def _graphcap_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("graphcap")
    except PackageNotFoundError:
        return "unknown"


def _graphcap_export(model, args, kwargs):
    return graphcap.export(model, args, kwargs)


def _torch_export(model, args, kwargs):
    return torch.export.export(model, args, kwargs, strict=False)


# torch first: graphcap registers the unknown output classes it flattens (a transformers
# DynamicCache) in torch's global pytree registry, after which torch.export would accept
# them too. Warming torch up first makes torch's figures those of torch alone.
EXPORTERS: dict[str, Callable[..., Any]] = {"torch": _torch_export, "graphcap": _graphcap_export}


def _proc_status_mb(key: str) -> Optional[float]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_rss_peak() -> bool:
    """Reset the kernel's resident-set high-water mark (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Optional[float], Any]:
    """Wall and CPU time of ``fn()`` (harness.timed), and how far the resident set rose above its level before."""
    can_peak = _reset_rss_peak()
    rss0 = _proc_status_mb("VmRSS")
    elapsed, cpu, out = harness.timed(fn, keep=True)
    hwm = _proc_status_mb("VmHWM") if can_peak else None
    return elapsed, cpu, (hwm - rss0 if hwm is not None and rss0 is not None else None), out


def _peak_alloc_mb(fn: Callable[[], Any]) -> float:
    """Peak Python-heap allocation during ``fn()`` above the level before it, in MiB."""
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return (peak - base) / 2**20


def _count_nodes(ep) -> tuple[int, int]:
    """Nodes of the program, subgraphs (control flow, grad regions) included: (all, call_function)."""
    nodes = [n for gm in ep.graph_module.modules() if isinstance(gm, torch.fx.GraphModule)
             for n in gm.graph.nodes]
    return len(nodes), sum(1 for n in nodes if n.op == "call_function")


def bench_model(name: str, builder: Callable[[], Any], repeats: int = REPEATS,
                memory: bool = True) -> Row:
    built = builder()
    model, args, kwargs = built.model, built.args, built.kwargs
    figures = {k: Figures() for k in EXPORTERS}
    calls = {k: (lambda f=f: f(model, args, kwargs)) for k, f in EXPORTERS.items()}

    for key, call in calls.items():  # warm-up; also counts the nodes and finds failures
        try:
            figures[key].nodes, figures[key].op_nodes = _count_nodes(call())
        except Exception as e:  # a failing exporter is a result, not a crash
            figures[key].error = _describe(e)
    live = [k for k in calls if figures[k].error is None]
    for _ in range(repeats):
        for key in live:
            t, cpu, rss, ep = _timed(calls[key])
            figures[key].times_s.append(t)
            figures[key].cpu_times_s.append(cpu)
            if rss is not None:
                figures[key].rss_peak_mb = max(rss, figures[key].rss_peak_mb or 0.0)
            del ep
    if memory:
        for key in live:
            figures[key].peak_alloc_mb = _peak_alloc_mb(calls[key])
    return Row(name, figures["graphcap"], figures["torch"])


# -- output -------------------------------------------------------------------

def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio_cell(r: Optional[float], goal: Optional[float] = None) -> str:
    if r is None:
        return "-"
    text = f"{r:.2f}x"
    if goal is None:
        return text
    return f"[green]{text}[/]" if r <= goal else f"[red]{text}[/]"


def medians(rows: list[Row]) -> dict[str, Optional[float]]:
    out = {}
    for attr in ("time_s", "cpu_s", "peak_alloc_mb", "nodes"):
        ratios = [r.ratio(attr) for r in rows if r.ratio(attr) is not None]
        out[attr] = statistics.median(ratios) if ratios else None
    return out


def print_table(rows: list[Row], meta: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"graphcap.export vs torch.export.export (non-strict, static shapes) — "
                        f"median of {meta['repeats']} after a warm-up",
                  caption="gc = graphcap. time, cpu, mem, nodes: graphcap/torch ratios; goal: time ≤ 0.5x "
                          "(green). time: wall clock; cpu: process CPU time. MiB: tracemalloc peak of one export; "
                          "RSS+: largest resident-set rise "
                          "in a timed export (bench/README.md says why).")
    table.add_column("model", no_wrap=True)
    table.add_column("gc s", justify="right")
    table.add_column("torch s", justify="right")
    table.add_column("time", justify="right")
    table.add_column("cpu", justify="right")
    table.add_column("gc MiB", justify="right")
    table.add_column("torch MiB", justify="right")
    table.add_column("mem", justify="right")
    table.add_column("RSS+ gc/torch", justify="right", no_wrap=True)
    table.add_column("nodes gc/torch", justify="right", no_wrap=True)
    table.add_column("ops gc/torch", justify="right", no_wrap=True)
    for r in rows:
        g, t = r.graphcap, r.torch
        table.add_row(
            r.model,
            "[red]failed[/]" if g.error else _fmt(g.time_s, ".3f"),
            "[red]failed[/]" if t.error else _fmt(t.time_s, ".3f"),
            _ratio_cell(r.ratio("time_s"), GOAL_RATIO),
            _ratio_cell(r.ratio("cpu_s"), GOAL_RATIO),
            _fmt(g.peak_alloc_mb, ".1f"), _fmt(t.peak_alloc_mb, ".1f"),
            _ratio_cell(r.ratio("peak_alloc_mb")),
            f"{_fmt(g.rss_peak_mb, '.1f')}/{_fmt(t.rss_peak_mb, '.1f')}",
            f"{_fmt(g.nodes, 'd')}/{_fmt(t.nodes, 'd')}",
            f"{_fmt(g.op_nodes, 'd')}/{_fmt(t.op_nodes, 'd')}",
        )
    med = medians(rows)
    table.add_section()
    table.add_row("[bold]median ratio[/]", "", "", _ratio_cell(med["time_s"], GOAL_RATIO),
                  _ratio_cell(med["cpu_s"], GOAL_RATIO), "", "",
                  _ratio_cell(med["peak_alloc_mb"]), "", _ratio_cell(med["nodes"]), "")
    console = Console(width=max(150, Console().width))
    console.print(table)
    for r in rows:
        for key, f in (("graphcap", r.graphcap), ("torch", r.torch)):
            if f.error:
                console.print(f"  {r.model}: {key} failed: {f.error}", markup=False)
    compared = [r for r in rows if r.ratio("time_s") is not None]
    if compared:
        verdict = "meets" if med["time_s"] <= GOAL_RATIO else "does not meet"
        within = sum(1 for r in compared if r.ratio("time_s") <= GOAL_RATIO)
        console.print(f"Median time ratio {med['time_s']:.2f}x (CPU {med['cpu_s']:.2f}x) over "
                      f"{len(compared)} models both export: graphcap {verdict} the ≤ {GOAL_RATIO}x "
                      f"goal; {within}/{len(compared)} models are within it.")


def write_json(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    data = {
        "meta": meta,
        "median_ratios": medians(rows),
        "models": [
            {"model": r.model,
             "graphcap": {**asdict(r.graphcap), "time_s": r.graphcap.time_s, "cpu_s": r.graphcap.cpu_s},
             "torch": {**asdict(r.torch), "time_s": r.torch.time_s, "cpu_s": r.torch.cpu_s},
             "ratios": {a: r.ratio(a) for a in ("time_s", "cpu_s", "peak_alloc_mb", "nodes")}}
            for r in rows],
    }
    path.write_text(json.dumps(data, indent=2))


def profile_model(name: str, builder: Callable[[], Any], top: int, dump: Optional[Path]) -> None:
    """cProfile of graphcap's export of one model (after a warm-up), top functions printed."""
    built = builder()
    _graphcap_export(built.model, built.args, built.kwargs)
    prof = cProfile.Profile()
    gc.collect()
    prof.enable()
    _graphcap_export(built.model, built.args, built.kwargs)
    prof.disable()
    if dump is not None:
        prof.dump_stats(dump / f"{name}.prof")
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(order).print_stats(top)
        print(f"===== {name}: graphcap.export, top {top} by {order} =====")
        print(out.getvalue())


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None,
                        help="comma-separated zoo names, fnmatch globs, substrings or families "
                             "(as zoo.select); default: all")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures to this file")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed exports per exporter")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc export")
    parser.add_argument("--profile", type=int, metavar="N", default=0,
                        help="profile graphcap's export with cProfile and print the top N functions "
                             "instead of benchmarking")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="with --profile, also write <model>.prof files here")
    opts = parser.parse_args(argv)

    import zoo  # lives in ../shared/zoo
    cases = zoo.select(opts.models)
    if not cases:
        parser.error(f"--models {opts.models!r} selects no zoo model; names: {', '.join(zoo.REGISTRY)}")
    torch.set_num_threads(1)  # exports do no real compute; keep a shared machine quiet
    warnings.simplefilter("ignore")

    if opts.profile:
        if opts.profile_dir is not None:
            opts.profile_dir.mkdir(parents=True, exist_ok=True)
        for case in cases:
            profile_model(case.name, case.builder, opts.profile, opts.profile_dir)
        return 0

    meta = {"torch": torch.__version__, "graphcap": _graphcap_version(),
            "python": platform.python_version(), "machine": platform.machine(),
            "repeats": opts.repeats, "memory": "tracemalloc peak above the level before the call (MiB)"}
    rows = []
    for case in cases:
        print(f"... {case.name}", file=sys.stderr, flush=True)
        rows.append(bench_model(case.name, case.builder, opts.repeats, memory=not opts.no_memory))
    print_table(rows, meta)
    if opts.json is not None:
        write_json(opts.json, rows, meta)
        print(f"raw figures written to {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
