"""What the zoo benchmarks share: the public zoo on the import path, and one timed call.

Imported first by a benchmark script (``import zoo_bench_setup``), so that
``import zoo`` finds ``../shared/zoo`` beside this checkout.
"""
from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = ROOT.parent / "shared" / "zoo"
if str(ZOO_DIR) not in sys.path:
    sys.path.insert(0, str(ZOO_DIR))


def wall_seconds(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes after a garbage collection, its result dropped before returning."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    del result
    return elapsed
