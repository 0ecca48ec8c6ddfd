"""Apply the ``Suggested fixes:`` of a constraint-violation message to a spec."""
from __future__ import annotations

import re
from typing import Any

from ..errors import ExportInputError
from ..torch_private import pytree
from .dims import DerivedDim, Dim, as_dim, root_dims

_FIX_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*=\s*(.+?)\s*$")
_DIM_CALL = re.compile(r"^Dim\(\s*['\"]([A-Za-z_][A-Za-z_0-9]*)['\"]\s*((?:,\s*(?:min|max)\s*=\s*-?\d+\s*)*)\)$")
_AFFINE = re.compile(r"^(?:(\d+)\s*\*\s*)?([A-Za-z_][A-Za-z_0-9]*)(?:\s*([+-])\s*(\d+))?$")


_HEADER = "Suggested fixes:"


def _header_line(lines: list[str]) -> int | None:
    return next((i for i, line in enumerate(lines) if line.strip() == _HEADER), None)


def has_suggested_fixes(msg: Any) -> bool:
    """Whether a constraint-violation message (or the error itself) has a ``Suggested fixes:``
    section (graphcap's own message format, which this module reads)."""
    return _header_line(str(msg).splitlines()) is not None


def parse_suggested_fixes(msg: str) -> dict[str, Any]:
    """The ``name = ...`` lines under ``Suggested fixes:``; stops at the first other line."""
    lines = msg.splitlines()
    start = _header_line(lines)
    if start is None:
        raise ExportInputError("The message has no 'Suggested fixes:' section.",
                               fix="Pass the text of a ConstraintViolationError raised by graphcap.export.")
    fixes: dict[str, str] = {}
    for line in lines[start + 1:]:
        m = _FIX_LINE.match(line)
        if not line.startswith("  ") or m is None:
            break
        fixes[m.group(1)] = m.group(2)
    return fixes


def refine_dynamic_shapes_from_suggested_fixes(msg: Any, dynamic_shapes: Any) -> Any:
    """Apply the ``Suggested fixes:`` of a constraint-violation message to a spec.

    ``x = Dim('x', min=5, max=16)`` gives ``x`` a new range, ``x = 8`` makes it
    static, ``y = x`` makes ``y`` the same Dim as ``x``, ``y = 2*x + 1`` makes it
    derived from ``x``. Works on graphcap's and torch.export's Dim objects; the
    result uses graphcap's.

    Args:
        msg: the :class:`ConstraintViolationError` (or its message text).
        dynamic_shapes: the spec that was passed to ``export``.

    Returns:
        A new spec of the same structure with the fixes applied.

    Raises:
        ExportInputError: the message holds no suggested fixes, or a fix names a
            dimension the spec does not have.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args, dynamic_shapes=spec)
        ... except graphcap.ConstraintViolationError as e:
        ...     spec = graphcap.refine_dynamic_shapes_from_suggested_fixes(e, spec)
        ...     ep = graphcap.export(model, args, dynamic_shapes=spec)
    """
    fixes = parse_suggested_fixes(str(msg))
    roots = root_dims(dynamic_shapes)

    new: dict[str, Any] = {}

    def resolve(name: str) -> Any:
        if name in new:
            return new[name]
        text = fixes.get(name)
        if text is None:
            new[name] = roots.get(name)
            return new[name]
        if re.fullmatch(r"-?\d+", text):
            new[name] = int(text)
        elif (m := _DIM_CALL.match(text)) is not None:
            bounds = dict(re.findall(r"(min|max)\s*=\s*(-?\d+)", m.group(2)))
            new[name] = Dim(m.group(1), min=int(bounds["min"]) if "min" in bounds else None,
                            max=int(bounds["max"]) if "max" in bounds else None)
        elif (m := _AFFINE.match(text)) is not None:
            factor, other, sign, offset = m.groups()
            base = resolve(other) if other in fixes else roots.get(other)
            if base is None:
                base = Dim(other)
                roots[other] = base
            if isinstance(base, int):
                value = base * int(factor or 1) + (int(offset or 0) * (-1 if sign == "-" else 1))
                new[name] = value
            else:
                out = base
                if factor:
                    out = out * int(factor)
                if offset:
                    out = out + int(offset) if sign == "+" else out - int(offset)
                new[name] = out
        else:
            raise ExportInputError(f"Cannot read the suggested fix {name} = {text}.",
                                   fix="Apply this fix to the spec by hand.")
        return new[name]

    for name in fixes:
        resolve(name)

    def replace(x: Any) -> Any:
        d = as_dim(x)
        if isinstance(d, DerivedDim) and d.root.__name__ in new:
            root = new[d.root.__name__]
            if isinstance(root, int):
                return int(d.fn(root))
            # the derived dim's text with its root's name written as what replaces it: ``d + 1``
            # with ``d = 3*_d - 1`` is ``(3*_d - 1) + 1``, as printed specs read
            with_root = root.__name__ if not isinstance(root, DerivedDim) else f"({root.__name__})"
            name = re.sub(rf"\b{re.escape(d.root.__name__)}\b", lambda _m: with_root, d.__name__)
            if isinstance(root, DerivedDim):
                return DerivedDim(root.root, (lambda f, g: (lambda r: f(g(r))))(d.fn, root.fn), name)
            return DerivedDim(root, d.fn, name)
        if isinstance(d, Dim) and not isinstance(d, DerivedDim) and d.__name__ in new:
            return new[d.__name__]
        return x

    return pytree.tree_map(replace, dynamic_shapes,
                           is_leaf=lambda x: not isinstance(x, (dict, list, tuple)) or x is None)
