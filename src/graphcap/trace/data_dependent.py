"""The error for a condition on data-read values that tracing cannot decide.

``if y.item() > 2:`` or ``if x.nonzero().shape[0] > 2:`` asks for a value
export does not have: ``.item()``, ``.tolist()``, ``nonzero()`` give unbacked
symbols (``u0``, ``u1``, ...), and a Python branch on them cannot be recorded.
The error names the condition, the user's line, and the code that would let
tracing go on, written with the user's own names (``graphcap.trace.data_checks``):
``torch._check(n > 2)`` where a local holds the value, else the line rewritten
to read the value once into a name and check it; never ``u0``.
"""
from __future__ import annotations

from types import FrameType
from typing import Any, Optional

import sympy
import torch

from ..errors import DataDependentError
from ..torch_private import pytree
from ..torch_private.messages import data_dependent_expression
from ..user_frames import user_traceback_entry
from .data_checks import NumberUse, number_use, python_condition, unnamed_check, write_check


def names_of_symbols(frame: Optional[FrameType]) -> dict[sympy.Symbol, str]:
    """Symbol → an expression over the frame's locals that holds it (``n``, ``y.shape[0]``)."""
    names: dict[sympy.Symbol, str] = {}
    if frame is None:
        return names
    for var, value in frame.f_locals.items():
        try:
            leaves = pytree.tree_leaves_with_path(value)
        except Exception:  # a local pytree cannot walk: skip it
            continue
        for path, leaf in leaves:
            name = var + pytree.keystr(path)
            sizes = [(name, leaf)] if isinstance(leaf, (torch.SymInt, torch.SymFloat)) else (
                [(f"{name}.shape[{i}]", d) for i, d in enumerate(leaf.shape)]
                if isinstance(leaf, torch.Tensor) else [])
            for text, size in sizes:
                if isinstance(size, (torch.SymInt, torch.SymFloat)) and isinstance(size.node.expr, sympy.Symbol):
                    names.setdefault(size.node.expr, text)
    return names


def explain_data_dependent(e: Exception, program_name: str, where: Optional[str]) -> DataDependentError:
    """The error for a branch on a value read from tensor data that tracing cannot decide.

    Opens with torch's own phrase ("Could not guard on data-dependent
    expression ...") and is also torch's ``GuardOnDataDependentSymNode``, so
    code written for torch.export catches it.
    """
    entry = user_traceback_entry(e.__traceback__)
    frame = entry.tb_frame if entry is not None else None
    return explain_at_line(e, program_name, where, names_of_symbols(frame),
                           frame.f_code.co_filename if frame is not None else None,
                           entry.tb_lineno if entry is not None else None,
                           set(frame.f_locals) if frame is not None else set())


def explain_at_line(e: BaseException, program_name: str, where: Optional[str], names: dict[sympy.Symbol, str],
                    filename: Optional[str], lineno: Optional[int], local_names: set[str]) -> DataDependentError:
    """:func:`explain_data_dependent` for the user's line ``filename:lineno``, whose locals hold the
    values ``names`` tells (none where the Python did not run, as under dynamo)."""
    cond_text = data_dependent_expression(e)
    cond = getattr(e, "cond", None)
    what = (f"Could not guard on data-dependent expression {cond_text}: while tracing {program_name}, the "
            f"program needs to know whether {cond_text} to go on, where the condition depends on values read from "
            f"tensor data (.item(), .tolist(), nonzero(), sizes made from data); export records shapes, "
            f"not data, so it cannot decide this."
            if cond_text else
            f"Could not guard on data-dependent expression: while tracing {program_name}, the program "
            f"branched on a value read from tensor data "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}).")
    if isinstance(cond, sympy.Expr):  # the number itself is needed (float(t.max()), math.sqrt(v)), no condition
        return _number_needed(cond, cond_text, program_name, where, names, number_use(filename, lineno))
    written = None
    if isinstance(cond, sympy.logic.boolalg.Boolean):
        written = write_check(cond, names, filename, lineno, local_names)
    if written is not None:
        check = written.as_fix("this line")
    elif isinstance(cond, sympy.logic.boolalg.Boolean):
        holds, fails = unnamed_check(cond, names)
        check = (f"name the value it reads from tensor data where it is read (value = t.item()), and "
                 f"state it right after with {holds} (or {fails} if it never holds)")
    else:
        check = "state it before this line with torch._check(<the condition>)"
    if cond_text is not None:  # the opening keeps torch's phrase; the rest reads in the user's terms
        spelled = _condition_words(cond, names, written)
        what = what.replace(f"whether {cond_text} to go on", f"whether {spelled} to go on")
    return DataDependentError(
        what, where=where, cond=cond if cond is not None else cond_text,
        fix=f"If the condition always holds for your data, {check}; "
            f"the check becomes a runtime assert in the program. For a value used as a size, "
            f"torch._check(value >= 0). If both outcomes can happen, write the branch with "
            f"torch.cond(pred, true_fn, false_fn, operands) or torch.where.")


def _number_needed(cond: sympy.Expr, cond_text: Optional[str], program_name: str, where: Optional[str],
                   names: dict[sympy.Symbol, str], use: NumberUse) -> DataDependentError:
    """The error for a value read from data needed as a plain Python number (``int(t)``,
    ``math.sqrt(v)``, ``values[t.item()]``, an operator argument that takes only a fixed number),
    telling the value in the user's names."""
    spelled = python_condition(cond, names)
    unnamed = [s for s in cond.free_symbols if s not in names]
    if unnamed and len(use.reads) == 1 and len(cond.free_symbols) == 1:
        spelled = python_condition(cond, {unnamed[0]: use.reads[0]})  # read on the line: y.item()
    elif unnamed and len(use.conversions) == 1 and len(cond.free_symbols) == 1 and isinstance(cond, sympy.Symbol):
        spelled = use.conversions[0][0]  # k = int(n)
    elif unnamed:
        spelled = None
    value = f"`{spelled}`, a value read from tensor data," if spelled else "a value read from tensor data"
    fixes = []
    if use.conversions:
        rewrites = ", ".join(f"{item} for {call}" for call, item in use.conversions)
        fixes.append(f"Read the value with .item() rather than converting the tensor ({rewrites}): .item() "
                     f"gives a symbolic number, which can size tensors (torch.zeros(k), x[:k], "
                     f"x.narrow(0, s, k)) and take part in arithmetic; bound it with torch._check (for a "
                     f"size, torch._check(k >= 0)).")
    fixes.append("Keep the value a tensor (x + t.max() rather than x + float(t.max())): where a fixed number "
                 "is needed (a Python list index, a dim argument, range(), math functions, an operator argument "
                 "that takes only a fixed number), compute in tensors instead (torch.sqrt(t) for math.sqrt, "
                 "torch.tensor(values)[t] for a list indexed by t, torch.where, torch.cond), or compute the "
                 "number once outside forward and keep it as a plain attribute.")
    return DataDependentError(
        f"Could not guard on data-dependent expression {cond_text or cond}: while tracing {program_name}, "
        f"the program needs {value} as a plain Python number; export records shapes, not data, so that "
        f"number is unknown.",
        where=where, cond=cond, fix=" ".join(fixes))


def _condition_words(cond: Any, names: dict[sympy.Symbol, str], written: Any) -> str:
    """The undecided condition as the user's code states it (``x.sum() > 0``, ``n > 2``)."""
    if written is not None:
        return written.condition
    if isinstance(cond, sympy.Basic):
        return unnamed_check(cond, names)[0][len("torch._check("):-1]
    return str(cond)
