"""A fresh process that only loads a saved program and runs it: time, and whether torch._dynamo got imported.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/cold_load.py PROGRAM.pt2 (a program taking one (2, 4) tensor)
"""

import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

t1 = time.perf_counter()
import graphcap  # noqa: E402

ep = graphcap.load(sys.argv[1])
m = ep.module()
y = m(torch.ones(2, 4))
t2 = time.perf_counter()
print(
    f"import torch {t1 - t0:.2f} s; import graphcap + load + module() + run {t2 - t1:.2f} s; "
    f"torch._dynamo imported: {'torch._dynamo' in sys.modules}"
)
