"""Comparing the program's outputs with eager's: structure, dtype, shape, values.

Tolerances default per dtype (the program runs the same kernels as eager, so
these are tight; decompositions and fused kernels stay well inside them):

    float64 / complex128   rtol 1e-7   atol 1e-7
    float32 / complex64    rtol 1e-5   atol 1e-5
    float16                rtol 1e-3   atol 1e-3
    bfloat16               rtol 1.6e-2 atol 1e-2
    integers, bool         exact

An element passes when ``|got - expected| <= atol + rtol * |expected|``; NaN
matches NaN and an infinity the same infinity. The errors reported are the
largest absolute difference and the largest relative one (over elements whose
expected value is not zero).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from .. import auto_flatten
from ..torch_private import pytree

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7), torch.complex128: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5), torch.complex64: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2),
}


@dataclass
class OutputCheck:
    """One output leaf (or a buffer / input written by the call) of one input set."""

    name: str  # "[0]", "['logits']", "buffer n", "input x (written)"
    shape: Optional[list[int]]
    dtype: Optional[str]
    max_abs: Optional[float]
    max_rel: Optional[float]
    ok: bool
    note: str = ""  # why it failed, when it is not the values

    def as_dict(self) -> dict[str, Any]:
        return dict(name=self.name, shape=self.shape, dtype=self.dtype, max_abs_error=self.max_abs,
                    max_rel_error=self.max_rel, ok=self.ok, note=self.note)


def tolerance(dtype: torch.dtype, rtol: Optional[float], atol: Optional[float]) -> tuple[float, float]:
    default = TOLERANCES.get(dtype, (0.0, 0.0))
    return (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)


def compare_tensors(name: str, expected: torch.Tensor, got: Any, rtol: Optional[float],
                    atol: Optional[float]) -> OutputCheck:
    shape, dtype = list(expected.shape), str(expected.dtype).replace("torch.", "")
    if not isinstance(got, torch.Tensor):
        return OutputCheck(name, shape, dtype, None, None, False, f"the program gave {type(got).__name__}")
    if got.dtype != expected.dtype:
        return OutputCheck(name, shape, dtype, None, None, False, f"dtype {got.dtype} (eager {expected.dtype})")
    if got.shape != expected.shape:
        return OutputCheck(name, shape, dtype, None, None, False,
                           f"shape {list(got.shape)} (eager {shape})")
    r, a = tolerance(expected.dtype, rtol, atol)
    exp, out = expected.detach().cpu(), got.detach().cpu()
    if exp.numel() == 0:
        return OutputCheck(name, shape, dtype, 0.0, 0.0, True)
    if not (exp.is_floating_point() or exp.is_complex()):
        exp, out = exp.to(torch.float64), out.to(torch.float64)
        r, a = 0.0, 0.0
    else:
        exp = exp.to(torch.complex128 if exp.is_complex() else torch.float64)
        out = out.to(exp.dtype)
    both_nan = torch.isnan(exp) & torch.isnan(out)
    same_inf = torch.isinf(exp) & (exp == out)
    diff = (out - exp).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    scale = exp.abs()
    nonzero = scale > 0
    rel = (diff[nonzero] / scale[nonzero]).max().item() if bool(nonzero.any()) else 0.0
    ok = bool((diff <= a + r * torch.where(torch.isfinite(scale), scale, torch.zeros_like(scale))).all())
    return OutputCheck(name, shape, dtype, float(diff.max().item()), float(rel), ok)


def compare_outputs(expected: Any, got: Any, rtol: Optional[float], atol: Optional[float]) -> list[OutputCheck]:
    """Every output leaf of eager's result against the program's, named by its path."""
    exp_leaves, exp_spec = auto_flatten.flatten_with_path(expected)
    got_leaves, got_spec = auto_flatten.flatten(got)
    if type(expected) is not type(got) or exp_spec != got_spec:
        return [OutputCheck("(structure)", None, None, None, None, False,
                            f"the program returned {_drawn(got_spec)}, eager {_drawn(exp_spec)}")]
    checks = []
    for (path, e), g in zip(exp_leaves, got_leaves):
        name = ("output" + pytree.keystr(path)) if path else "output"
        if isinstance(e, torch.Tensor):
            checks.append(compare_tensors(name, e, g, rtol, atol))
        else:
            same = type(e) is type(g) and (e == g or (e != e and g != g))
            checks.append(OutputCheck(name, None, type(e).__name__, None, None, bool(same),
                                      "" if same else f"the program gave {g!r}, eager {e!r}"))
    return checks


def _drawn(spec: Any) -> str:
    try:
        return repr(auto_flatten.unflatten(["*"] * spec.num_leaves, spec)).replace("'*'", "*")
    except Exception:
        return str(spec)
