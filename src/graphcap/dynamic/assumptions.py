"""What export assumed about the input sizes, each with the user source line that made it.

The guard check (``guard_checks``) raises when an assumption contradicts the
spec; when it does not, the assumptions still matter to whoever deploys the
program: a ``Dim.AUTO`` dim fixed to 3 by ``if x.shape[1] == 3``, a range
narrowed by a slice, two dims found equal by ``x + y``. The ``ShapeEnv``
knows them only while the export runs, so :func:`record` reads them then and
keeps plain records (no sympy objects, no frames) that the program carries
(``ep.export_assumptions``) and the HTML report (``graphcap.report``) lists.

Runtime asserts are not recorded here: they are nodes of the graph
(``aten._assert_scalar``) and the report reads them from there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..torch_private.shapes import guards, replacement_locations, symbol_range_locations, symbol_ranges
from ..torch_private.symbolic import ValueRanges
from .guard_words import DimNamer, in_framework, range_words, user_location
from .symbols import SymbolicInputs


@dataclass(frozen=True)
class Assumption:
    """One thing export assumed.

    ``kind`` is ``"specialization"`` (a dim fixed to a constant),
    ``"relation"`` (a dim found equal to an expression of others),
    ``"range"`` (a dim's range narrowed from the one declared) or ``"guard"``
    (any other condition a branch or operator needed). ``where`` is the user's
    source line (``file:line in fn: code``) or ``""`` when torch's own code
    made it (``framework`` is then True)."""

    kind: str
    dim: str
    text: str
    where: str = ""
    framework: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim, "text": self.text, "where": self.where,
                "framework": self.framework}


def how_to_keep_dynamic(a: Any) -> str:
    """What would keep the dim of an assumption dynamic, in words a user can act on.

    A specialization made by the user's own line can only be undone in the code
    (the spec cannot make a size dynamic that the code compares with a constant);
    one made inside torch (a weight's shape, a size tied to one) is not the spec's to undo. A
    relation is kept dynamic by one shared ``Dim``; a narrowed range by declaring
    it. ``a`` is an :class:`Assumption` or its ``to_dict()``."""
    field = a.get if isinstance(a, dict) else lambda k, d=None: getattr(a, k, d)
    kind, dim, text = field("kind"), field("dim") or "", field("text") or ""
    if kind == "specialization":
        if field("framework"):
            return ("not through the spec: torch's code at that line fixes it (a weight's shape, "
                    "or equality with a size already fixed)")
        return (f"make that line independent of the size; a named Dim for {dim} (not Dim.AUTO) "
                "makes export stop there and say why")
    if kind == "relation":
        return f"dynamic already, tied to another input's dim: give both one Dim in dynamic_shapes ({text})"
    if kind == "range":
        return f"dynamic already, in a narrower range: declare it in its Dim ({text})"
    return "dynamic already: the program checks this when it runs" if kind == "guard" else ""


def _where(sloc: Any) -> str:
    """The user's line of a ShapeEnv source location, without the parentheses of ``where_text``."""
    if sloc is None:
        return ""
    user = user_location(sloc)
    if user:
        return user
    frame = getattr(sloc, "framework_loc", None)
    filename = getattr(frame, "filename", None)
    if filename and not in_framework(sloc):
        code = f": {frame.line.strip()}" if getattr(frame, "line", None) else ""
        return f"{filename}:{frame.lineno} in {frame.name}{code}"
    return ""


def _text(expr: Any, namer: DimNamer) -> str:
    try:
        return namer(expr)
    except Exception:  # an expression sympy cannot re-print: keep its own text
        return str(expr)


def record(mode: Any, inputs: Optional[SymbolicInputs]) -> list[Assumption]:
    """The specializations, relations, narrowed ranges and guards of the finished trace.

    Called after the guard check passed, while ``mode``'s ShapeEnv still holds
    them. A static export (no ``dynamic_shapes``) has no symbols: nothing to
    record, the signature's sizes say it all."""
    env = getattr(mode, "shape_env", None)
    if env is None or inputs is None or not inputs.roots:
        return []
    namer = DimNamer(inputs.roots)
    out: list[Assumption] = []
    seen: set[str] = set()

    def add(kind: str, dim: str, text: str, sloc: Any) -> None:
        if text in seen:
            return
        seen.add(text)
        out.append(Assumption(kind, dim, text, _where(sloc), in_framework(sloc)))

    for r in inputs.roots:
        expr = env.replace(r.symbol)
        sloc = replacement_locations(env).get(r.symbol)
        if expr.is_number:
            add("specialization", r.name, f"{r.name} = {expr}", sloc)
        elif expr != r.symbol:
            add("relation", r.name, f"{r.name} = {_text(expr, namer)}", sloc)
        else:
            vr = symbol_ranges(env).get(r.symbol)
            declared = r.declared
            if vr is not None and (vr.lower > declared.lower or vr.upper < declared.upper):
                narrowed = ValueRanges(max(vr.lower, declared.lower), min(vr.upper, declared.upper))
                slocs = symbol_range_locations(env).get(r.symbol)
                sloc = None
                if slocs is not None:
                    sloc = slocs.lower if narrowed.lower != declared.lower else slocs.upper
                add("range", r.name, range_words(r.name, narrowed), sloc)
    known = {r.symbol for r in inputs.roots}
    for guard in guards(env)[inputs.first_program_guard:]:
        g = env.simplify(guard.expr)
        syms = getattr(g, "free_symbols", set())
        if not syms or not syms & known:
            continue
        add("guard", ", ".join(sorted(namer(s) for s in syms & known)), _text(g, namer), guard.sloc)
    return out
