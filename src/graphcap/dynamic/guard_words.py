"""How guard problems are worded and recorded: ranges, source lines, Dim names, fixes.

Shared by the guard check (``guard_checks``), the relation rules
(``relations``) and the range step (``ranges``).
"""
from __future__ import annotations

import traceback
from typing import Any, Iterable, Optional

import sympy

from ..errors import ConstraintViolationError
from ..torch_private.shapes import count_deferred_assert, deferred_asserts
from ..torch_private.symbolic import ValueRanges, int_oo
from ..user_frames import ENGINE_PACKAGE_DIRS, GRAPHCAP_TRANSPARENT_FILES
from .symbols import RootSymbol

_TORCH_DIR, _GRAPHCAP_DIR = ENGINE_PACKAGE_DIRS


def finite_int(v: Any) -> Optional[int]:
    if v in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    return int(v)


def range_words(name: str, vr: ValueRanges) -> str:
    lo, hi = finite_int(vr.lower), finite_int(vr.upper)
    if hi is None:
        return f"{name} >= {lo}"
    return f"{lo} <= {name} <= {hi}"


def dim_fix(name: str, lo: Optional[int], hi: Optional[int]) -> str:
    """The ``Suggested fixes:`` line giving Dim ``name`` the range [lo, hi]; a range of one size
    is that size (``name = 3``: a Dim takes more than one value)."""
    if lo is not None and lo == hi:
        return f"{name} = {lo}"
    parts = []
    if lo is not None and lo > 0:
        parts.append(f"min={lo}")
    if hi is not None:
        parts.append(f"max={hi}")
    return f"{name} = Dim('{name}'" + "".join(f", {p}" for p in parts) + ")"


def constraint_violation(names: Iterable[str], problems: list[str], fixes: Iterable[str],
                         advice: str) -> ConstraintViolationError:
    """The one error listing every problem of a spec, torch.export's header first and the
    ``Suggested fixes:`` lines last (what the refine helpers read)."""
    listing = "\n".join(f"  - {p}" for p in problems)
    fix_lines = list(fixes)
    suggested = ("\nSuggested fixes:\n" + "\n".join(f"  {f}" for f in fix_lines)) if fix_lines else ""
    # only Dim.DYNAMIC dims the program fixed: nothing for the refine helper to apply
    how = ("Change the spec as suggested (graphcap.refine_dynamic_shapes_from_suggested_fixes(str(e), "
           "dynamic_shapes) does it for you)" + advice) if fix_lines else (
        "Mark each dim listed Dim.STATIC, or Dim.AUTO to let export fix it, or change the code that fixes "
        "it; with AdditionalInputs (every dim that varies across its example sets is Dim.DYNAMIC), leave "
        "out the example sets whose sizes differ there.")
    return ConstraintViolationError(
        f"Constraints violated ({', '.join(names)})! The program does not work for every size the "
        f"dynamic_shapes spec allows:\n{listing}",
        where="export(..., dynamic_shapes=...)",
        fix=how + suggested)


def user_location(sloc: Any) -> str:
    """torch's record of the user line a guard came from (``file:line in fn: code``), or "" where
    it names code made at run time (``<string>:1 in <lambda>``, as a strict trace's guards may):
    no line the user can open."""
    user = (getattr(sloc, "maybe_user_loc", None) or "").strip()
    return "" if user.startswith(_GENERATED) else user


# file names of code made at run time: exec/eval'd text and fx's generated forwards (a user's
# ``<stdin>`` or notebook cell is a real line and stays)
_GENERATED = ("<string>", "<eval_with_key")


def where_text(sloc: Any) -> str:
    """The user source line of a guard, as `` (at file:line in fn: code)``."""
    if sloc is None:
        return ""
    user = user_location(sloc)
    if user:
        return f" (at {user})"
    frame = getattr(sloc, "framework_loc", None)
    # code made at run time (a strict trace's generated functions) is no line the user can open:
    # no location rather than that one
    if isinstance(frame, traceback.FrameSummary) and not frame.filename.startswith(_GENERATED) \
            and not in_framework(sloc):
        code = f": {frame.line.strip()}" if frame.line else ""
        return f" (at {frame.filename}:{frame.lineno} in {frame.name}{code})"
    return ""


def in_framework(sloc: Any) -> bool:
    """Whether a guard was raised inside torch (an operator's own logic), not by user code.

    An operator's C++ code (``t[..., :n] = v`` checking the value's sizes against
    the slice's) has no Python frame: the innermost one is then graphcap's own
    function mode passing the call on, which counts as torch's too (graphcap's
    replacements of the user's builtins excepted: they speak for the user)."""
    frame = getattr(sloc, "framework_loc", None)
    if not isinstance(frame, traceback.FrameSummary):
        return False
    return frame.filename.startswith(_TORCH_DIR) or (
        frame.filename.startswith(_GRAPHCAP_DIR) and not frame.filename.endswith(GRAPHCAP_TRANSPARENT_FILES))


class DimNamer:
    """Print expressions over symbols with the user's Dim names."""

    def __init__(self, roots: list[RootSymbol]):
        self.sub = {r.symbol: sympy.Symbol(r.name, integer=True) for r in roots}

    def __call__(self, expr: Any) -> str:
        return str(sympy.sympify(expr).xreplace(self.sub))


def implied_by(guard: Any, ranges: dict) -> bool:
    """Whether ``guard`` holds for every value of ``ranges`` (decided over the range, see
    ``range_decide``: floor division, modulo and Min/Max included, not only what simplifies)."""
    from .range_decide import holds_over_ranges
    return holds_over_ranges(guard, ranges)


def defer_assert(env: Any, cond: Any, message: str) -> None:
    """Assert ``cond`` in the graph (checked at run time) instead of requiring it of the spec."""
    from torch.fx.experimental.symbolic_shapes import RuntimeAssert

    from ..torch_private.shapes import CapturedTraceback
    deferred_asserts(env).setdefault(None, []).append(
        RuntimeAssert(cond, message, CapturedTraceback.extract(skip=2)))
    count_deferred_assert(env)
