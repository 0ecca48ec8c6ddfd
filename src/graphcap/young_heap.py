"""Keep the garbage collector off the heap that existed before a trace started.

A process that has imported torch (and more so transformers, timm...) holds
hundreds of thousands of long-lived Python objects. A trace allocates many
short-lived ones; every so often CPython answers with a full collection, which
walks the whole heap: 0.15-0.2 s each on such a process, a quarter of a
dynamic-shape export of resnet18. None of that old heap can become garbage
because of the trace.

While a trace runs, :func:`trace_allocations_only` moves the objects that
existed before it into CPython's permanent generation (``gc.freeze``), so
collections look only at what the trace made, and puts them back
(``gc.unfreeze``) when it ends, whichever way. This is safe by construction:
frozen objects count as reachable, so a collection can only free less, never
something alive; garbage among the old objects is collected by the next full
collection after the trace.

Nothing happens when the process already uses ``gc.freeze`` itself (servers
freeze their heap before forking): unfreezing at the end would undo the
user's freeze, so their heap is left as it is. Nested traces (a forward that
exports, ``run_decompositions`` inside an export) freeze once, at the
outermost level; traces hold ``TRACING_LOCK``, so the depth is not shared
between threads.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

_depth = 0


@contextlib.contextmanager
def trace_allocations_only() -> Iterator[None]:
    """Collect garbage only among objects made inside the block (see the module docstring)."""
    global _depth
    owns = _depth == 0 and gc.get_freeze_count() == 0 and gc.isenabled()
    _depth += 1
    if owns:
        gc.freeze()
    try:
        yield
    finally:
        _depth -= 1
        if owns:
            gc.unfreeze()
