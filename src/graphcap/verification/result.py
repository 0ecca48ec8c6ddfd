"""The result of :func:`graphcap.verify`: data first, tables on request.

``VerificationResult.as_dict()`` is plain JSON-able data (what the HTML report
and scripts read); ``table()`` / ``refusal_table()`` are rich tables;
``str(result)`` is both tables as plain text. ``passed`` is the verdict and
``first_failure`` the first input set (or refusal check) that failed.

The data layout (``as_dict()``)::

    {"passed": bool, "samples": int, "seed": int,
     "input_sets": [{"label": str, "sizes": {symbol: int}, "shapes": {input: [int]},
                     "passed": bool, "error": str | None,
                     "outputs": [{"name", "shape", "dtype", "max_abs_error", "max_rel_error", "ok", "note"}]}],
     "refusals": [{"label": str, "refused": bool, "passed": bool, "message": str}],
     "skipped": [str], "notes": [str]}
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .compare import OutputCheck


@dataclass
class InputSetResult:
    label: str
    sizes: dict[str, int]
    shapes: dict[str, list[int]]
    outputs: list[OutputCheck] = field(default_factory=list)
    error: Optional[str] = None  # an exception of eager or of the program, when only one raised

    @property
    def passed(self) -> bool:
        return self.error is None and all(o.ok for o in self.outputs)

    @property
    def max_abs(self) -> Optional[float]:
        vals = [o.max_abs for o in self.outputs if o.max_abs is not None]
        return max(vals) if vals else None

    @property
    def max_rel(self) -> Optional[float]:
        vals = [o.max_rel for o in self.outputs if o.max_rel is not None]
        return max(vals) if vals else None

    def as_dict(self) -> dict[str, Any]:
        return dict(label=self.label, sizes=dict(self.sizes), shapes=dict(self.shapes), passed=self.passed,
                    error=self.error, outputs=[o.as_dict() for o in self.outputs])

    def describe(self) -> str:
        """One paragraph on why this set failed (or that it passed)."""
        shapes = ", ".join(f"{k}: {_shape(v)}" for k, v in self.shapes.items()) or "(no tensor inputs)"
        head = f"input set '{self.label}' ({shapes})"
        if self.error:
            return f"{head}: {self.error}"
        bad = [o for o in self.outputs if not o.ok]
        if not bad:
            return f"{head}: matches eager"
        parts = [f"{o.name}: {o.note or f'max abs error {o.max_abs:.3g}, max rel error {o.max_rel:.3g}'}"
                 for o in bad]
        return f"{head} differs from eager: " + "; ".join(parts)


@dataclass
class RefusalResult:
    label: str
    refused: bool  # graphcap's input check raised before computing
    message: str  # the first line of the error, or what happened instead

    @property
    def passed(self) -> bool:
        return self.refused

    def as_dict(self) -> dict[str, Any]:
        return dict(label=self.label, refused=self.refused, passed=self.passed, message=self.message)

    def describe(self) -> str:
        return f"refusal check '{self.label}': " + ("refused" if self.refused else self.message)


@dataclass
class VerificationResult:
    """What :func:`graphcap.verify` found: one row per input set, one per wrong input.

    Attributes:
        input_sets: one ``InputSetResult`` per input set run (its label, sizes,
            shapes, per-output errors, or the error only one side raised).
        refusals: one ``RefusalResult`` per wrong input (whether it was refused
            before computing, and the message).
        samples: how many random input sets were asked for.
        seed: the seed the inputs were generated with.
        skipped: input sets and refusal checks not run, with the reason.
        notes: what may explain a difference (the model's weights differ from
            the program's).
        passed: every input set matched eager and every wrong input was refused.
        failures: the input sets and refusal checks that failed, in order.
        first_failure: the first of them, or None.

    Raises:
        nothing: it is data; ``as_dict()`` gives plain JSON-able data,
        ``summary()`` one line, ``table()`` / ``refusal_table()`` rich tables
        (these need rich, as does ``str()``).

    Example:
        >>> result = graphcap.verify(ep, model)
        >>> if not result.passed:
        ...     print(result.first_failure.describe())
        >>> data = result.as_dict()
    """

    input_sets: list[InputSetResult]
    refusals: list[RefusalResult]
    samples: int = 0
    seed: int = 0
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what may explain a difference (weights that differ)

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.input_sets) and all(r.passed for r in self.refusals)

    @property
    def failures(self) -> list[Union[InputSetResult, RefusalResult]]:
        return [s for s in self.input_sets if not s.passed] + [r for r in self.refusals if not r.passed]

    @property
    def first_failure(self) -> Optional[Union[InputSetResult, RefusalResult]]:
        fails = self.failures
        return fails[0] if fails else None

    def as_dict(self) -> dict[str, Any]:
        return dict(passed=self.passed, samples=self.samples, seed=self.seed,
                    input_sets=[s.as_dict() for s in self.input_sets],
                    refusals=[r.as_dict() for r in self.refusals], skipped=list(self.skipped),
                    notes=list(self.notes))

    def summary(self) -> str:
        matched = sum(s.passed for s in self.input_sets)
        refused = sum(r.passed for r in self.refusals)
        line = f"{matched}/{len(self.input_sets)} input sets match eager"
        if self.refusals:
            line += f", {refused}/{len(self.refusals)} wrong inputs refused before computing"
        first = self.first_failure
        line += "" if first is None else f"\nFirst failure: {first.describe()}"
        return "\n".join([line, *(f"Note: {n}" for n in self.notes)])

    # -- tables ------------------------------------------------------------------
    def table(self, *, per_output: bool = False):
        """A rich Table, one row per input set (``per_output``: one per output of each set)."""
        from rich.table import Table
        t = Table(title="Program vs eager", title_justify="left")
        for col, kw in (("#", dict(justify="right")), ("input set", {}), ("input shapes", {}),
                        ("output" if per_output else "worst output", {}), ("max abs err", dict(justify="right")),
                        ("max rel err", dict(justify="right")), ("result", {})):
            t.add_column(col, **kw)
        for i, s in enumerate(self.input_sets, 1):
            shapes = "  ".join(f"{k} {_shape(v)}" for k, v in s.shapes.items())
            verdict = "[green]match[/green]" if s.passed else "[bold red]DIFFERS[/bold red]"
            if s.error:
                t.add_row(str(i), _esc(s.label), _esc(shapes), "-", "-", "-", f"[bold red]{_short(s.error)}[/bold red]")
                continue
            rows = s.outputs if per_output else [_worst(s.outputs)] if s.outputs else []
            for j, o in enumerate(rows):
                first = j == 0
                t.add_row(str(i) if first else "", _esc(s.label) if first else "", _esc(shapes) if first else "",
                          _esc(o.name), _num(o.max_abs), _num(o.max_rel),
                          (verdict if first else "") if o.ok else f"[bold red]{_short(o.note) or 'DIFFERS'}[/bold red]")
        return t

    def refusal_table(self):
        from rich.table import Table
        t = Table(title="Wrong inputs refused before computing", title_justify="left")
        t.add_column("wrong input")
        t.add_column("result")
        t.add_column("message")
        for r in self.refusals:
            t.add_row(_esc(r.label), "[green]refused[/green]" if r.refused else "[bold red]NOT REFUSED[/bold red]",
                      _short(r.message, 160))
        return t

    def __rich_console__(self, console, options):
        yield self.table()
        if self.refusals:
            yield self.refusal_table()
        yield ("[green]" if self.passed else "[bold red]") + _esc(self.summary()) + \
            ("[/green]" if self.passed else "[/bold red]")

    def __str__(self) -> str:
        from rich.console import Console
        buf = io.StringIO()
        Console(file=buf, width=140, color_system=None, force_terminal=False).print(self)
        return buf.getvalue().rstrip()

    def __repr__(self) -> str:
        return f"<VerificationResult passed={self.passed}: {self.summary().splitlines()[0]}>"


def _worst(outputs: list[OutputCheck]) -> OutputCheck:
    failing = [o for o in outputs if not o.ok]
    if failing:
        return failing[0]
    return max(outputs, key=lambda o: (o.max_abs or 0.0))


def _num(x: Optional[float]) -> str:
    return "-" if x is None else ("0" if x == 0 else f"{x:.2e}")


def _shape(shape: list[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _short(text: Optional[str], width: int = 60) -> str:
    line = (text or "").strip().splitlines()[0] if text and text.strip() else ""
    return _esc(line if len(line) <= width else line[: width - 1] + "…")


def _esc(text: str) -> str:
    from rich.markup import escape
    return escape(text)
