"""run_decompositions with repeated calls copied, with copying off, and torch's, in one process (CPU s).

Usage: PYTHONPATH=src .venv/bin/python bench/probes/decomp_copies.py [--layers 8,32] [--models tv_resnet18]
       [--repeats 3]

For the Llama bench model at each depth (static) and each zoo model given: one warm-up of each, then
``--repeats`` rounds of graphcap (copies on), graphcap (copies off:
``reuse_repeated_blocks(False)``) and torch.export's ``run_decompositions``, interleaved; medians, the
ratios to torch, the calls copied, and whether both graphcap programs print the same code.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: F401  (puts the zoo on the path)
import torch

torch.set_num_threads(1)
from repeated_blocks_bench import llama  # noqa: E402

import graphcap  # noqa: E402
from graphcap.passes.decomposition_memo import LAST_STATS  # noqa: E402
from graphcap.trace.block_reuse import reuse_repeated_blocks  # noqa: E402


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def measure(name: str, model, args: tuple, repeats: int) -> None:
    with torch.no_grad():
        ep = graphcap.export(model, args)
        tep = torch.export.export(model, args, strict=False)
        ep.run_decompositions()
        tep.run_decompositions()
        times: dict[str, list[float]] = {"on": [], "off": [], "torch": []}
        codes = {}
        copied = 0
        for _ in range(repeats):
            for key in ("on", "off"):
                with reuse_repeated_blocks(key == "on"):
                    dt, out = _cpu(ep.run_decompositions)
                times[key].append(dt)
                codes[key] = out.graph_module.code
                if key == "on":
                    copied = LAST_STATS.get("copied", 0)
            times["torch"].append(_cpu(tep.run_decompositions)[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"| {name} | {med['on']:.3f} | {med['off']:.3f} | {med['torch']:.3f} | "
          f"{med['on'] / med['torch']:.2f}x | {med['off'] / med['torch']:.2f}x | {copied} | "
          f"{'yes' if codes['on'] == codes['off'] else 'NO'} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="8,32")
    parser.add_argument("--models", default="")
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    print("| program | graphcap s | copies off s | torch s | graphcap/torch | copies off/torch | calls copied "
          "| same code |")
    print("|---|---|---|---|---|---|---|---|")
    ids = torch.randint(0, 1000, (1, 32))
    for layers in [int(x) for x in opts.layers.split(",") if x]:
        measure(f"Llama {layers} layers", llama(layers), (ids,), opts.repeats)
    if opts.models:
        import zoo
        for case in zoo.select(opts.models):
            built = case.builder()
            if built.kwargs:
                continue  # this probe passes positional arguments only
            measure(case.name, built.model, tuple(built.args), opts.repeats)


if __name__ == "__main__":
    main()
