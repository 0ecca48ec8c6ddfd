"""The error for a condition on data-read values that tracing cannot decide.

``if y.item() > 2:`` or ``if x.nonzero().shape[0] > 2:`` asks for a value
export does not have: ``.item()``, ``.tolist()``, ``nonzero()`` give unbacked
symbols (``u0``, ``u1``, ...), and a Python branch on them cannot be recorded.
The error names the condition, the user's line, and the ``torch._check`` calls
that would let tracing go on, written with the user's own variable names where
a local of that frame holds the symbol (``torch._check(n > 2)`` rather than
``torch._check(u0 > 2)``).
"""
from __future__ import annotations

from types import FrameType
from typing import Any, Optional

import sympy
import torch
from ..torch_private import pytree

from ..errors import DataDependentError
from ..torch_private.messages import data_dependent_expression
from ..user_frames import user_traceback_entry

def names_of_symbols(frame: Optional[FrameType]) -> dict[sympy.Symbol, str]:
    """Symbol → an expression over the frame's locals that holds it (``n``, ``y.shape[0]``)."""
    names: dict[sympy.Symbol, str] = {}
    if frame is None:
        return names
    for var, value in frame.f_locals.items():
        try:
            leaves = pytree.tree_leaves_with_path(value)
        except Exception:  # noqa: BLE001 (a local pytree cannot walk: skip it)
            continue
        for path, leaf in leaves:
            name = var + pytree.keystr(path)
            sizes = [(name, leaf)] if isinstance(leaf, torch.SymInt) else (
                [(f"{name}.shape[{i}]", d) for i, d in enumerate(leaf.shape)]
                if isinstance(leaf, torch.Tensor) else [])
            for text, size in sizes:
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    names.setdefault(size.node.expr, text)
    return names


def _spelled(cond: Any, names: dict[sympy.Symbol, str]) -> Optional[str]:
    """``cond`` written over the user's names, or None when a symbol has no name."""
    if not isinstance(cond, sympy.Basic) or not cond.free_symbols <= set(names):
        return None
    return str(cond.xreplace({s: sympy.Symbol(n) for s, n in names.items()}))


def explain_data_dependent(e: Exception, program_name: str, where: Optional[str]) -> DataDependentError:
    """The error for a branch on a value read from tensor data that tracing cannot decide.

    Opens with torch's own phrase ("Could not guard on data-dependent
    expression ...") and is also torch's ``GuardOnDataDependentSymNode``, so
    code written for torch.export catches it.
    """
    cond_text = data_dependent_expression(e)
    cond = getattr(e, "cond", None)
    what = (f"Could not guard on data-dependent expression {cond_text}: while tracing {program_name}, the "
            f"program needs to know whether {cond_text} to go on, where u0, u1, ... are values read from "
            f"tensor data (.item(), .tolist(), nonzero(), sizes made from data); export records shapes, "
            f"not data, so it cannot decide this."
            if cond_text else
            f"Could not guard on data-dependent expression: while tracing {program_name}, the program "
            f"branched on a value read from tensor data "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}).")
    entry = user_traceback_entry(e.__traceback__)
    names = names_of_symbols(entry.tb_frame if entry is not None else None)
    holds = _spelled(cond, names) if isinstance(cond, sympy.logic.boolalg.Boolean) else None
    fails = _spelled(sympy.Not(cond), names) if holds is not None else None
    if holds is not None:
        check = f"torch._check({holds}) (or torch._check({fails}) if it never holds)"
    else:
        check = f"torch._check({cond_text})" if cond_text else "torch._check(<condition>)"
    return DataDependentError(
        what, where=where, cond=cond if cond is not None else cond_text,
        fix=f"If the condition always holds for your data, state it before this line with {check}; "
            f"it becomes a runtime assert in the program. For a value used as a size, "
            f"torch._check(v >= 0). If both outcomes can happen, write the branch with "
            f"torch.cond(pred, true_fn, false_fn, operands) or torch.where.")
