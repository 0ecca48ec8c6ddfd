"""``graphcap.capture``: try the ways into export in order, keep the first verified program.

There are three ways in: ``non_strict`` (the Python runs as it is on fake
tensors), ``strict`` (dynamo analyses the bytecode first) and ``draft`` (export
anyway: data-dependent questions answered with the example's values and
asserted at runtime, a violated spec refined, missing fake kernels inferred;
see ``draft``). Exporters built on export (the ONNX exporter, for one) try them
in that order; ``capture`` does the same, stops at the first strategy whose
program passes verification, and returns it with one record per attempt:
which strategy, whether it worked, how long it took, the error (type, message,
the user's source line) and what the strategy relaxed. The records print and
are data (``as_data()``).

Verification: the program's IR invariants hold (checked when it is built) and,
run on the example, it gives eager's result (``verify=True``; eager runs once,
on a copy of the model, so the caller's module keeps its state).
"""
from __future__ import annotations

import copy
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch

from ..errors import ExportInputError, GraphcapError
from ..program import ExportedProgram
from ..torch_private import pytree
from ..user_frames import describe_frame, user_frame

RELAXES = {
    "non_strict": "nothing the program needs: guards are proven for every input; the Python runs as it is "
                  "(not analysed), so its side effects happen once, while tracing",
    "strict": "nothing: dynamo analyses the bytecode, refusing graph breaks and side effects",
    "draft": "data-dependent questions are decided with the example's values (asserted at runtime), a "
             "violated dynamic_shapes spec is refined, custom operators without fake kernels get their "
             "output metadata from a real call (see program.report)",
}
STRATEGIES = tuple(RELAXES)


