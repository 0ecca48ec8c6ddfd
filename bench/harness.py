"""The timing harness every benchmark in bench/ shares.

Imported first by a benchmark script (``import harness``) so that
``import zoo`` finds ``../shared/zoo`` beside this checkout. What it settles
once for all of them:

* one timed call: a garbage collection first (so one exporter does not pay for
  the other's garbage), then wall time (``perf_counter``) and this process's
  CPU time (``process_time``) of the call, its result dropped before returning;
* interleaving: the timed calls of several contenders alternate (a, b, a, b,
  ...) so drift on a shared machine hits all alike;
* medians and ratios, with failures kept as results (an exporter that fails on
  a model is reported, not a crash);
* the header of a results file: date, torch and graphcap versions, machine.
"""
from __future__ import annotations

import datetime
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = Path(os.environ.get("GRAPHCAP_ZOO_DIR") or ROOT.parent / "shared" / "zoo")  # a checkout elsewhere
if str(ZOO_DIR) not in sys.path:
    sys.path.insert(0, str(ZOO_DIR))

GOAL_RATIO = 0.5  # the project's speed goal: graphcap at most half of torch.export's time
REPEATS = 3


@dataclass
class Timing:
    """Samples of one contender: wall and CPU seconds, or the error that stopped it."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    error: Optional[str] = None

    def add(self, wall: float, cpu: float) -> None:
        self.wall_s.append(wall)
        self.cpu_s.append(cpu)

    @property
    def wall(self) -> Optional[float]:
        return statistics.median(self.wall_s) if self.wall_s and not self.error else None

    @property
    def cpu(self) -> Optional[float]:
        return statistics.median(self.cpu_s) if self.cpu_s and not self.error else None


def timed(fn: Callable[[], Any], keep: bool = False, collect_first: bool = True) -> tuple[float, float, Any]:
    """``(wall s, cpu s, result)`` of ``fn()`` (result None unless ``keep``).

    A garbage collection runs first, so that no sample pays for garbage an
    earlier one left, unless ``collect_first`` is False: the cold export is
    timed as a user's script meets it, with whatever collection falls due.
    """
    if collect_first:
        gc.collect()
    cpu0, start = time.process_time(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if not keep:
        del out
        out = None
    return wall, cpu, out


def wall_seconds(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes after a garbage collection, its result dropped before returning."""
    return timed(fn)[0]


def describe(e: BaseException) -> str:
    """One line naming an exception: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def interleaved(calls: dict[str, Callable[[], Any]], repeats: int = REPEATS,
                timings: Optional[dict[str, Timing]] = None) -> dict[str, Timing]:
    """Time each call ``repeats`` times, alternating between them; one warm-up run each first.

    A call that raises in its warm-up is recorded as failed and not timed.
    """
    timings = timings if timings is not None else {}
    live = []
    for key, call in calls.items():
        t = timings.setdefault(key, Timing())
        try:
            call()
        except Exception as e:  # a failure is a result, not a crash
            t.error = describe(e)
            continue
        live.append(key)
    for _ in range(repeats):
        for key in live:
            wall, cpu, _ = timed(calls[key])
            timings[key].add(wall, cpu)
    return timings


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.2f}x"


def machine_header() -> dict[str, str]:
    """Date, versions and machine, as a results file names them."""
    from importlib.metadata import PackageNotFoundError, version

    import torch
    try:
        gc_version = version("graphcap")
    except PackageNotFoundError:
        gc_version = "unknown"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "graphcap": gc_version,
        "python": platform.python_version(),
        "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}",
    }


def to_meta(value: Any) -> Any:
    """``value`` with every tensor moved to the meta device (lists, tuples and dicts walked): the
    inputs of a model's meta-device forward, the yardstick of the warm-export goal."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: to_meta(v) for k, v in value.items()}
    return value
