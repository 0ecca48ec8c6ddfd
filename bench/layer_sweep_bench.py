"""Cost by depth: export, run_decompositions, save, load and module() of a Llama-architecture model.

The same ``LlamaModel`` as ``repeated_blocks_bench.py`` (hidden 256) at each depth given, static
shapes (``--dynamic``: the sequence length dynamic, as there); for each stage the CPU seconds and
the seconds per layer. Work linear in depth keeps the
per-layer column flat; a column that grows with depth names the stage that is not linear.
``--torch-up-to N`` also times ``torch.export.export(strict=False)`` (after a warm-up export) and
the ``run_decompositions`` of its program at the depths up to N, in the same process, for the
ratios.

Usage::

    .venv/bin/python bench/layer_sweep_bench.py --layers 8,32,128,256,512 --torch-up-to 128
    .venv/bin/python bench/layer_sweep_bench.py --dynamic --layers 8,32,128 --torch-up-to 32
"""
from __future__ import annotations

import argparse
import functools
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


def sweep(depths: list[int], torch_up_to: int = 0, dynamic: bool = False) -> list[dict]:
    import torch

    import graphcap
    rows = []
    ids = torch.randint(0, 1000, (1, 32))
    spec = ({1: torch.export.Dim("seq", min=2, max=512)},) if dynamic else None
    export = functools.partial(graphcap.export, dynamic_shapes=spec)
    torch_export = functools.partial(torch.export.export, dynamic_shapes=spec, strict=False)
    for layers in depths:
        model = llama(layers)
        with torch.no_grad():
            export(model, (ids,))  # warm
            row = {"layers": layers}
            row["export"], ep = _cpu(export, model, (ids,))
            row["run_decompositions"], _ = _cpu(ep.run_decompositions)
            buf = io.BytesIO()
            row["save"], _ = _cpu(graphcap.save, ep, buf)
            data = buf.getvalue()
            row["load"], loaded = _cpu(graphcap.load, io.BytesIO(data))
            row["module()"], _ = _cpu(loaded.module)
            if layers <= torch_up_to:
                torch_export(model, (ids,))  # warm
                row["torch.export"], tep = _cpu(torch_export, model, (ids,))
                row["torch decomp"], _ = _cpu(tep.run_decompositions)
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="8,32,128")
    parser.add_argument("--torch-up-to", type=int, default=0)
    parser.add_argument("--dynamic", action="store_true", help="the sequence length dynamic")
    opts = parser.parse_args()
    import torch
    torch.set_num_threads(1)
    rows = sweep([int(x) for x in opts.layers.split(",")], opts.torch_up_to, opts.dynamic)
    stages = ["export", "run_decompositions", "save", "load", "module()", "torch.export", "torch decomp"]

    def cell(r: dict, s: str) -> str:
        return f"{r[s]:.2f} ({1000 * r[s] / r['layers']:.1f})" if s in r else "-"
    print(f"{'dynamic' if opts.dynamic else 'static'} shapes")
    print("| layers | " + " | ".join(f"{s} cpu s (per layer ms)" for s in stages)
          + " | export / torch.export | decomp / torch's |")
    print("|---|" + "---|" * (len(stages) + 2))
    for r in rows:
        ratio = f"{r['export'] / r['torch.export']:.2f}x" if "torch.export" in r else "-"
        decomp = f"{r['run_decompositions'] / r['torch decomp']:.2f}x" if "torch decomp" in r else "-"
        print(f"| {r['layers']} | " + " | ".join(cell(r, s) for s in stages) + f" | {ratio} | {decomp} |")


if __name__ == "__main__":
    main()
