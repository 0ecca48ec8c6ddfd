"""graphcap's run_decompositions against torch.export's on the public model zoo.

For each selected zoo model, in one process: the model is exported once by
each system (graphcap.export, torch.export.export, non-strict; static shapes, or
the zoo's dynamic shapes with ``--dynamic``),
then each program is decomposed to core ATen with the default table — one
warm-up run each, then three timed runs each, interleaved (graphcap, torch,
graphcap, ...) so drift on a shared machine hits both alike. The median is
reported, with the graphcap/torch ratio per model and the median ratio
(the project's goal: at most 0.5x). Node counts of both decomposed graphs are
shown as a sanity check that both did the same work.

    .venv/bin/python bench/decomp_bench.py                      # whole zoo
    .venv/bin/python bench/decomp_bench.py --models tv_resnet18,timm_vit_tiny_patch16_224
    .venv/bin/python bench/decomp_bench.py --models tv_resnet18 --profile 30
    .venv/bin/python bench/decomp_bench.py --dynamic --models tv_densenet121 --profile 30 --profile-torch
    .venv/bin/python bench/decomp_bench.py --json out.json
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import statistics
import sys
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
    times_s: list[float] = field(default_factory=list)
    op_nodes: Optional[int] = None
    error: Optional[str] = None

    @property
    def time_s(self) -> Optional[float]:
        return statistics.median(self.times_s) if self.times_s else None


@dataclass
class Row:
    model: str
    graphcap: Figures
    torch: Figures

    @property
    def ratio(self) -> Optional[float]:
        a, b = self.graphcap.time_s, self.torch.time_s
        if a is None or b is None or not b:
            return None
        return a / b


def _op_nodes(ep) -> int:
    return sum(1 for n in ep.graph.nodes if n.op == "call_function")


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    wall, _, out = harness.timed(fn, keep=True)
    return wall, out


def bench_model(name: str, builder: Callable[[], Any], repeats: int = REPEATS, dynamic: bool = False) -> Row:
    built = builder()
    model, args, kwargs = built.model, built.args, built.kwargs
    shapes = built.dynamic_shapes if dynamic else None
    figures = {"graphcap": Figures(), "torch": Figures()}
    calls: dict[str, Callable[[], Any]] = {}
    for key, export in (("graphcap", graphcap.export),
                        ("torch", lambda m, a, k, dynamic_shapes: torch.export.export(
                            m, a, k, dynamic_shapes=dynamic_shapes, strict=False))):
        try:
            ep = export(model, args, kwargs, dynamic_shapes=shapes)
        except Exception as e:  # a failing exporter is a result, not a crash
            figures[key].error = "export: " + _describe(e)
            continue
        calls[key] = lambda ep=ep: ep.run_decompositions()
    for key, call in list(calls.items()):  # warm-up; counts nodes and finds failures
        try:
            figures[key].op_nodes = _op_nodes(call())
        except Exception as e:
            figures[key].error = _describe(e)
            del calls[key]
    for _ in range(repeats):
        for key, call in calls.items():
            t, ep = _timed(call)
            figures[key].times_s.append(t)
            del ep
    return Row(name, figures["graphcap"], figures["torch"])


def median_ratio(rows: list[Row]) -> Optional[float]:
    ratios = [r.ratio for r in rows if r.ratio is not None]
    return statistics.median(ratios) if ratios else None


def print_table(rows: list[Row]) -> None:
    header = f"{'model':34s} {'graphcap s':>10s} {'torch s':>9s} {'ratio':>7s} {'ops gc':>7s} {'ops torch':>9s}"
    print(header)
    print("-" * len(header))
    for r in rows:
        g, t = r.graphcap, r.torch
        def fmt(v):
            return "-" if v is None else f"{v:.3f}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        print(f"{r.model:34s} {fmt(g.time_s):>10s} {fmt(t.time_s):>9s} {ratio:>7s} "
              f"{g.op_nodes if g.op_nodes is not None else '-':>7} {t.op_nodes if t.op_nodes is not None else '-':>9}")
        for key, f in (("graphcap", g), ("torch", t)):
            if f.error:
                print(f"    {key} failed: {f.error}")
    m = median_ratio(rows)
    verdict = "" if m is None else ("  (goal <= 0.5x: met)" if m <= GOAL_RATIO else "  (goal <= 0.5x: NOT met)")
    print(f"\nmedian ratio graphcap/torch: {'-' if m is None else f'{m:.2f}x'}{verdict}")


def profile(name: str, builder: Callable[[], Any], top: int, dynamic: bool = False,
            exporter: str = "graphcap") -> None:
    built = builder()
    shapes = built.dynamic_shapes if dynamic else None
    if exporter == "torch":
        ep = torch.export.export(built.model, built.args, built.kwargs, dynamic_shapes=shapes, strict=False)
    else:
        ep = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=shapes)
    ep.run_decompositions()  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    ep.run_decompositions()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    print(f"== {name} ({exporter}{', dynamic' if dynamic else ''})\n{out.getvalue()}")


def main(argv: Optional[list[str]] = None) -> int:
    import zoo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated names/globs (default: whole zoo)")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--json", default=None, help="write raw figures here")
    parser.add_argument("--profile", type=int, default=0, help="profile graphcap only; print top N")
    parser.add_argument("--profile-torch", action="store_true", help="with --profile: torch.export's program too")
    parser.add_argument("--dynamic", action="store_true", help="export with the zoo's dynamic shapes")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    cases = zoo.select(opts.models)
    if opts.profile:
        for case in cases:
            profile(case.name, case.builder, opts.profile, opts.dynamic)
            if opts.profile_torch:
                profile(case.name, case.builder, opts.profile, opts.dynamic, "torch")
        return 0
    rows = []
    for case in cases:
        row = bench_model(case.name, case.builder, opts.repeats, opts.dynamic)
        rows.append(row)
        print(f"  {case.name}: graphcap {row.graphcap.time_s} torch {row.torch.time_s}", file=sys.stderr)
    print(f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
          f"{'dynamic' if opts.dynamic else 'static'} shapes")
    print_table(rows)
    if opts.json:
        Path(opts.json).write_text(json.dumps(
            {"rows": [{"model": r.model, "graphcap": asdict(r.graphcap), "torch": asdict(r.torch),
                       "ratio": r.ratio} for r in rows], "median_ratio": median_ratio(rows)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
