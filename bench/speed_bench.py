"""Export speed against torch.export on the public zoo: cold, warm and run_decompositions.

The table ``make bench`` prints first: rows static / dynamic shapes, columns
cold / warm / run_decompositions, each cell the median over the zoo of the
graphcap/torch time ratio (wall clock, and CPU time in brackets); then the
warm export against a forward pass on the meta device (the floor for any
exporter that runs the model's Python) for resnet18 and GPT-2.

How: every model and shape mode runs in two fresh processes (``--worker``),
one where graphcap exports first and one where torch does; which of the two
processes runs first alternates from model to model. In each process:

* cold: the first exporter's first export, ``import graphcap`` included for
  graphcap (``torch.export`` is imported by ``import torch``), after the model
  is built, with no garbage collection forced first: what a user's script sees
  (a full collection that falls due during the export is part of its time).
  Each exporter's cold time comes from the process where it went first. graphcap is byte-compiled first, as an installed
  copy is (``--no-bytecode`` skips that);
* warm: then both exporters, warmed up, timed interleaved (harness.py);
* run_decompositions: each exporter's program decomposed, timed interleaved;
* meta forward (resnet18, GPT-2): the model and inputs copied to the meta
  device, the forward pass timed as the exports are.

Warm and decomposition samples of both processes are pooled. ``--results``
appends the tables, with date, versions and machine, to a markdown file
(bench/RESULTS.md); ``--json`` writes every raw figure.

    .venv/bin/python bench/speed_bench.py                          # whole zoo
    .venv/bin/python bench/speed_bench.py --models tv_resnet18,hf_gpt2 --modes static
    .venv/bin/python bench/speed_bench.py --results bench/RESULTS.md --label "after"
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import harness  # also puts ../shared/zoo on the path
from harness import GOAL_RATIO, REPEATS, Timing, fmt_ratio, median, ratio, timed

EXPORTERS = ("graphcap", "torch")
META_MODELS = ("tv_resnet18", "hf_gpt2")
WORKER_TIMEOUT_S = 900


# -- worker: one model, one shape mode, one fresh process ------------------------------------

def _exporter(key: str):
    import torch
    if key == "graphcap":
        import graphcap  # timed in the cold export: a user's script pays for it
        return graphcap.export
    return lambda *a, **k: torch.export.export(*a, strict=False, **k)


def run_worker(name: str, mode: str, first: str, repeats: int, decompose: bool = True) -> dict[str, Any]:
    import torch
    import zoo
    torch.set_num_threads(1)  # exports compute nothing; keep a shared machine quiet
    warnings.simplefilter("ignore")
    built = zoo.REGISTRY[name].builder()
    model, args, kwargs = built.model, built.args, built.kwargs
    shapes = built.dynamic_shapes if mode == "dynamic" else None
    if mode == "dynamic" and shapes is None:
        return {"model": name, "mode": mode, "first": first, "skip": "no dynamic shapes"}
    order = (first,) + tuple(k for k in EXPORTERS if k != first)
    out: dict[str, Any] = {"model": name, "mode": mode, "first": first, "cold": {}, "errors": {}}
    programs = {}
    for key in order:  # the first is cold; the second only warms up here
        try:
            # the first export as a user's script meets it: no collection beforehand (harness.timed)
            wall, cpu, ep = timed(lambda key=key: _exporter(key)(model, args, kwargs, dynamic_shapes=shapes), keep=True,
                                  collect_first=key != first)
        except Exception as e:  # a failure is a result
            out["errors"][key] = harness.describe(e)
            continue
        programs[key] = ep
        if key == first:
            out["cold"][key] = {"wall": wall, "cpu": cpu}
    # each lambda binds its exporter now (B008's call in a default is the point)
    exports = {k: (lambda f=_exporter(k): f(model, args, kwargs, dynamic_shapes=shapes)) for k in programs}  # noqa: B008
    warm = harness.interleaved(exports, repeats)
    decomps = harness.interleaved({k: ep.run_decompositions for k, ep in programs.items()}, repeats) \
        if decompose else {}
    out["warm"] = {k: t.__dict__ for k, t in warm.items()}
    out["decomp"] = {k: t.__dict__ for k, t in decomps.items()}
    if name in META_MODELS and mode == "static":
        out["meta_forward"], out["meta_note"] = _meta_forward(model, args, kwargs, repeats)
    return out


def _meta_forward(model, args, kwargs, repeats: int) -> tuple[dict, str]:
    """The forward pass on the meta device, timed like the exports.

    It runs as the exporters run it: with ``torch.compiler.is_exporting()``
    answering True, so that libraries take the same export-friendly paths
    (transformers skips its ``.item()`` mask checks, which the meta device
    cannot run).
    """
    from graphcap.torch_private.dynamo import exporting_flags_set

    meta_model = copy.deepcopy(model).to("meta")
    meta_args, meta_kwargs = harness.to_meta(args), harness.to_meta(kwargs)

    def forward():
        with exporting_flags_set():
            return meta_model(*meta_args, **meta_kwargs)
    timing = harness.interleaved({"meta": forward}, repeats)["meta"]
    return timing.__dict__, ""


# -- parent: spawn the workers, gather, print ----------------------------------------------

def _spawn(name: str, mode: str, first: str, repeats: int, decompose: bool = True) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--mode", mode,
           "--first", first, "--repeats", str(repeats)] + ([] if decompose else ["--no-decomp"])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S,
                              env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        return {"model": name, "mode": mode, "first": first, "crash": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": name, "mode": mode, "first": first, "crash": tail[:300]}
    return json.loads(lines[-1])


def _compile_graphcap() -> None:
    """Byte-compile graphcap's package, as ``pip install`` does (torch's wheel ships compiled).

    Without it, a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (or a fresh one)
    compiles graphcap's ~150 modules from source in every cold process, which a
    user's installed copy never does, and torch's side is not charged the same.
    """
    import compileall
    import importlib.util
    spec = importlib.util.find_spec("graphcap")
    for location in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(location, quiet=1)


def _pool(runs: list[dict], section: str, key: str) -> Timing:
    pooled = Timing()
    for run in runs:
        sample = run.get(section, {}).get(key)
        if not sample:
            continue
        if sample.get("error"):
            pooled.error = sample["error"]
        pooled.wall_s += sample["wall_s"]
        pooled.cpu_s += sample["cpu_s"]
    return pooled


def summarize(name: str, mode: str, runs: list[dict]) -> dict[str, Any]:
    """Per-model figures: graphcap/torch ratios of cold, warm and decomposition time (wall, cpu)."""
    row: dict[str, Any] = {"model": name, "mode": mode, "errors": {}}
    for run in runs:
        if "crash" in run:
            row["errors"][f"worker({run['first']} first)"] = run["crash"]
        row["errors"].update(run.get("errors", {}))
    cold = {k: next((r["cold"][k] for r in runs if k in r.get("cold", {})), None) for k in EXPORTERS}
    for key in EXPORTERS:
        row[f"cold_{key}"] = cold[key]
    if all(cold.values()) and not row["errors"]:
        row["cold"] = ratio(cold["graphcap"]["wall"], cold["torch"]["wall"])
        row["cold_cpu"] = ratio(cold["graphcap"]["cpu"], cold["torch"]["cpu"])
    for section in ("warm", "decomp"):
        g, t = _pool(runs, section, "graphcap"), _pool(runs, section, "torch")
        row[f"{section}_graphcap_s"], row[f"{section}_torch_s"] = g.wall, t.wall
        if not row["errors"]:
            row[section] = ratio(g.wall, t.wall)
            row[f"{section}_cpu"] = ratio(g.cpu, t.cpu)
    meta = [r["meta_forward"] for r in runs if r.get("meta_forward")]
    if meta:
        m = _pool([{"m": {"x": s}} for s in meta], "m", "x")
        row["meta_forward_s"] = m.wall
        row["warm_vs_meta"] = ratio(row["warm_graphcap_s"], m.wall)
        row["torch_warm_vs_meta"] = ratio(row["warm_torch_s"], m.wall)
        row["warm_vs_meta_cpu"] = ratio(_pool(runs, "warm", "graphcap").cpu, m.cpu)
        row["meta_note"] = next((r.get("meta_note") for r in runs if r.get("meta_note")), "")
    return row


def _cell(rows: list[dict], mode: str, col: str) -> str:
    sel = [r for r in rows if r["mode"] == mode]
    wall, cpu = median(r.get(col) for r in sel), median(r.get(f"{col}_cpu") for r in sel)
    n = sum(1 for r in sel if r.get(col) is not None)
    return f"{fmt_ratio(wall)} ({fmt_ratio(cpu)} cpu, n={n})"


def render(rows: list[dict], header: dict[str, str], command: str, label: str = "") -> str:
    """The summary tables and per-model figures, as markdown."""
    lines = [f"### {label or 'speed'} — {header['date']}", "",
             f"torch {header['torch']}, graphcap {header['graphcap']}, python {header['python']}; "
             f"{header['machine']}", "", f"`{command}`", "",
             "Median over the zoo of graphcap/torch time ratios (wall clock; CPU time in brackets; "
             f"n models compared). Goal: ≤ {GOAL_RATIO}x.", "",
             "| | cold | warm | run_decompositions |", "|---|---|---|---|"]
    for mode in ("static", "dynamic"):
        if any(r["mode"] == mode for r in rows):
            lines.append(f"| {mode} | " + " | ".join(_cell(rows, mode, c) for c in ("cold", "warm", "decomp")) + " |")
    meta = [r for r in rows if r.get("meta_forward_s")]
    if meta:
        lines += ["", "Warm export against the same forward pass on the meta device, run with is_exporting() True "
                      "as the exporters run it (goal for graphcap: ≤ 3x):", "",
                  "| model | meta forward s | graphcap warm / meta | torch warm / meta |", "|---|---|---|---|"]
        for r in meta:
            lines.append(f"| {r['model']} | {r['meta_forward_s']:.4f} | {fmt_ratio(r['warm_vs_meta'])} "
                         f"({fmt_ratio(r['warm_vs_meta_cpu'])} cpu) | {fmt_ratio(r['torch_warm_vs_meta'])} |"
                         + (f" {r['meta_note']}" if r.get("meta_note") else ""))
    lines += ["", "<details><summary>per model</summary>", "",
              "| model | mode | cold gc/torch s | cold | warm gc/torch s | warm | decomp gc/torch s | decomp |",
              "|---|---|---|---|---|---|---|---|"]
    def s(v):
        return "-" if v is None else f"{v:.3f}"
    for r in rows:
        cg, ct = r.get("cold_graphcap"), r.get("cold_torch")
        lines.append(
            f"| {r['model']} | {r['mode']} | {s(cg and cg['wall'])}/{s(ct and ct['wall'])} "
            f"| {fmt_ratio(r.get('cold'))} "
            f"| {s(r.get('warm_graphcap_s'))}/{s(r.get('warm_torch_s'))} | {fmt_ratio(r.get('warm'))} "
            f"| {s(r.get('decomp_graphcap_s'))}/{s(r.get('decomp_torch_s'))} | {fmt_ratio(r.get('decomp'))} |")
    lines += ["", "</details>", ""]
    failed = [(r["model"], r["mode"], k, e) for r in rows for k, e in r["errors"].items()]
    if failed:
        lines += ["Left out of the medians:", ""]
        lines += [f"- {m} ({mode}): {k}: {e}" for m, mode, k, e in failed]
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None, help="as zoo.select: names, globs, substrings, families")
    parser.add_argument("--modes", default="static,dynamic", help="static, dynamic or both (default)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per exporter and process")
    parser.add_argument("--results", type=Path, default=None, help="append the tables to this markdown file")
    parser.add_argument("--label", default="", help="heading of the appended section")
    parser.add_argument("--json", type=Path, default=None, help="write every raw figure here")
    parser.add_argument("--no-decomp", action="store_true", help="skip the run_decompositions column")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="do not byte-compile graphcap first (cold exports then compile its source)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="static", help=argparse.SUPPRESS)
    parser.add_argument("--first", default="graphcap", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        print(json.dumps(run_worker(opts.worker, opts.mode, opts.first, opts.repeats, not opts.no_decomp)))
        return 0

    if not opts.no_bytecode:
        _compile_graphcap()
    import zoo
    cases = zoo.select(opts.models)
    if not cases:
        parser.error(f"--models {opts.models!r} selects no zoo model")
    modes = [m for m in opts.modes.split(",") if m]
    rows, raw = [], []
    flip = False
    for case in cases:
        for mode in modes:
            firsts = EXPORTERS[::-1] if flip else EXPORTERS
            flip = not flip
            start = time.perf_counter()
            runs = [_spawn(case.name, mode, first, opts.repeats, not opts.no_decomp) for first in firsts]
            raw += runs
            if any("skip" in r for r in runs):
                continue
            row = summarize(case.name, mode, runs)
            rows.append(row)
            print(f"... {case.name} {mode}: cold {fmt_ratio(row.get('cold'))} ({fmt_ratio(row.get('cold_cpu'))} cpu) "
                  f"warm {fmt_ratio(row.get('warm'))} ({fmt_ratio(row.get('warm_cpu'))} cpu) "
                  f"decomp {fmt_ratio(row.get('decomp'))} ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
            if opts.json:  # written as the run goes: a long run interrupted keeps what it measured
                opts.json.write_text(json.dumps({"rows": rows, "raw": raw}, indent=1, default=str))
    command = "python bench/speed_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render(rows, harness.machine_header(), command.strip(), opts.label)
    print(text)
    if opts.results:
        with open(opts.results, "a") as f:
            f.write("\n" + text)
    if opts.json:
        opts.json.write_text(json.dumps({"rows": rows, "raw": raw}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
