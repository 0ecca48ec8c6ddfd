"""Read fields of an untrusted program.json: each one type-checked before use.

Every reader of the file goes through :func:`field` and :func:`ident`, so a
malformed file is refused with a ``SerializationError`` naming the place.
"""
from __future__ import annotations

import re
from typing import Any

from .values import bad

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


def field(d: Any, key: str, kind: Any, where: str, optional: bool = False) -> Any:
    """``d[key]`` after checking ``d`` is an object and the value has type ``kind`` (a missing or
    null field is None when ``optional``); anything else is a malformed-file error naming ``where``."""
    if not isinstance(d, dict):
        raise bad(f"Expected an object at {where}.")
    if key not in d:
        if optional:
            return None
        raise bad(f"Missing field {key!r} at {where}.")
    value = d[key]
    if optional and value is None:
        return None
    if kind is int and type(value) is not int or kind is not int and not isinstance(value, kind):
        raise bad(f"Field {key!r} at {where} has the wrong type ({type(value).__name__}).")
    return value


def ident(name: Any, what: str) -> str:
    """``name`` if it is a plain identifier (not dunder, at most 255 characters), else a malformed-file error."""
    if not isinstance(name, str) or not _IDENT.match(name) or name.startswith("__"):
        raise bad(f"Malformed {what} {name!r:.80}.")
    return name