@dataclass
class Attempt:
    """One strategy's try: its outcome, time, and the error that stopped it.

    Attributes:
        strategy: ``"non_strict"``, ``"strict"`` or ``"draft"``.
        success: True when the strategy gave a program that passed verification.
        seconds: how long the try took (export and verification).
        relaxed: what the strategy gives up to get a program (one sentence).
        error_type: the failed try's exception class name, else None.
        error_message: its message (the ``what`` part for graphcap's errors), else None.
        error_where: the user's source line (or graphcap's ``where``) it points at, else None.
        notes: remarks on a successful try (how many problems ``draft`` worked around).

    Raises:
        nothing: it is plain data; ``as_data()`` gives it as a dict, ``str()`` prints it.

    Example:
        >>> result = graphcap.capture(model, args)
        >>> failed = [a for a in result.attempts if not a.success]
        >>> rows = [a.as_data() for a in result.attempts]
    """

    strategy: str
    success: bool
    seconds: float
    relaxed: str
    error_type: Optional[str] = None
    error_message: Optional[str] = None
    error_where: Optional[str] = None  # the user's source line the error points at
    notes: list[str] = field(default_factory=list)

    def as_data(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        status = "ok" if self.success else "failed"
        lines = [f"{self.strategy:<10} {status:<6} {self.seconds:7.2f} s"]
        if self.error_type:
            first = (self.error_message or "").strip().splitlines()
            lines.append(f"    {self.error_type}: {first[0] if first else ''}")
        if self.error_where:
            lines.append("    at " + self.error_where.replace("\n", "\n    "))
        lines.append(f"    relaxed: {self.relaxed}")
        lines += [f"    note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class CaptureResult:
    """The program of the first strategy that worked, and every attempt.

    Unpacks as ``program, attempts = graphcap.capture(...)``.

    Attributes:
        program: the verified :class:`ExportedProgram`.
        attempts: one :class:`Attempt` per strategy tried, in order; the last succeeded.
        program_name: the captured module's class (or function) name.
        strategy: the name of the strategy that gave ``program``.

    Raises:
        nothing: it is plain data; ``as_data()`` gives it as a dict, ``str()`` prints it.

    Example:
        >>> result = graphcap.capture(model, args)
        >>> print(result.strategy, result.program)
        >>> program, attempts = result
    """

    program: ExportedProgram
    attempts: list[Attempt]
    program_name: str = ""

    @property
    def strategy(self) -> str:
        return self.attempts[-1].strategy

    def __iter__(self) -> Iterator[Any]:
        return iter((self.program, self.attempts))

    def as_data(self) -> dict[str, Any]:
        return {"program_name": self.program_name, "strategy": self.strategy,
                "attempts": [a.as_data() for a in self.attempts]}

    def __str__(self) -> str:
        total = sum(a.seconds for a in self.attempts)
        head = (f"capture of {self.program_name}: {self.strategy} gave a verified program "
                f"({len(self.attempts)} attempt(s), {total:.2f} s)")
        return head + "\n" + "\n".join(f"  {i}. {a}".replace("\n", "\n  ")
                                        for i, a in enumerate(self.attempts, 1))


class CaptureError(GraphcapError):
    """No strategy gave a verified program; ``attempts`` holds every try.

    The message lists every attempt; ``where`` is the source line of the last
    one's error.

    Attributes:
        attempts: one failed :class:`Attempt` per strategy tried, in order.
        what: what went wrong (as for every :class:`GraphcapError`).
        where: where the last strategy's error points, or None.
        fix: how to fix it.

    Raised by:
        :func:`graphcap.capture`, when every strategy failed or gave a program
        that differs from eager on the example.

    Example:
        >>> try:
        ...     program, attempts = graphcap.capture(model, args)
        ... except graphcap.CaptureError as e:
        ...     for attempt in e.attempts:
        ...         print(attempt)
    """

    def __init__(self, what: str, *, attempts: list[Attempt], where: Optional[str] = None,
                 fix: Optional[str] = None):
        self.attempts = attempts
        super().__init__(what, where=where, fix=fix)


def capture(mod: Any, args: Optional[tuple] = None, kwargs: Optional[dict[str, Any]] = None, *,
            dynamic_shapes: Any = None, strategies: Sequence[str] = STRATEGIES, verify: bool = True,
            progress: Optional[bool] = None, **export_options: Any) -> CaptureResult:
    """Try each strategy in order; return the first verified program and the record of every attempt.

    Args:
        mod: the ``nn.Module`` (or function, or bound method) to capture.
        args: the positional example inputs, a tuple.
        kwargs: the keyword example inputs, or None.
        dynamic_shapes: as for :func:`graphcap.export`, given to every strategy;
            ``"infer"`` with ``samples=[...]`` infers it first (:func:`graphcap.infer_dynamic_shapes`).
        strategies: the strategies to try, in order, from ``"non_strict"``,
            ``"strict"`` and ``"draft"`` (default: all three in that order).
        verify: check each program against eager on the example (eager runs once,
            on a copy of ``mod``); a program that differs counts as a failed try.
        progress: a rich status line while an attempt runs (default: only when
            stderr is a terminal).
        **export_options: given to every strategy
            (``preserve_module_call_signature``,
            ``prefer_deferred_runtime_asserts_over_guards``).

    Returns:
        A :class:`CaptureResult`: the program and one :class:`Attempt` per
        strategy tried; unpacks as ``program, attempts``.

    Raises:
        ExportInputError: ``strategies`` is empty or names an unknown strategy.
        CaptureError: no strategy gave a verified program (``.attempts`` holds
            every try, with its error and the user's line).

    Example:
        >>> program, attempts = graphcap.capture(model, (torch.randn(3, 4),),
        ...                                      strategies=("non_strict", "draft"))
        >>> print(graphcap.capture(model, (torch.randn(3, 4),)))
    """
    if isinstance(dynamic_shapes, str) and dynamic_shapes == "infer":  # spec from export_options["samples"]
        from .inferred_shapes import spec_for_capture
        args, kwargs, dynamic_shapes, checked_when_run = spec_for_capture(mod, args, kwargs,
                                                                          export_options.pop("samples", None))
        if checked_when_run:
            export_options["prefer_deferred_runtime_asserts_over_guards"] = True
    strategies = tuple(strategies)
    unknown = [s for s in strategies if s not in RELAXES]
    if unknown or not strategies:
        raise ExportInputError(f"Unknown capture strategies {unknown or '(none given)'}.",
                               where="capture(..., strategies=...)",
                               fix=f"Choose from {', '.join(STRATEGIES)}, in the order to try them.")
    name = type(mod).__name__ if isinstance(mod, torch.nn.Module) else getattr(mod, "__qualname__", repr(mod))
    reference = _EagerReference(mod, args, kwargs) if verify else None
    attempts: list[Attempt] = []
    for i, strategy in enumerate(strategies, 1):
        started = time.perf_counter()
        with _progress(progress, f"graphcap.capture({name}): trying {strategy} ({i}/{len(strategies)})"):
            try:
                ep = _run(strategy, mod, args, kwargs, dynamic_shapes, export_options)
                notes = _notes(strategy, ep)
                if reference is not None:
                    reference.check(ep)
            except Exception as e:  # each strategy's failure is recorded, the next is tried
                attempts.append(_failed(strategy, e, time.perf_counter() - started))
                continue
        attempts.append(Attempt(strategy, True, time.perf_counter() - started, RELAXES[strategy], notes=notes))
        return CaptureResult(ep, attempts, name)
    listing = "\n".join(f"  {i}. {a}".replace("\n", "\n  ") for i, a in enumerate(attempts, 1))
    raise CaptureError(f"No capture strategy gave a verified program for {name}:\n{listing}",
                       attempts=attempts, where=attempts[-1].error_where,
                       fix="Fix the error of the strategy you prefer (each names the line); draft_export "
                           "gets past data-dependent questions, spec violations and missing fake kernels.")


def _run(strategy: str, mod: Any, args: tuple, kwargs: Any, dynamic_shapes: Any, options: dict) -> ExportedProgram:
    if strategy == "draft":
        from .draft import draft_export
        return draft_export(mod, args, kwargs, dynamic_shapes=dynamic_shapes, **options)
    from .front_ends import run_front_end
    return run_front_end(mod, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strategy == "strict", **options)


def _notes(strategy: str, ep: ExportedProgram) -> list[str]:
    report = getattr(ep, "report", None)
    if strategy == "draft" and report is not None:
        kinds = sorted({p.kind for p in report.problems})
        return [f"{len(report.problems)} problem(s) worked around ({', '.join(kinds) or 'none'}); "
                f"print(program.report) for the lines and fixes"]
    return []


def _failed(strategy: str, e: BaseException, seconds: float) -> Attempt:
    where = getattr(e, "where", None) if isinstance(e, GraphcapError) else None
    if where is None:
        where = describe_frame(user_frame(e.__traceback__))
    message = getattr(e, "what", None) or str(e) or "".join(traceback.format_exception_only(type(e), e)).strip()
    return Attempt(strategy, False, seconds, RELAXES[strategy], type(e).__name__, message, where)


class _EagerReference:
    """Eager's outputs on the example, computed once (on copies) when the first program arrives."""

    def __init__(self, mod: Any, args: tuple, kwargs: Any):
        self.mod, self.args, self.kwargs = mod, args, kwargs or {}
        self._expected: Any = None
        self._ready = False

    def _eager(self) -> Any:
        if not self._ready:
            try:
                mod = copy.deepcopy(self.mod) if isinstance(self.mod, torch.nn.Module) else self.mod
                args, kwargs = copy.deepcopy((self.args, self.kwargs))
            except Exception:  # a model that cannot be copied: run it as it is
                mod, args, kwargs = self.mod, self.args, self.kwargs
            with torch.no_grad():
                self._expected = mod(*args, **kwargs)
            self._ready = True
        return self._expected

    def check(self, ep: ExportedProgram) -> None:
        expected = self._eager()
        args, kwargs = copy.deepcopy((self.args, self.kwargs))
        with torch.no_grad():
            got = ep.module()(*args, **kwargs)
        want_leaves, want_spec = pytree.tree_flatten(expected)
        got_leaves, got_spec = pytree.tree_flatten(got)
        if len(want_leaves) != len(got_leaves):
            raise VerificationFailed(f"the program returned {len(got_leaves)} values where eager returned "
                                     f"{len(want_leaves)}")
        for i, (w, g) in enumerate(zip(want_leaves, got_leaves)):
            if isinstance(w, torch.Tensor):
                if not isinstance(g, torch.Tensor) or w.shape != g.shape or w.dtype != g.dtype \
                        or not _close(w.detach(), g.detach()):
                    raise VerificationFailed(f"output {i} differs from eager's on the example")
            elif w != g:
                raise VerificationFailed(f"output {i} is {g!r} where eager gave {w!r}")


def _close(want: torch.Tensor, got: torch.Tensor) -> bool:
    if want.is_floating_point() or want.is_complex():
        return torch.allclose(want, got, rtol=1e-4, atol=1e-5, equal_nan=True)
    return torch.equal(want, got)


class VerificationFailed(GraphcapError):
    """The program a strategy gave does not reproduce eager's result on the example."""

    def __init__(self, what: str):
        super().__init__(f"Verification failed: {what}.", where="graphcap.capture(..., verify=True)",
                         fix="Report it: a strategy's program should match eager on its own example.")


class _Silent:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _progress(enabled: Optional[bool], text: str) -> Any:
    """A rich status spinner on stderr (only on a terminal unless asked); nothing otherwise."""
    if enabled is False:
        return _Silent()
    try:
        from rich.console import Console
    except ImportError:  # rich is optional: no progress line
        return _Silent()
    console = Console(stderr=True)
    if enabled is None and not (console.is_terminal and sys.stderr.isatty()):
        return _Silent()
    return console.status(text)
