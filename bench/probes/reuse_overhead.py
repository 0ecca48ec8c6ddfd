"""Block reuse's cost on a model: graphcap with reuse on and off, interleaved in one process (CPU s).

Usage: PYTHONPATH=src .venv/bin/python bench/probes/reuse_overhead.py [torchvision model] [repeats] [--prof] [--nogc]
"""

import cProfile
import gc
import io
import pstats
import sys
import time

import torch
import torchvision

import graphcap
from graphcap.trace import block_reuse

torch.set_num_threads(1)
name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
model = getattr(torchvision.models, name)().eval()
x = torch.randn(1, 3, 224, 224)


def run(on):
    with block_reuse.reuse_repeated_blocks(on):
        return graphcap.export(model, (x,))


run(True)
run(False)

if "--nogc" in sys.argv:
    gc.disable()
ts = {True: [], False: []}
for _i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 6):
    for on in (True, False):
        t = time.process_time()
        run(on)
        ts[on].append(time.process_time() - t)


def med(v):
    return sorted(v)[len(v) // 2]


mn = min
print(
    f"median on {med(ts[True]):.4f} off {med(ts[False]):.4f} ratio {med(ts[True]) / med(ts[False]):.3f} | "
    f"min on {min(ts[True]):.4f} off {min(ts[False]):.4f} ratio {min(ts[True]) / min(ts[False]):.3f}"
)
print("stats", block_reuse.LAST_STATS)
if "--prof" in sys.argv:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3):
        run(True)
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("cumulative").print_stats("block_reuse|block_replay|modules.py", 40)
    print(s.getvalue()[-6000:])
