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
from sympy.printing.str import StrPrinter

from ..user_frames import is_user_file
from .draft_report import SourceLine


@dataclass
class Decision:
    """One data-dependent question answered with the example's value."""

    condition: Any  # sympy boolean that held on the example
    where: Optional[SourceLine]
    names: dict[Any, str] = field(default_factory=dict)  # symbol -> the user's expression for it

    @property
    def spelled(self) -> str:
        """The condition in Python over the user's names (unnamed symbols keep their u-names)."""
        return python_condition(self.condition, self.names)


class _PythonPrinter(StrPrinter):
    """sympy → Python source: relations with Python operators, min/max, //, %."""

    _OPS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

    def _print_Relational(self, expr: Any) -> str:
        op = self._OPS.get(expr.rel_op, expr.rel_op)
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"

    def _print_Not(self, expr: Any) -> str:
        return f"not ({self._print(expr.args[0])})"

    def _print_And(self, expr: Any) -> str:
        return " and ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Or(self, expr: Any) -> str:
        return " or ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Function(self, expr: Any) -> str:
        name = type(expr).__name__
        args = [self._print(a) for a in expr.args]
        if name in ("FloorDiv", "IntTrueDiv") and len(args) == 2:
            return f"({args[0]} // {args[1]})"
        if name in ("Mod", "PythonMod") and len(args) == 2:
            return f"({args[0]} % {args[1]})"
        return super()._print_Function(expr)

    def _print_Min(self, expr: Any) -> str:
        return f"min({', '.join(self._print(a) for a in expr.args)})"

    def _print_Max(self, expr: Any) -> str:
        return f"max({', '.join(self._print(a) for a in expr.args)})"

    def _print_Mod(self, expr: Any) -> str:
        return f"({self._print(expr.args[0])} % {self._print(expr.args[1])})"


def python_condition(cond: Any, names: dict[Any, str]) -> str:
    """``cond`` as Python source, each named symbol replaced by the user's expression for it."""
    if isinstance(cond, sympy.Basic):
        compound = {e: sympy.Symbol(n) for e, n in names.items() if not isinstance(e, sympy.Symbol)}
        if compound:  # whole expressions first (a relation's side that is a local's size)
            cond = cond.xreplace(compound)
        named = {s: sympy.Symbol(names[s]) for s in cond.free_symbols if s in names}
        if named:
            cond = cond.xreplace(named)
        return _PythonPrinter().doprint(cond)
    return str(cond)


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
    return Decision(condition, source_line(frame), user_names(frame, set(symbols)))
