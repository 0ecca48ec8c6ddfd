"""What the audit probes share to compare graphcap's programs with torch.export's and with eager.

A probe run as ``python bench/probes/<name>.py`` has this folder on its path, so it imports these
by name (``from _compare import roundtrip, same``), as the benchmarks import ``harness``.
"""
from __future__ import annotations

import dataclasses
import io
import math
from typing import Any

import torch
import torch.export as te

import graphcap

_FLOAT8 = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))


def roundtrip(ep: Any) -> Any:
    """``ep`` saved to bytes and loaded again, by the library that made it: ``graphcap.save`` /
    ``graphcap.load`` for a graphcap program, ``torch.export.save`` / ``load`` for torch's."""
    ours = isinstance(ep, graphcap.ExportedProgram)
    buf = io.BytesIO()
    (graphcap.save if ours else te.save)(ep, buf)
    return (graphcap.load if ours else te.load)(io.BytesIO(buf.getvalue()))


def same(a: Any, b: Any, tol: float = 1e-5) -> bool:
    """Whether two results hold the same values: tensors of one shape and dtype whose elements agree
    (floating and complex ones within ``tol``, absolute and relative, NaN matching NaN; quantized ones
    by their integers), lists and tuples of as many such values, dicts with the same keys, dataclasses
    of one class field by field, and other values equal (a float NaN matching NaN)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_quantized:
            return torch.equal(a.int_repr(), b.int_repr())
        if a.dtype in _FLOAT8:
            a, b = a.float(), b.float()
        if a.is_floating_point() or a.is_complex():
            return torch.allclose(a, b, equal_nan=True, atol=tol, rtol=tol)
        return torch.equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name), tol)
                                          for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def error_line(e: BaseException, width: int = 150) -> str:
    """An error as one line of a probe's table: its class and the first line of its text that is not
    blank, cut to ``width`` characters."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:width] if lines else ''}"
