"""Plain Python values as tagged JSON, in both directions.

Scalars map to JSON scalars; everything else is a one-key object whose key
says what it is (``{"tuple": [...]}``, ``{"dtype": "torch.float32"}``,
``{"device": "cuda:0"}``). dtypes, layouts and memory formats are looked up
in tables built from torch's own objects, so decoding is a dictionary lookup,
never an import or an ``eval``. Graph-specific kinds (node references,
symbolic ints, tensors in metadata) are handled by the caller through the
``extra`` hooks.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Optional

import torch

from ..errors import SerializationError
from . import schema

DTYPES: dict[str, torch.dtype] = {str(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
LAYOUTS: dict[str, torch.layout] = {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}
MEMORY_FORMATS: dict[str, torch.memory_format] = {
    str(v): v for v in vars(torch).values() if isinstance(v, torch.memory_format)}
_DEVICE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,31}(:\d{1,4})?$")


class Unencodable(Exception):
    """Raised by an encoder for a value the format has no way to write."""


def bad(what: str, where: str = "program.json") -> SerializationError:
    return SerializationError(what, where=where,
                              fix="The file is damaged or was crafted; save the program again with graphcap.save.")


def encode_float(v: float) -> Any:
    return v if math.isfinite(v) else {"float": repr(v)}


def decode_device(text: Any) -> torch.device:
    if not isinstance(text, str) or not _DEVICE_RE.match(text):
        raise bad(f"Malformed device {text!r}.")
    try:
        return torch.device(text)
    except RuntimeError as e:
        raise bad(f"Unknown device {text!r}: {e}") from None


def encode_value(v: Any, extra: Optional[Callable[[Any], Any]] = None) -> Any:
    """``v`` as tagged JSON; ``extra(v)`` handles kinds this module does not know."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int) and type(v) is int:
        return v
    if type(v) is float:
        return encode_float(v)
    if extra is not None:
        handled = extra(v)
        if handled is not NotImplemented:
            return handled
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int) and not isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, float) and not isinstance(v, torch.SymFloat):
        return encode_float(float(v))
    if isinstance(v, torch.dtype):
        return {"dtype": str(v)}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.layout):
        return {"layout": str(v)}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v)}
    if isinstance(v, complex):
        return {"complex": [encode_float(v.real), encode_float(v.imag)]}
    if isinstance(v, torch.Size):
        return {"size": [encode_value(x, extra) for x in v]}
    if type(v) is tuple:
        return {"tuple": [encode_value(x, extra) for x in v]}
    if type(v) is list or isinstance(v, list):
        return {"list": [encode_value(x, extra) for x in v]}
    if isinstance(v, tuple):
        return {"tuple": [encode_value(x, extra) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[encode_value(k, extra), encode_value(x, extra)] for k, x in v.items()]}
    if isinstance(v, slice):
        return {"slice": [encode_value(v.start, extra), encode_value(v.stop, extra), encode_value(v.step, extra)]}
    if v is Ellipsis:
        return {"ellipsis": None}
    raise Unencodable(f"a value of type {type(v).__module__}.{type(v).__qualname__} ({v!r:.80})")


def _table(table: dict[str, Any], key: Any, kind: str) -> Any:
    if not isinstance(key, str) or key not in table:
        raise bad(f"Unknown {kind} {key!r:.80}.")
    return table[key]


def decode_value(j: Any, extra: Optional[Callable[[str, Any], Any]] = None, depth: int = 0) -> Any:
    """Inverse of :func:`encode_value`; ``extra(tag, payload)`` decodes caller tags."""
    if depth > schema.MAX_NESTING:
        raise bad("A value in the file is nested too deeply.")
    if j is None or isinstance(j, (bool, str)):
        return j
    if isinstance(j, int):
        if abs(j) > schema.MAX_INT_LITERAL:
            raise bad(f"An integer in the file is out of range ({j.bit_length()} bits).")
        return j
    if isinstance(j, float):
        return j
    if isinstance(j, list):
        raise bad("An untagged list in the file (lists are written as {\"list\": [...]}).")
    if not isinstance(j, dict) or len(j) != 1:
        raise bad(f"A malformed value in the file: {j!r:.80}.")
    (tag, payload), = j.items()

    def sub(x: Any) -> Any:
        return decode_value(x, extra, depth + 1)

    def items(x: Any, n: Optional[int] = None) -> list[Any]:
        if not isinstance(x, list) or (n is not None and len(x) != n):
            raise bad(f"A malformed {tag!r} value in the file.")
        return x

    if tag == "tuple":
        return tuple(sub(x) for x in items(payload))
    if tag == "list":
        return [sub(x) for x in items(payload)]
    if tag == "size":
        return torch.Size([sub(x) for x in items(payload)])
    if tag == "dict":
        out = {}
        for pair in items(payload):
            k, x = items(pair, 2)
            key = sub(k)
            try:
                out[key] = sub(x)
            except TypeError:
                raise bad("A dict key in the file is not hashable.") from None
        return out
    if tag == "float":
        if payload not in ("inf", "-inf", "nan"):
            raise bad(f"Malformed float {payload!r:.40}.")
        return float(payload)
    if tag == "complex":
        re_, im = (sub(x) for x in items(payload, 2))
        if not all(isinstance(x, (int, float)) for x in (re_, im)):
            raise bad("Malformed complex value.")
        return complex(re_, im)
    if tag == "dtype":
        return _table(DTYPES, payload, "dtype")
    if tag == "layout":
        return _table(LAYOUTS, payload, "layout")
    if tag == "memory_format":
        return _table(MEMORY_FORMATS, payload, "memory format")
    if tag == "device":
        return decode_device(payload)
    if tag == "slice":
        return slice(*(sub(x) for x in items(payload, 3)))
    if tag == "ellipsis":
        return Ellipsis
    if extra is not None:
        return extra(tag, payload)
    raise bad(f"Unknown value tag {tag!r:.40} in the file.")
