"""Keep the garbage collector off the heap that existed before a trace (or a save, load, ``module()``) started.

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
outermost level.

The same holds for the other stages that build a large graph from another:
saving, loading and ``module()`` of a deep model allocate in proportion to its
nodes while the heap holds the program (and often the model) already, so each
full collection walked a heap that grows with depth: their cost grew faster
than the number of layers (``bench/layer_sweep_bench.py``: ``module()`` 8.1 →
10.2 ms per layer from 64 to 256 layers, 7.9 → 7.6 without collections).
:func:`young_objects_only` wraps them. Saves, loads and ``module()`` do not
hold ``TRACING_LOCK``, so the depth is counted under a lock of its own; a
thread that unfreezes while another is inside only costs the other the saving.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
from typing import Any, Callable, Iterator, TypeVar

_depth = 0
_depth_lock = threading.Lock()
_F = TypeVar("_F", bound=Callable[..., Any])


@contextlib.contextmanager
def trace_allocations_only() -> Iterator[None]:
    """Collect garbage only among objects made inside the block (see the module docstring)."""
    global _depth
    with _depth_lock:
        owns = _depth == 0 and gc.get_freeze_count() == 0 and gc.isenabled()
        _depth += 1
        if owns:
            gc.freeze()
    try:
        yield
    finally:
        with _depth_lock:
            _depth -= 1
            if owns:
                gc.unfreeze()


def young_objects_only(fn: _F) -> _F:
    """``fn`` run inside :func:`trace_allocations_only` (for a save, a load, ``module()``)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with trace_allocations_only():
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
