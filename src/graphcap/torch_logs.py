"""Keep torch's own log records off the terminal while graphcap traces.

While graphcap runs a user's model on fake tensors, torch logs what it sees
(``fake_tensor.py`` logs a full traceback for every operator whose shape check
fails; the shape engine logs specializations). graphcap turns those events
into its own errors (what, where, how to fix), so torch's records would only
repeat them as internals. :func:`quiet_torch_logs` drops the records of the
``torch`` loggers that the calling thread emits for the duration of a call:

- scoped to the thread: a filter on the handlers, not a level change, so
  torch records from other threads (and every record of other libraries) are
  left alone; the filters are removed when the last quiet call returns, so
  the process is left as it was found;
- the user can ask for torch's logs: ``GRAPHCAP_TORCH_LOGS=1`` in the
  environment, ``graphcap.show_torch_logs(True)`` in Python, ``--debug`` on
  the command line, or torch's own ``TORCH_LOGS`` variable.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Iterator, Optional

_ENV = "GRAPHCAP_TORCH_LOGS"
_show: Optional[bool] = None  # set by show_torch_logs(); None: follow the environment


def show_torch_logs(show: Optional[bool] = True) -> None:
    """Show torch's own log records during graphcap's calls, or keep them off the terminal.

    By default graphcap's calls (export, draft_export, run_decompositions) drop the
    records torch's loggers emit from the calling thread (tracebacks of fake-tensor
    kernels, shape-engine notes): the error graphcap raises says what happened, where
    and how to fix it. Turn them on to debug torch itself. The command line's
    ``--debug`` turns them on; so does ``GRAPHCAP_TORCH_LOGS=1`` or torch's
    ``TORCH_LOGS`` in the environment.

    Args:
        show: True to let torch's records through, False to drop them, None to
            follow the environment again.

    Returns:
        None.

    Raises:
        Nothing.

    Example:
        >>> graphcap.show_torch_logs(True)   # torch's records appear during export
        >>> graphcap.show_torch_logs(None)   # back to the default (environment)
    """
    global _show
    _show = show


def torch_logs_shown() -> bool:
    """Whether torch's records pass during graphcap's calls (see :func:`show_torch_logs`)."""
    if _show is not None:
        return _show
    return os.environ.get(_ENV, "").strip().lower() in ("1", "true", "yes", "on") or bool(os.environ.get("TORCH_LOGS"))


def _is_torch_record(record: logging.LogRecord) -> bool:
    return record.name == "torch" or record.name.startswith("torch.")


class _QuietThreads(logging.Filter):
    """Drops torch's records emitted by a thread inside a quiet call."""

    def __init__(self) -> None:
        super().__init__("graphcap.quiet_torch_logs")
        self.depth: dict[int, int] = {}  # thread id -> nesting depth of quiet calls

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.thread in self.depth and _is_torch_record(record))


_FILTER = _QuietThreads()
_LOCK = threading.Lock()
_filtered: list[logging.Handler] = []  # the handlers _FILTER was added to (removed when no thread is quiet)


def _handlers_torch_reaches() -> list[logging.Handler]:
    """Every handler a torch record can reach: those of the ``torch`` loggers and of their
    ancestors (the root), and logging's last-resort handler."""
    found: list[logging.Handler] = []
    loggers = [logging.getLogger()] + [
        lg for name, lg in list(logging.Logger.manager.loggerDict.items())
        if isinstance(lg, logging.Logger) and (name == "torch" or name.startswith("torch."))]
    for lg in loggers:
        for h in lg.handlers:
            if h not in found:
                found.append(h)
    if logging.lastResort is not None and logging.lastResort not in found:
        found.append(logging.lastResort)
    return found


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """Drop torch's log records from this thread for the duration (unless the user asked for them)."""
    if torch_logs_shown():
        yield
        return
    tid = threading.get_ident()
    with _LOCK:
        _FILTER.depth[tid] = _FILTER.depth.get(tid, 0) + 1
        for h in _handlers_torch_reaches():
            if _FILTER not in h.filters:
                h.addFilter(_FILTER)
                _filtered.append(h)
    try:
        yield
    finally:
        with _LOCK:
            left = _FILTER.depth[tid] - 1
            if left:
                _FILTER.depth[tid] = left
            else:
                del _FILTER.depth[tid]
            if not _FILTER.depth:
                for h in _filtered:
                    h.removeFilter(_FILTER)
                _filtered.clear()
