"""Per-layer CPU cost of module(), load, save (...) with the garbage collector on and off, by depth.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/gc_growth.py module,load,save 64,256
"""

import gc
import io
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import torch

torch.set_num_threads(1)
from repeated_blocks_bench import llama  # noqa: E402

import graphcap  # noqa: E402

stages = sys.argv[1].split(",")
depths = [int(d) for d in sys.argv[2].split(",")]
ids = torch.randint(0, 1000, (1, 32))
for n in depths:
    model = llama(n)
    with torch.no_grad():
        ep = graphcap.export(model, (ids,))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    data = buf.getvalue()
    loaded = graphcap.load(io.BytesIO(data))
    fns = {
        "module": lambda loaded=loaded: loaded.module(),
        "load": lambda data=data: graphcap.load(io.BytesIO(data)),
        "save": lambda ep=ep: graphcap.save(ep, io.BytesIO()),
        "decomp": lambda ep=ep: ep.run_decompositions(),
        "export": lambda model=model: graphcap.export(model, (ids,)),
    }
    for stage in stages:
        fn = fns[stage]
        res = {}
        for mode in ("gc", "nogc", "gc", "nogc"):
            gc.collect()
            if mode == "nogc":
                gc.disable()
            t = time.process_time()
            fn()
            dt = time.process_time() - t
            gc.enable()
            res.setdefault(mode, []).append(dt)
        print(
            f"{stage:7s} {n:4d} layers: gc {min(res['gc']):.2f} s ({1000 * min(res['gc']) / n:.1f} ms/layer)  "
            f"gc off {min(res['nogc']):.2f} s ({1000 * min(res['nogc']) / n:.1f} ms/layer)",
            flush=True,
        )
