"""graphcap.unflatten against torch.export.unflatten on the public model zoo.

For each selected zoo model, in one process: the model is exported once by
graphcap (static shapes, non-strict); the program is unflattened by graphcap
and, through ``graphcap.to_torch``, by torch's ``unflatten`` — one warm-up
each, then three timed rounds, interleaved; medians are reported. The line
the project tracks is the largest model (most graph nodes): graphcap's
unflatten of it should take under 0.5 s.

    .venv/bin/python bench/unflatten_bench.py                      # whole zoo
    .venv/bin/python bench/unflatten_bench.py --models tv_densenet121,hf_t5 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from harness import wall_seconds  # also puts ../shared/zoo on the path

import graphcap

REPEATS = 3
TARGET_SECONDS = 0.5


def bench_model(name: str) -> dict[str, Any]:
    import zoo
    built = zoo.REGISTRY[name].builder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(built.model, built.args, built.kwargs)
    steps: dict[str, Callable[[], Any]] = {"graphcap": lambda: graphcap.unflatten(ep)}
    try:
        tep = graphcap.to_torch(ep)
        torch.export.unflatten(tep)
        steps["torch"] = lambda: torch.export.unflatten(tep)
    except Exception as e:  # torch's unflatten may refuse a program; graphcap's figure still counts
        print(f"  {name}: torch.export.unflatten failed: {type(e).__name__}: {e}", file=sys.stderr)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for fn in steps.values():
        fn()  # warm-up
    for _ in range(REPEATS):
        for key, fn in steps.items():
            times[key].append(wall_seconds(fn))
    return {"nodes": len(ep.graph.nodes), "modules": len(list(built.model.modules())),
            **{k: statistics.median(v) for k, v in times.items()}}


def _ratio(a: float, b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if b else "-"


def main() -> None:
    import zoo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="*")
    parser.add_argument("--json")
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = [c.name for c in zoo.select(options.models)]
    rows = {}
    print(f"{'model':32} {'nodes':>6} {'modules':>7} {'gc s':>8} {'torch s':>8} {'ratio':>7}")
    for name in names:
        try:
            row = bench_model(name)
        except Exception as e:
            print(f"{name:32} failed: {type(e).__name__}: {e}")
            continue
        rows[name] = row
        print(f"{name:32} {row['nodes']:6d} {row['modules']:7d} {row['graphcap']:8.3f} "
              f"{row.get('torch', float('nan')):8.3f} {_ratio(row['graphcap'], row.get('torch')):>7}")
    if rows:
        largest = max(rows, key=lambda n: rows[n]["nodes"])
        seconds = rows[largest]["graphcap"]
        verdict = "OK" if seconds < TARGET_SECONDS else "OVER TARGET"
        print(f"\nunflatten of the largest model ({largest}, {rows[largest]['nodes']} nodes): "
              f"{seconds:.3f} s (target < {TARGET_SECONDS} s): {verdict}")
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
