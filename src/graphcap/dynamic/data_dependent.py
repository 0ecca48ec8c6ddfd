"""The error for a branch on a value read from tensor data."""
from __future__ import annotations

import re
from typing import Optional

from ..errors import UnsupportedError


_DD_EXPR = re.compile(r"data-dependent expression (.+?) \(unhinted")


def explain_data_dependent(e: Exception, program_name: str, where: Optional[str]) -> UnsupportedError:
    """The error for a branch on a value read from tensor data that tracing cannot decide.

    Names the condition (over the unbacked symbols ``u0``, ... that stand
    for the values read with ``.item()``, ``nonzero()``, ``tolist()``) and the
    two ways out: assert it with ``torch._check`` if it always holds, or keep
    both branches with ``torch.cond``.
    """
    m = _DD_EXPR.search(str(e))
    cond = m.group(1) if m else None
    what = (f"While tracing {program_name}, the program needs to know whether {cond} to go on, where "
            f"u0, u1, ... are values read from tensor data (.item(), .tolist(), nonzero(), sizes made "
            f"from data); export records shapes, not data, so it cannot decide this."
            if cond else
            f"While tracing {program_name}, the program branched on a value read from tensor data "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}).")
    check = f"torch._check({cond})" if cond else "torch._check(<condition>)"
    return UnsupportedError(
        what, where=where,
        fix=f"If the condition always holds for your data, state it before this line with {check} "
            f"(it becomes a runtime assert in the program); for a value used as a size, "
            f"torch._check_is_size(v) or torch._check(v >= 0). If both outcomes can happen, write the "
            f"branch with torch.cond(pred, true_fn, false_fn, operands) or torch.where.")
