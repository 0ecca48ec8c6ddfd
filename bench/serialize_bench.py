"""graphcap.save/load against torch.export.save/load on the public model zoo.

For each selected zoo model, in one process: the model is exported once by
each system (static shapes, non-strict) and each program is saved to and
loaded from a file in a temporary directory with its own library — one
warm-up round each, then three timed rounds each, interleaved (graphcap,
torch, graphcap, ...) so drift on a shared machine hits both alike; medians
are reported. Also measured: graphcap's ``load(mmap=True)`` and
``load(weights=False)``. The table shows file sizes and times and the
graphcap/torch ratios, per model and as medians; ``--json`` writes the raw
figures.

    .venv/bin/python bench/serialize_bench.py                   # whole zoo
    .venv/bin/python bench/serialize_bench.py --models tv_resnet18,hf_bert --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from harness import wall_seconds  # also puts ../shared/zoo on the path

import graphcap

REPEATS = 3


def bench_model(name: str, workdir: Path) -> dict[str, Any]:
    import zoo
    built = zoo.REGISTRY[name].builder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gep = graphcap.export(built.model, built.args, built.kwargs)
        tep = torch.export.export(built.model, built.args, built.kwargs)
    gpath, tpath = workdir / f"{name}.graphcap.pt2", workdir / f"{name}.torch.pt2"
    steps = {
        "graphcap_save": lambda: graphcap.save(gep, gpath),
        "torch_save": lambda: torch.export.save(tep, tpath),
        "graphcap_load": lambda: graphcap.load(gpath),
        "torch_load": lambda: torch.export.load(tpath),
        "graphcap_load_mmap": lambda: graphcap.load(gpath, mmap=True),
        "graphcap_load_structure": lambda: graphcap.load(gpath, weights=False),
    }
    times: dict[str, list[float]] = {k: [] for k in steps}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for round_ in range(REPEATS + 1):
            for key, fn in steps.items():
                t = wall_seconds(fn)
                if round_:  # round 0 is the warm-up
                    times[key].append(t)
    row: dict[str, Any] = {"model": name, "graphcap_bytes": os.path.getsize(gpath),
                           "torch_bytes": os.path.getsize(tpath)}
    row.update({k: statistics.median(v) for k, v in times.items()})
    row["size_ratio"] = row["graphcap_bytes"] / row["torch_bytes"]
    row["save_ratio"] = row["graphcap_save"] / row["torch_save"]
    row["load_ratio"] = row["graphcap_load"] / row["torch_load"]
    row["mmap_load_ratio"] = row["graphcap_load_mmap"] / row["torch_load"]
    for p in (gpath, tpath):
        p.unlink()
    return row


def _print(rows: list[dict[str, Any]]) -> None:
    head = (f"{'model':30s} {'size MB g/t':>14s} {'size':>6s} {'save s g/t':>14s} {'save':>6s} "
            f"{'load s g/t':>14s} {'load':>6s} {'mmap':>6s} {'struct s':>8s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:30s} {r['graphcap_bytes'] / 1e6:6.2f}/{r['torch_bytes'] / 1e6:<7.2f} "
              f"{r['size_ratio']:6.3f} {r['graphcap_save']:6.3f}/{r['torch_save']:<7.3f} {r['save_ratio']:6.2f} "
              f"{r['graphcap_load']:6.3f}/{r['torch_load']:<7.3f} {r['load_ratio']:6.2f} "
              f"{r['mmap_load_ratio']:6.2f} {r['graphcap_load_structure']:8.3f}")
    if rows:
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("size_ratio", "save_ratio", "load_ratio", "mmap_load_ratio")}
        print("-" * len(head))
        print(f"{'median graphcap/torch ratio':30s} size {med['size_ratio']:.3f}  save {med['save_ratio']:.2f}  "
              f"load {med['load_ratio']:.2f}  load(mmap) {med['mmap_load_ratio']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None, help="comma-separated zoo names/globs (default: all)")
    parser.add_argument("--json", default=None, help="write the raw figures here")
    opts = parser.parse_args(argv)
    import zoo
    names = [c.name for c in zoo.select(opts.models)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                rows.append(bench_model(name, Path(tmp)))
            except Exception as e:  # a model one side cannot export is reported, not fatal
                print(f"{name}: skipped ({type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
    _print(rows)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
