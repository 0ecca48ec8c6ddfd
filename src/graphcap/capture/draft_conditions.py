"""Data-dependent decisions draft_export made, written as the ``torch._check`` a user adds.

When tracing meets a question on a value read from data (``if n > 2`` with
``n = y.item()``), draft_export answers it with the example's real value.
This module records each such decision where it happened: the condition that
held, the user's line (first frame outside torch and graphcap) and the user's
own names for the symbols in it (``n`` rather than ``u0``), read from that
frame's locals, so the fix reads ``torch._check(n > 2)``.
"""
from __future__ import annotations

import linecache
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

import sympy
import torch

from ..trace.data_checks import python_condition  # its home is below, in trace
from ..user_frames import is_user_file
from .draft_report import SourceLine


@dataclass
class Decision:
    """One data-dependent question answered with the example's value."""

    condition: Any  # sympy boolean that held on the example
    where: Optional[SourceLine]
    names: dict[Any, str] = field(default_factory=dict)  # symbol -> the user's expression for it
    taken: frozenset = frozenset()  # the names of the frame's locals (a new name avoids them)

    @property
    def spelled(self) -> str:
        """The condition in Python over the user's names (unnamed symbols keep their u-names)."""
        return python_condition(self.condition, self.names)


def _expr_of(value: Any) -> Optional[Any]:
    return getattr(getattr(value, "node", None), "expr", None)


def user_names(frame: Optional[FrameType], wanted: set) -> dict[Any, str]:
    """The user's names (locals of ``frame``) for the symbols in ``wanted``.

    A local SymInt (``n``), a size of a local tensor (``boxes.shape[0]``), or
    one level into a local list/tuple (``sizes[1]``); the search stops when
    every wanted symbol is named.
    """
    names: dict[Any, str] = {}
    if frame is None or not wanted:
        return names

    def name(expr: Any, text: str) -> None:
        # a symbol we look for, or an expression over them (``boxes.numel()`` for 4*Min(1000, u0) + ...)
        if expr is not None and not getattr(expr, "is_number", True) and expr.free_symbols & wanted:
            names.setdefault(expr, text)

    def visit(text: str, value: Any) -> None:
        if isinstance(value, torch.SymInt):
            name(_expr_of(value), text)
        elif isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            for i, d in enumerate(value.shape):
                name(_expr_of(d), f"{text}.shape[{i}]")
            if value.dim() > 1:
                name(_expr_of(value.numel()), f"{text}.numel()")

    for var, value in list(frame.f_locals.items()):
        if wanted <= names.keys():
            break
        if isinstance(value, (list, tuple)) and len(value) <= 64:
            for i, item in enumerate(value):
                visit(f"{var}[{i}]", item)
        else:
            visit(var, value)
    return names


def innermost_user_frame(depth: int = 1) -> Optional[FrameType]:
    """The innermost live frame of user code (outside torch, graphcap and the standard helpers)."""
    frame: Optional[FrameType] = sys._getframe(depth)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def source_line(frame: Optional[FrameType]) -> Optional[SourceLine]:
    if frame is None:
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLine(file, line, frame.f_code.co_name, linecache.getline(file, line).strip())


def record_decision(condition: Any) -> Decision:
    """The decision just made, located at the user's line that asked the question."""
    frame = innermost_user_frame(2)
    symbols = condition.free_symbols if isinstance(condition, sympy.Basic) else set()
    return Decision(condition, source_line(frame), user_names(frame, set(symbols)),
                    frozenset(frame.f_locals) if frame is not None else frozenset())
