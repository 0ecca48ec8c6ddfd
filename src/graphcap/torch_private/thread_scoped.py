"""A replacement of one of torch's process-wide entries that only the threads asking for it see.

Some older torch lines need graphcap's rule in a table torch reads process-wide (a fake kernel by
operator, a dynamo method). Patching it for the whole process would change what another thread
computes (a torch.compile, plain eager code) while an export runs. :class:`ThreadScopedPatch`
installs the replacement when the first thread enters :meth:`ThreadScopedPatch.active`, puts
torch's entry back when the last one leaves, and tells the replacement whether the calling thread
is inside (:meth:`ThreadScopedPatch.in_scope`): outside, it defers to torch's own.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

RELIES_ON: dict = {}  # nothing of torch's: the entries patched are declared by the modules using this


class ThreadScopedPatch:
    """One patched entry: ``install()`` puts the replacement in and returns what it replaced,
    ``restore(saved)`` puts that back. Counted across threads, nested within one."""

    def __init__(self, install: Callable[[], Any], restore: Callable[[Any], None]):
        self._install, self._restore = install, restore
        self._lock = threading.Lock()
        self._threads_inside = 0
        self._state = threading.local()
        self.saved: Any = None  # torch's entry, while the replacement is installed

    def in_scope(self) -> bool:
        """Whether the calling thread is inside :meth:`active`."""
        return getattr(self._state, "depth", 0) > 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self._lock:
            if self._threads_inside == 0:
                self.saved = self._install()
            self._threads_inside += 1
        self._state.depth = getattr(self._state, "depth", 0) + 1
        try:
            yield
        finally:
            self._state.depth -= 1
            with self._lock:
                self._threads_inside -= 1
                if self._threads_inside == 0:
                    self._restore(self.saved)
                    self.saved = None
