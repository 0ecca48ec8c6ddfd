"""The process-wide lock every trace holds (``graphcap.api.TRACING_LOCK`` is the public name).

It lives in a module of its own, below the stages, because both ends of the
pipeline take it: ``export`` (in :mod:`graphcap.api`, the top) and
``ExportedProgram.run_decompositions`` (in :mod:`graphcap.program`, which the
capture stages import); neither may import the other for it.
"""
from __future__ import annotations

import threading

TRACING_LOCK = threading.RLock()
"""Held by every export and ``run_decompositions`` while it traces (one at a time per process).

Tracing relies on state torch keeps per process, not per thread: the
pre-dispatch mode stack and the current ``make_fx`` tracer are module globals
of torch, and the trace switches process-wide flags (``torch.compiler``'s
exporting flag, the cuDNN/MKL-DNN/NNPACK switches, fx and shape-engine config,
the builtins of :mod:`graphcap.trace.python_overrides`) for its duration. Two
traces at once would push and pop each other's modes. Everything else (checking
arguments, ``module()`` and running it, save, load) runs concurrently. Re-entrant:
a forward that exports something itself does not deadlock.
"""
