"""graphcap's export of the Llama bench model with an optimisation on and off, against torch.export.

All in one process, interleaved, CPU time, medians of ``--repeats`` after a warm-up each, so
that the machine's load hits every column alike. Variants: ``room`` (graphcap/frame_stack.py's
room for traced module calls) and ``views`` (block reuse making symbolically sized copies as strided views);
"off" patches the one optimisation out, everything else as on main.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/variants_ratio.py --layers 32 --dynamic --off room
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness
from repeated_blocks_bench import llama


@contextlib.contextmanager
def switched_off(name: str):
    from graphcap import frame_stack
    from graphcap.trace import block_reuse
    if name == "room":
        saved, hook = frame_stack._call, block_reuse.BlockReuse._call_module
        large = hook.__code__
        frame_stack._call = lambda fn, args, kwargs: fn(*args, **kwargs)
        hook.__code__ = hook.small_code
        try:
            yield
        finally:
            frame_stack._call, hook.__code__ = saved, large
    elif name == "views":
        with block_reuse.symbolic_values_as_views(False):
            yield
    else:
        raise SystemExit(f"unknown variant {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--off", default="", help="comma-separated variants to time switched off too")
    opts = ap.parse_args()
    import torch

    import graphcap
    torch.set_num_threads(1)
    model = llama(opts.layers)
    ids = torch.randint(0, 1000, (1, 32))
    gc_spec = ({1: graphcap.Dim("seq", min=2, max=512)},) if opts.dynamic else None
    torch_spec = ({1: torch.export.Dim("seq", min=2, max=512)},) if opts.dynamic else None
    calls = {"graphcap": lambda: graphcap.export(model, (ids,), dynamic_shapes=gc_spec),
             "torch": lambda: torch.export.export(model, (ids,), dynamic_shapes=torch_spec, strict=False)}
    for name in filter(None, opts.off.split(",")):
        def off(name=name):
            with switched_off(name):
                return graphcap.export(model, (ids,), dynamic_shapes=gc_spec)
        calls[f"graphcap, {name} off"] = off
    with torch.no_grad():
        t = harness.interleaved(calls, repeats=opts.repeats)
    base = t["torch"].cpu
    print(f"Llama hidden 256, {opts.layers} layers, {'dynamic' if opts.dynamic else 'static'}; "
          f"CPU s, median of {opts.repeats}, load {os.getloadavg()[0]:.1f}")
    for key, timing in t.items():
        print(f"  {key:28} {timing.cpu:7.3f} s  {timing.cpu / base:5.3f}x torch.export"
              if timing.cpu else f"  {key:28} failed: {timing.error}")


if __name__ == "__main__":
    main()
