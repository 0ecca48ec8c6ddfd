"""Time spent inside BlockReuse's own methods per export (CPU ms), for a torchvision model or `llama N`.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/reuse_self_cost.py resnet18
"""

import sys
import time

import torch
import torchvision

import graphcap
from graphcap.trace import block_reuse as br

torch.set_num_threads(1)
name = sys.argv[1]
if name == "llama":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from repeated_blocks_bench import llama

    model = llama(int(sys.argv[2]))
    x = torch.randint(0, 1000, (1, 32))
else:
    model = getattr(torchvision.models, name)().eval()
    x = torch.randn(1, 3, 224, 224)
acc = {}


def wrap(cls, meth):
    f = getattr(cls, meth)

    def g(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[meth] = acc.get(meth, 0) + time.process_time() - t

    setattr(cls, meth, g)


for m in ["__init__", "_prepare", "_finish_recording", "_matches", "_knowledge", "close", "_copy", "_replay"]:
    wrap(br.BlockReuse, m)
wrap(br, "_context_fingerprint")
graphcap.export(model, (x,))
acc.clear()
n = 5
t = time.process_time()
for _ in range(n):
    graphcap.export(model, (x,))
tot = (time.process_time() - t) / n
print(f"export cpu {tot:.4f}", br.LAST_STATS)
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"  {k:<20} {1000 * v / n:.2f} ms/export")
