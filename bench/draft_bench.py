"""graphcap.draft_export vs torch.export.draft_export on torchvision's detection models, side by side.

    python bench/draft_bench.py                 # the three models, small images (224; ssdlite 320)
    python bench/draft_bench.py --models fcos_resnet50_fpn --full   # torchvision's default sizes

Each model is built once (eval mode, random weights, nothing downloads); each
exporter runs once per model in this process, graphcap first then torch (the
order is flipped with --torch-first). A failing exporter is shown with its
error type; the ratio is graphcap's time over torch's (goal: at most 0.5).
"""
from __future__ import annotations

import argparse
import gc
import logging
import time
from typing import Any, Callable

import torch
import torchvision

import graphcap

SMALL = {
    "retinanet_resnet50_fpn": {"min_size": 224, "max_size": 224},
    "fcos_resnet50_fpn": {"min_size": 224, "max_size": 224},
    "ssdlite320_mobilenet_v3_large": {},
}


def _build(name: str, full: bool) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    options = {} if full else SMALL[name]
    model = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **options).eval()
    size = 320 if "320" in name else 224
    return model, ([torch.rand(3, size, size, generator=torch.Generator().manual_seed(1))],)


def _timed(fn: Callable[[], Any]) -> tuple[float, float, str]:
    """Wall seconds, this process's CPU seconds (the steadier figure on a busy machine), status."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        fn()
        status = "ok"
    except Exception as e:  # a failing exporter is a result of the benchmark
        status = f"failed: {type(e).__name__}"
    return time.perf_counter() - start, time.process_time() - cpu, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(SMALL))
    parser.add_argument("--full", action="store_true", help="torchvision's default image sizes")
    parser.add_argument("--torch-first", action="store_true")
    opts = parser.parse_args()
    logging.getLogger("torch").setLevel(logging.ERROR)  # torch's draft logs a warning per decision

    rows = []
    for name in opts.models:
        model, args = _build(name, opts.full)
        runs = {"graphcap": lambda model=model, args=args: graphcap.draft_export(model, args),
                "torch": lambda model=model, args=args: torch.export.draft_export(model, args)}
        order = ["torch", "graphcap"] if opts.torch_first else ["graphcap", "torch"]
        times = {}
        for who in order:
            times[who] = _timed(runs[who])
            wall, cpu, status = times[who]
            print(f"  {name:<32} {who:<9} {wall:8.1f} s wall {cpu:8.1f} s cpu  {status}", flush=True)
        rows.append((name, times))

    print(f"\n{'model':<32} {'graphcap s':>11} {'torch s':>9} {'wall':>6} {'cpu':>6}  status")
    for name, times in rows:
        (g, gc_cpu, gs), (t, t_cpu, ts) = times["graphcap"], times["torch"]
        print(f"{name:<32} {g:11.1f} {t:9.1f} {g / t:6.2f} {gc_cpu / t_cpu:6.2f}  graphcap {gs}, torch {ts}"
              + ("  (torch failed: its time is time-to-failure)" if ts != "ok" else ""))


if __name__ == "__main__":
    main()
