"""Deep models: graphcap with repeated blocks traced once, against torch.export, by depth.

A Llama-architecture model (transformers' ``LlamaModel``, hidden size 256) at
several depths, static and with a dynamic sequence length, exported in one
process by ``graphcap.export`` (repeated blocks replayed: the default),
``graphcap.export`` with reuse off, and ``torch.export.export(strict=False)``,
alternating, median of ``--repeats`` after one warm-up each. The figures are
ratios taken in the same process; never assert on them.

Usage::

    .venv/bin/python bench/repeated_blocks_bench.py                     # 8 and 32 layers
    .venv/bin/python bench/repeated_blocks_bench.py --layers 8,32,64 --repeats 5 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def llama(layers: int):
    import torch
    from transformers import LlamaConfig, LlamaModel
    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=layers, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=1000, max_position_embeddings=512, use_cache=False)
    torch.manual_seed(0)
    return LlamaModel(config).eval()


def measure(layers: int, dynamic: bool, repeats: int) -> dict:
    import torch

    import graphcap
    from graphcap.trace import block_reuse
    model = llama(layers)
    ids = torch.randint(0, 1000, (1, 32))
    gc_spec = ({1: graphcap.Dim("seq", min=2, max=512)},) if dynamic else None
    torch_spec = ({1: torch.export.Dim("seq", min=2, max=512)},) if dynamic else None

    def graphcap_reuse():
        with block_reuse.reuse_repeated_blocks(True):
            return graphcap.export(model, (ids,), dynamic_shapes=gc_spec)

    def graphcap_full():
        with block_reuse.reuse_repeated_blocks(False):
            return graphcap.export(model, (ids,), dynamic_shapes=gc_spec)

    def torch_export():
        return torch.export.export(model, (ids,), dynamic_shapes=torch_spec, strict=False)

    with torch.no_grad():
        timings = harness.interleaved({"torch": torch_export, "graphcap": graphcap_reuse,
                                       "graphcap_full": graphcap_full}, repeats=repeats)
        graphcap_reuse()
        stats = dict(block_reuse.LAST_STATS)
    row = {"layers": layers, "dynamic": dynamic, "replayed": stats.get("replayed", 0)}
    for key, t in timings.items():
        row[f"{key}_s"] = t.wall
        row[f"{key}_cpu_s"] = t.cpu
        row[f"{key}_error"] = t.error
    row["ratio"] = harness.ratio(row["graphcap_s"], row["torch_s"])
    row["cpu_ratio"] = harness.ratio(row["graphcap_cpu_s"], row["torch_cpu_s"])
    row["full_ratio"] = harness.ratio(row["graphcap_full_s"], row["torch_s"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="8,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args()
    import torch
    torch.set_num_threads(1)
    depths = [int(x) for x in opts.layers.split(",")]
    rows = [measure(n, dyn, opts.repeats) for dyn in (False, True) for n in depths]
    print("| shapes | layers | graphcap s | graphcap (reuse off) s | torch.export s | graphcap/torch (wall) "
          "| (cpu) | reuse off/torch | calls replayed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        def s(v):
            return "-" if v is None else f"{v:.2f}"
        print(f"| {'dynamic' if r['dynamic'] else 'static'} | {r['layers']} | {s(r['graphcap_s'])} | "
              f"{s(r['graphcap_full_s'])} | {s(r['torch_s'])} | {harness.fmt_ratio(r['ratio'])} | "
              f"{harness.fmt_ratio(r['cpu_ratio'])} | {harness.fmt_ratio(r['full_ratio'])} | {r['replayed']} |")
    for dyn in (False, True):
        by_depth = {r["layers"]: r for r in rows if r["dynamic"] == dyn}
        if len(by_depth) > 1:
            lo, hi = min(by_depth), max(by_depth)
            growth = harness.ratio(by_depth[hi]["graphcap_s"], by_depth[lo]["graphcap_s"])
            torch_growth = harness.ratio(by_depth[hi]["torch_s"], by_depth[lo]["torch_s"])
            print(f"{'dynamic' if dyn else 'static'}: graphcap {hi} layers / {lo} layers = "
                  f"{harness.fmt_ratio(growth)} (torch.export {harness.fmt_ratio(torch_growth)})")
    for r in rows:
        for key in ("torch", "graphcap", "graphcap_full"):
            if r.get(f"{key}_error"):
                print(f"{key} failed at {r['layers']} layers ({'dynamic' if r['dynamic'] else 'static'}): "
                      f"{r[f'{key}_error']}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"machine": harness.machine_header(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
