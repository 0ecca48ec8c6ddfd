"""Progress of long operations on the terminal: an export's modules entered, verify's checks done.

Exporting a big model (80 decoder layers, thousands of operators) takes
seconds to minutes with nothing to see. While the trace runs, a forward
pre-hook notes each module of the exported model the first time it is called;
once the trace has run for ``DELAY_S`` seconds a rich progress bar appears on
stderr (``LlamaForCausalLM ━━━━━━━╸━━━ 412/723 modules 0:00:09``) and it
disappears when the trace ends. Quick exports show nothing. The elapsed time
counts from the start of the trace, not from when the bar appears.
``graphcap.verify`` shows a bar of the same kind over its input sets and
refusal checks (:class:`StepProgress`).

Shown only when stderr is a terminal, and switched by the environment:
``GRAPHCAP_PROGRESS=0`` turns it off, ``GRAPHCAP_PROGRESS=1`` shows it even
when stderr is not a terminal (drawn with terminal control codes). The hook exists only while a
bar may be shown, and is removed when the trace ends, however it ends.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable, Optional

import torch

ENV_VAR = "GRAPHCAP_PROGRESS"
DELAY_S = 2.0
_REFRESH_S = 0.1


def elapsed_text(seconds: float) -> str:
    """``0:01:07``: the elapsed time as rich's elapsed column writes it."""
    whole = int(max(seconds, 0))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def wanted() -> bool:
    """Whether an export should offer a progress bar (see the module docstring)."""
    setting = os.environ.get(ENV_VAR, "").strip().lower()
    if setting in ("0", "false", "off", "no"):
        return False
    if setting in ("1", "true", "on", "yes"):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class ModuleProgress:
    """Counts the distinct modules of one model called while it is traced; draws the bar."""

    def __init__(self, modules: Iterable[torch.nn.Module], label: str, *, delay: float = DELAY_S,
                 console: Any = None):
        # keyed by the instance dict: the recorder calls the modules through proxies that share it;
        # containers without a forward of their own (ModuleList, ModuleDict) are never called
        self._ids = {id(vars(m)) for m in modules if type(m).forward is not torch.nn.Module.forward}
        self._entered: set[int] = set()
        self._label = label
        self._delay = delay
        self._console = console
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._bar: Any = None
        self._task: Any = None
        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(self._on_call)

    @property
    def total(self) -> int:
        return len(self._ids)

    @property
    def entered(self) -> int:
        return len(self._entered)

    def _on_call(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_dynamo_compiling():  # a bytecode capture traces hooks: keep this one out of its graph
            return
        key = id(vars(module))
        if key not in self._ids or key in self._entered:
            return
        self._entered.add(key)
        now = time.monotonic()
        if now - self._last_draw < _REFRESH_S and self.entered < self.total:
            return
        if self._bar is None and now - self._started >= self._delay:
            self._show()
        if self._bar is not None:
            self._last_draw = now
            self._bar.update(self._task, completed=self.entered, elapsed=elapsed_text(now - self._started))
            self._bar.refresh()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        # asked for by GRAPHCAP_PROGRESS=1 on a non-terminal: draw as on one (rich would otherwise wait)
        console = self._console or Console(file=sys.stderr, force_terminal=True)
        self._bar = Progress(TextColumn("graphcap.export [bold]{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("modules"), TextColumn("{task.fields[elapsed]}"),
                             console=console, auto_refresh=False, transient=True)
        self._bar.start()
        self._task = self._bar.add_task(self._label, total=self.total, completed=self.entered,
                                        elapsed=elapsed_text(time.monotonic() - self._started))

    def close(self) -> None:
        self._handle.remove()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.entered)
            self._bar.refresh()
            self._bar.stop()
            self._bar = None


def start(modules: Iterable[torch.nn.Module], label: str) -> Optional[ModuleProgress]:
    """A progress counter for this trace, or None when no bar may be shown."""
    modules = list(modules)
    return ModuleProgress(modules, label) if modules and wanted() else None


def stop(progress: Optional[ModuleProgress]) -> None:
    if progress is not None:
        progress.close()


class StepProgress:
    """A bar over the known steps of a long call (``graphcap.verify``'s input sets and refusal
    checks): ``step(what)`` before each; shown once the call has run ``delay`` seconds, with
    the step being done and the time since the call started; gone when closed."""

    def __init__(self, title: str, total: int, *, delay: float = DELAY_S, console: Any = None,
                 shown: Optional[bool] = None):
        self._title, self._total, self._delay, self._console = title, total, delay, console
        self._shown = wanted() if shown is None else shown
        self._started = time.monotonic()
        self.done = 0
        self._bar: Any = None
        self._task: Any = None

    def step(self, what: str) -> None:
        """The next step starts (``what``: shown beside the bar)."""
        self._draw(what)
        self.done += 1

    def _draw(self, what: str) -> None:
        if not self._shown:
            return
        now = time.monotonic()
        if self._bar is None:
            if now - self._started < self._delay:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            console = self._console or Console(file=sys.stderr, force_terminal=True)
            self._bar = Progress(TextColumn(f"{self._title} " + "[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[elapsed]}"),
                                 console=console, auto_refresh=False, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("", total=self._total, completed=self.done,
                                            elapsed=elapsed_text(now - self._started))
        from rich.markup import escape
        self._bar.update(self._task, description=escape(what), completed=self.done,
                         elapsed=elapsed_text(now - self._started))
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
