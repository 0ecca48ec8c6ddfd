"""Where a dynamic run_decompositions spends its time, graphcap against torch.export, in one process.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/decomp_dynamic_profile.py --models tv_densenet121 [--rounds 3]

For each zoo model (its dynamic shapes): each round exports a fresh program with each exporter and
decomposes it twice; CPU seconds of the first decomposition (a fresh program: what a user pays) and
of the second (what ``decomp_bench.py`` times after its warm-up), with the fake-tensor dispatch
cache's hits and misses in each (``FakeTensorMode.cache_hits`` / ``cache_misses``, counted for the
whole process). Then graphcap's decomposition per operator of the training IR, static and dynamic
(CPU ms per replayed node, by target), and the symbols' guards the retrace learned.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: F401  (puts the zoo on the path)
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import graphcap
from graphcap.passes import decompose as decompose_module
from graphcap.shape_env_copies import fake_mode_of_graph


def _export(who: str, built, dynamic: bool):
    shapes = built.dynamic_shapes if dynamic else None
    if who == "graphcap":
        return graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=shapes)
    return torch.export.export(built.model, built.args, built.kwargs, dynamic_shapes=shapes, strict=False)


def _decompose(ep) -> tuple[float, int, int, object]:
    FakeTensorMode.cache_hits = FakeTensorMode.cache_misses = 0
    start = time.process_time()
    out = ep.run_decompositions()
    return time.process_time() - start, FakeTensorMode.cache_hits, FakeTensorMode.cache_misses, out


def first_and_second(built, rounds: int) -> None:
    runs: dict = collections.defaultdict(list)
    for _ in range(rounds):
        for who in ("graphcap", "torch"):
            ep = _export(who, built, True)
            for k in (0, 1):
                runs[(who, k)].append(_decompose(ep)[:3])
    for k, label in ((0, "first (fresh program)"), (1, "second (same program)")):
        g = statistics.median(r[0] for r in runs[("graphcap", k)])
        t = statistics.median(r[0] for r in runs[("torch", k)])
        gh, gm = runs[("graphcap", k)][-1][1:]
        th, tm = runs[("torch", k)][-1][1:]
        print(f"| {label} | {g:.3f} | {t:.3f} | {g / t:.2f}x | {gh} / {gm} | {th} / {tm} |")


def per_operator(built, dynamic: bool, top: int) -> None:
    ep = _export("graphcap", built, dynamic)
    acc: dict = collections.defaultdict(lambda: [0, 0.0])
    original = decompose_module._Replay.run_node

    def run_node(self, n):
        start = time.process_time()
        try:
            return original(self, n)
        finally:
            a = acc[str(n.target) if n.op == "call_function" else n.op]
            a[0] += 1
            a[1] += time.process_time() - start

    decompose_module._Replay.run_node = run_node
    try:
        ep.run_decompositions()
        acc.clear()
        total, _, _, dep = _decompose(ep)
    finally:
        decompose_module._Replay.run_node = original
    replay = sum(v[1] for v in acc.values())
    print(f"{'dynamic' if dynamic else 'static'}: total {total:.3f} s, replay {replay:.3f} s")
    for target, (count, secs) in sorted(acc.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {target} | {count} | {secs:.3f} | {1000 * secs / count:.2f} |")
    mode = fake_mode_of_graph(dep.graph_module)
    if dynamic and mode is not None and mode.shape_env is not None:
        print("guards the retrace's ShapeEnv holds:", [str(g.expr) for g in mode.shape_env.guards])


def main() -> None:
    import zoo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_densenet121")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=6)
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for case in zoo.select(opts.models):
        built = case.builder()
        print(f"== {case.name}")
        print("| decomposition | graphcap cpu s | torch cpu s | ratio | graphcap cache hits / misses "
              "| torch hits / misses |")
        print("|---|---|---|---|---|---|")
        first_and_second(built, opts.rounds)
        for dynamic in (False, True):
            per_operator(built, dynamic, opts.top)


if __name__ == "__main__":
    main()
