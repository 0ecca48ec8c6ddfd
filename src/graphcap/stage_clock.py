"""Wall time of each stage of an export, for the report (``ep.export_timings``).

A lap clock rather than one context manager per stage: the pipeline marks the
end of each stage with one line (``clock.lap("capture")``), so timing it
changes no indentation of the pipeline's code. ``clock.stage(name)`` is the
context-manager form for code that wants it. The cost is two
``perf_counter`` calls per stage.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator


class StageClock:
    """Seconds per named stage, in the order the stages ended; a stage met twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        """The stage named ``stage`` ended now: it took the time since the previous lap."""
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + (now - self._last)
        self._last = now

    @contextlib.contextmanager
    def stage(self, stage: str) -> Iterator[None]:
        """Time the ``with`` block as ``stage`` (the time before it is not counted)."""
        self._last = time.perf_counter()
        try:
            yield
        finally:
            self.lap(stage)

    def total(self) -> float:
        return time.perf_counter() - self._start
