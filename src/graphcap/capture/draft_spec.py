"""draft_export's handling of a dynamic_shapes spec the program does not satisfy.

``export`` refuses such a spec with a ConstraintViolationError whose message
ends with ``Suggested fixes:``. draft_export applies those fixes itself
(``refine_dynamic_shapes_from_suggested_fixes``), exports with the refined
spec, and reports each violation with the refined spec written as code the
user can paste. When a message has no fix graphcap can read, the declared
dims become ``Dim.AUTO`` (keeping their bounds), which lets the tracer find
ranges and relations itself.
"""
from __future__ import annotations

import re
from typing import Any

from ..dynamic.dims import INT_MAX, DerivedDim, Dim, DimHint, as_dim
from ..dynamic.suggested_fixes import parse_suggested_fixes, refine_dynamic_shapes_from_suggested_fixes
from ..errors import GraphcapError
from ..torch_private import pytree
from .draft_report import CONSTRAINT_VIOLATION, Problem, SourceLine

_AT_FILE = re.compile(r"\(at (?:File \")?(?P<file>[^\"]+?)\"?(?::|, line )(?P<line>\d+)(?:,)? in (?P<fn>[\w<>.]+)"
                      r"(?::\s*(?P<code>[^)]*))?\)")


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, (dict, list, tuple)) or x is None


def _as_auto(x: Any) -> Any:
    """``Dim.AUTO`` in place of a declared Dim, keeping the bounds the user gave it."""
    d = as_dim(x) if x is not None else None
    if isinstance(d, DerivedDim):
        return Dim.AUTO
    if isinstance(d, Dim):
        return Dim.AUTO(min=d.min if d.min > 0 else None, max=d.max if d.max < INT_MAX else None)
    return x


def _pinned_as_auto(given: Any, refined: Any) -> Any:
    """``refined`` with each Dim of ``given`` that the fixes pinned to one size made ``Dim.AUTO``."""
    if isinstance(refined, dict) and isinstance(given, dict):
        return {k: _pinned_as_auto(given.get(k), v) for k, v in refined.items()}
    if isinstance(refined, (list, tuple)) and isinstance(given, (list, tuple)) and len(given) == len(refined):
        return type(refined)(_pinned_as_auto(g, r) for g, r in zip(given, refined))
    if isinstance(refined, int) and isinstance(as_dim(given) if given is not None else None, Dim):
        return _as_auto(given)
    return refined


def refine(error: BaseException, spec: Any, keep_symbols: bool = False) -> tuple[Any, bool]:
    """The spec with the error's suggested fixes applied, and whether the fixes could be read
    (else every declared dim became ``Dim.AUTO``). ``keep_symbols`` (export's
    ``prefer_deferred_runtime_asserts_over_guards``): a Dim the fixes pin to one size becomes
    ``Dim.AUTO`` instead, which export then keeps as a symbol of that one size, checked at run time."""
    try:
        if parse_suggested_fixes(str(error)):
            refined = refine_dynamic_shapes_from_suggested_fixes(str(error), spec)
            return (_pinned_as_auto(spec, refined) if keep_symbols else refined), True
    except GraphcapError:
        pass
    return pytree.tree_map(_as_auto, spec, is_leaf=_is_leaf), False


def spec_as_code(spec: Any) -> str:
    """The spec as Python: one ``x = Dim(...)`` line per root dim, then ``dynamic_shapes = ...``."""
    roots: dict[str, Dim] = {}

    def text(x: Any) -> str:
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k!r}: {text(v)}" for k, v in x.items()) + "}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(text(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
        d = as_dim(x) if x is not None else None
        if isinstance(d, DerivedDim):
            roots.setdefault(d.root.__name__, d.root)
            return d.__name__
        if isinstance(d, Dim):
            roots.setdefault(d.__name__, d)
            return d.__name__
        if isinstance(d, DimHint):
            return repr(d)
        return repr(x)

    body = text(spec)
    defs = [f"{name} = {dim!r}" for name, dim in roots.items()]
    return "\n".join([*defs, f"dynamic_shapes = {body}"])


def violation_problems(error: BaseException, refined: Any, read_fixes: bool,
                       keep_symbols: bool = False) -> list[Problem]:
    """One problem per violation listed in the error (its ``  - `` lines), each with its line."""
    what = getattr(error, "what", str(error))
    items = [line.strip()[2:] for line in what.splitlines() if line.strip().startswith("- ")] or [what]
    code = spec_as_code(refined)
    how = ("export with the refined spec (draft_export used it):" if read_fixes else
           "no fix could be read from the message; the declared dims became Dim.AUTO:")
    if keep_symbols:
        code += "\n# export(..., dynamic_shapes=dynamic_shapes, prefer_deferred_runtime_asserts_over_guards=True)"
    problems = []
    for item in items:
        m = _AT_FILE.search(item)
        where = (SourceLine(m.group("file"), int(m.group("line")), m.group("fn"), (m.group("code") or "").strip())
                 if m else None)
        problems.append(Problem(CONSTRAINT_VIOLATION, item, where, f"{how}\n{code}",
                                details={"refined_dynamic_shapes": code, "refined_spec": refined}))
    return problems
