"""Cost by depth: export, run_decompositions, save, load and module() of a Llama-architecture model.

The same ``LlamaModel`` as ``repeated_blocks_bench.py`` (hidden 256) at each depth given, static
shapes; for each stage the CPU seconds and the seconds per layer. Work linear in depth keeps the
per-layer column flat; a column that grows with depth names the stage that is not linear.

Usage::

    .venv/bin/python bench/layer_sweep_bench.py --layers 8,32,128,512
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repeated_blocks_bench import llama


def _cpu(fn, *args):
    start = time.process_time()
    out = fn(*args)
    return time.process_time() - start, out


def sweep(depths: list[int]) -> list[dict]:
    import torch

    import graphcap
    rows = []
    ids = torch.randint(0, 1000, (1, 32))
    for layers in depths:
        model = llama(layers)
        with torch.no_grad():
            graphcap.export(model, (ids,))  # warm
            row = {"layers": layers}
            row["export"], ep = _cpu(graphcap.export, model, (ids,))
            row["run_decompositions"], _ = _cpu(ep.run_decompositions)
            buf = io.BytesIO()
            row["save"], _ = _cpu(graphcap.save, ep, buf)
            data = buf.getvalue()
            row["load"], loaded = _cpu(graphcap.load, io.BytesIO(data))
            row["module()"], _ = _cpu(loaded.module)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="8,32,128")
    opts = parser.parse_args()
    import torch
    torch.set_num_threads(1)
    rows = sweep([int(x) for x in opts.layers.split(",")])
    stages = ["export", "run_decompositions", "save", "load", "module()"]
    print("| layers | " + " | ".join(f"{s} cpu s (per layer ms)" for s in stages) + " |")
    print("|---|" + "---|" * len(stages))
    for r in rows:
        print(f"| {r['layers']} | " + " | ".join(f"{r[s]:.2f} ({1000 * r[s] / r['layers']:.1f})" for s in stages)
              + " |")


if __name__ == "__main__":
    main()
