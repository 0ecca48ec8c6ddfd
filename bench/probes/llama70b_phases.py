"""The Llama-3-70B-architecture bench (meta device, dynamic sequence) phase by phase, each profiled.

Export, save(weights=False) and load(weights=False) in one process, CPU seconds of each
(and its minor page faults and system CPU time)
(after a warm-up of a 2-layer model so first-use costs are not charged to the phases),
then a cProfile of each phase: its top functions by cumulative and by own time.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/llama70b_phases.py [--layers 80] [--profile] [--top 30]
"""

import argparse
import cProfile
import io
import os
import pstats
import resource
import sys
import tempfile
import time
import warnings

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from llama70b_bench import example_and_spec, llama70b_config, meta_model, peak_rss_gb

FAULTS: dict = {}


def phases(layers: int, workdir: str, prof: dict | None):
    import graphcap
    model = meta_model(llama70b_config(layers))
    args, kwargs, spec = example_and_spec()
    out = {}
    faults = FAULTS
    path = os.path.join(workdir, f"l{layers}.pt2")

    def timed(name, fn):
        p = cProfile.Profile() if prof is not None else None
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t = time.process_time()
        if p:
            p.enable()
        r = fn()
        if p:
            p.disable()
            prof[name] = p
        out[name] = time.process_time() - t
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        faults[name] = (r1.ru_minflt - r0.ru_minflt, r1.ru_stime - r0.ru_stime)
        return r

    ep = timed("export", lambda: graphcap.export(model, args, kwargs, dynamic_shapes=spec))
    timed("save", lambda: graphcap.save(ep, path, weights=False))
    ep = None  # load runs without the exported program alive, as in the bench
    timed("load", lambda: graphcap.load(path, weights=False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    opts = ap.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as d:
        phases(2, d, None)  # warm-up: imports and first uses
        prof: dict | None = {} if opts.profile else None
        res = phases(opts.layers, d, prof)
    print(f"layers {opts.layers}: " + ", ".join(f"{k} {v:.2f} s cpu" for k, v in res.items())
          + f", total {sum(res.values()):.2f}; peak rss {peak_rss_gb():.2f} GB")
    print("page faults, system CPU s: " + ", ".join(f"{k} {n} {s:.2f}" for k, (n, s) in FAULTS.items()))
    for name, p in (prof or {}).items():
        for key in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(p, stream=s).sort_stats(key).print_stats(opts.top)
            print(f"==== {name} by {key}")
            print("\n".join(s.getvalue().splitlines()[4:]))


if __name__ == "__main__":
    main()
