"""Side effects, module hooks and parametrizations in forward: graphcap against torch.export.

Each probe builds a fresh model, exports it with graphcap and with torch.export
(strict=False and strict=True), and reports: whether it exported, the warnings the
export raised (first words), whether ``ep.module()`` matches a fresh eager model on the
example and on another input, whether the decomposed and saved/loaded programs match,
and the side effect after export and after one ``module()`` call (the probe's ``state``
function: a counter, a list's length, an attribute's type). Random probes report whether
two calls of the program differ (as eager's do) instead of comparing numbers.

    name | lib/mode | verdict

Run: PYTHONPATH=src python bench/probes/side_effects_audit.py [name-substring ...]
"""
from __future__ import annotations

import io
import logging
import sys
import warnings
from typing import Any, Callable

import torch
import torch.export as te
import torch.nn as nn
import torch.nn.utils.parametrize as P
from _compare import roundtrip
from torch.nn.utils import parametrizations

import graphcap

logging.disable(logging.WARNING)
LOG = logging.getLogger("side_effects_audit")

PROBES: list[tuple[str, Callable[[], tuple[nn.Module, tuple, tuple, Callable[[nn.Module], Any]]], str]] = []


def probe(kind: str = "exact"):
    def deco(fn):
        PROBES.append((fn.__name__, fn, kind))
        return fn
    return deco


def none(_m):
    return None


# ------------------------------------------------------------------------ hooks

@probe()
def pre_hook_root():
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def hook_root_output():
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    m.register_forward_hook(lambda mod, args, out: out * 2)
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


class Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *, scale=1.0):
        return self.lin(x) * scale


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        return self.sub(x, scale=2.0) + 1


@probe()
def pre_hook_sub_kwargs():
    torch.manual_seed(0)
    m = Outer()
    m.sub.register_forward_pre_hook(lambda mod, a, kw: (a, {**kw, "scale": kw["scale"] * 3}), with_kwargs=True)
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def hook_sub_kwargs():
    torch.manual_seed(0)
    m = Outer()
    m.sub.register_forward_hook(lambda mod, a, kw, out: out + kw["scale"], with_kwargs=True)
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def hook_sub_stores():
    torch.manual_seed(0)
    m = Outer()
    seen: list = []
    m.seen = seen  # type: ignore[assignment]
    m.sub.register_forward_hook(lambda mod, a, out: seen.append(out))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), lambda mm: [type(t).__name__ for t in mm.seen]


@probe()
def hook_removed_handle():
    torch.manual_seed(0)
    m = Outer()
    h = m.sub.register_forward_hook(lambda mod, a, out: out * 0)
    h.remove()
    m.sub.register_forward_pre_hook(lambda mod, a: None)  # returns None: input unchanged
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


class GlobalHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.lin(x))  # one submodule, called twice


@probe()
def global_hook_and_shared_submodule():
    torch.manual_seed(0)
    while _HANDLES:  # one global hook at a time: the fresh eager model registers it again
        _HANDLES.pop().remove()
    m = GlobalHooked()
    m.lin.register_forward_pre_hook(lambda mod, a: (a[0] * 0.5,))
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, a, out: out + 1 if isinstance(mod, nn.Linear) else None)
    _HANDLES.append(handle)
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


_HANDLES: list = []


# ------------------------------------------------------------------------ parametrizations

class Symmetric(nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(-1, -2)


@probe()
def parametrize_custom():
    torch.manual_seed(0)
    m = nn.Linear(4, 4)
    P.register_parametrization(m, "weight", Symmetric())
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def parametrize_cached():
    torch.manual_seed(0)
    m = nn.Linear(4, 4)
    P.register_parametrization(m, "weight", Symmetric())

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            with P.cached():
                return self.m(x) + self.m(x)
    return W(), (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def orthogonal():
    torch.manual_seed(0)
    m = parametrizations.orthogonal(nn.Linear(4, 4))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def weight_norm_new():
    torch.manual_seed(0)
    m = parametrizations.weight_norm(nn.Linear(4, 3))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def weight_norm_old():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = nn.utils.weight_norm(nn.Linear(4, 3))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe()
def spectral_norm_eval():
    torch.manual_seed(0)
    m = parametrizations.spectral_norm(nn.Linear(4, 3)).eval()
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), none


@probe("train")
def spectral_norm_train():
    torch.manual_seed(0)
    m = parametrizations.spectral_norm(nn.Linear(4, 3))
    return m, (torch.randn(2, 4),), (torch.randn(2, 4),), \
        lambda mm: round(float(mm.parametrizations.weight[0]._u.sum()), 4)


# ------------------------------------------------------------------------ assignments

class CacheAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = None

    def forward(self, x):
        self.cache = x * 2
        return self.cache + 1


@probe()
def tensor_attr_assigned():
    return CacheAttr(), (torch.randn(2, 3),), (torch.randn(2, 3),), lambda mm: type(mm.cache).__name__


class CacheRead(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = torch.zeros(3)

    def forward(self, x):
        out = x + self.cache
        self.cache = x.sum(0)
        return out


@probe("stateful")
def tensor_attr_carried():
    return CacheRead(), (torch.randn(2, 3),), (torch.randn(2, 3),), \
        lambda mm: round(float(mm.cache.sum()), 4) if isinstance(mm.cache, torch.Tensor) else mm.cache


class NewBuffer(nn.Module):
    def forward(self, x):
        self.register_buffer("made", x.sum(0))
        return x + self.made


@probe()
def buffer_registered_in_forward():
    return NewBuffer(), (torch.randn(2, 3),), (torch.randn(2, 3),), lambda mm: "made" in dict(mm.named_buffers())


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.f = 0.5

    def forward(self, x):
        self.n += 1
        self.f *= 2
        return x + self.n + self.f


@probe("stateful")
def int_float_counter():
    return Counter(), (torch.randn(2, 3),), (torch.randn(2, 3),), lambda mm: (mm.n, mm.f)


class Lists(nn.Module):
    def __init__(self):
        super().__init__()
        self.hist: list = []
        self.d: dict = {}
        self.names: list = []

    def forward(self, x):
        self.hist.append(x.sum())
        self.d["last"] = x.mean()
        self.names.append("called")
        return x * len(self.hist)


@probe("stateful")
def list_dict_appended():
    return Lists(), (torch.randn(2, 3),), (torch.randn(2, 3),), \
        lambda mm: (len(mm.hist), sorted(mm.d), len(mm.names))


GLOBAL_COUNT = 0
GLOBAL_LIST: list = []


class Globals(nn.Module):
    def forward(self, x):
        global GLOBAL_COUNT
        GLOBAL_COUNT += 1
        GLOBAL_LIST.append(x * 2)
        return x + GLOBAL_COUNT


@probe("stateful")
def globals_mutated():
    global GLOBAL_COUNT
    GLOBAL_COUNT = 0
    GLOBAL_LIST.clear()
    return Globals(), (torch.randn(2, 3),), (torch.randn(2, 3),), \
        lambda mm: (GLOBAL_COUNT, [type(t).__name__ for t in GLOBAL_LIST])


# ------------------------------------------------------------------------ RNG

class SeededRand(nn.Module):
    def forward(self, x):
        torch.manual_seed(7)
        return x + torch.rand(x.shape)


@probe("seeded")
def manual_seed_in_forward():
    return SeededRand(), (torch.randn(2, 3),), (torch.randn(2, 3),), none


class RandLike(nn.Module):
    def forward(self, x):
        return x + torch.randn_like(x) + torch.rand(2, 3)


@probe("random")
def randn_like_unseeded():
    return RandLike(), (torch.randn(2, 3),), (torch.randn(2, 3),), none


@probe("random")
def dropout_train():
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    return m, (torch.randn(4, 8),), (torch.randn(4, 8),), none


class Bernoulli(nn.Module):
    def forward(self, x):
        return torch.bernoulli(torch.full_like(x, 0.5)) * x + torch.multinomial(x.abs() + 0.1, 2).float().sum()


@probe("random")
def bernoulli_multinomial():
    return Bernoulli(), (torch.randn(2, 3),), (torch.randn(2, 3),), none


class Generator(nn.Module):
    def forward(self, x):
        g = torch.Generator().manual_seed(3)
        return x + torch.rand(x.shape, generator=g)


@probe("seeded")
def local_generator():
    return Generator(), (torch.randn(2, 3),), (torch.randn(2, 3),), none


# ------------------------------------------------------------------------ printing

class Prints(nn.Module):
    def forward(self, x):
        print("forward called", x.shape)
        LOG.warning("logged %s", x.shape[0])
        warnings.warn("user warning in forward", stacklevel=2)
        return x * 2


@probe()
def print_log_warn():
    return Prints(), (torch.randn(2, 3),), (torch.randn(2, 3),), none


# ------------------------------------------------------------------------ cond

class CondParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x * self.w + self.b, lambda x: x - self.w, (x,))


@probe()
def cond_closes_over_parameter():
    torch.manual_seed(0)
    return CondParam(), (torch.randn(2, 3),), (-torch.randn(2, 3).abs(),), none


class CondSub(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x), lambda x: self.lin(x) * 2, (x,))


@probe()
def cond_calls_submodule():
    torch.manual_seed(0)
    return CondSub(), (torch.randn(2, 3).abs(),), (-torch.randn(2, 3).abs(),), none


# ------------------------------------------------------------------------ running


def _short(w: warnings.WarningMessage) -> str:
    text = str(w.message).replace("\n", " ")
    return f"{w.category.__name__}:{text[:90]}"


def _close(a: Any, b: Any) -> bool:
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    return len(la) == len(lb) and all(
        torch.allclose(x, y, atol=1e-5) if isinstance(x, torch.Tensor) else x == y for x, y in zip(la, lb))


def run_one(name: str, make: Callable, kind: str, lib: str, strict: bool) -> str:
    model, ex, other, state = make()
    before = state(model)
    export = graphcap.export if lib == "graphcap" else te.export
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out_buf = io.StringIO()
        real_stdout, sys.stdout = sys.stdout, out_buf
        try:
            ep = export(model, ex, strict=strict)
        except Exception as e:
            sys.stdout = real_stdout
            return f"FAILS {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        finally:
            sys.stdout = real_stdout
    printed = out_buf.getvalue().count("forward called")
    warned = sorted({_short(w) for w in caught if "deprecated" not in str(w.message).lower()
                     and "TypedStorage" not in str(w.message)})
    after_export = state(model)
    parts = []
    if after_export != before:
        parts.append(f"export changed state {before}->{after_export}")
    try:
        mod = ep.module()
        if kind in ("random",):
            a, b = mod(*ex), mod(*ex)
            parts.append("random" if not _close(a, b) else "CONSTANT")
        else:
            for label, args in (("ex", ex), ("other", other)):
                fresh, _, _, _ = make()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = fresh(*args)
                    got = mod(*args)
                    if kind == "stateful":  # second call: state carried?
                        want2, got2 = fresh(*args), mod(*args)
                        ok2 = _close(want2, got2)
                if not _close(want, got):
                    parts.append(f"{label} DIFFERS")
                elif kind == "stateful" and not ok2:
                    parts.append(f"{label} 2nd call DIFFERS")
            parts.append(f"state after module() {state(model)}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stages = (("decomp", lambda: ep.run_decompositions()), ("saved", lambda: roundtrip(ep)))
                for stage, prog in stages:
                    try:
                        p = prog()
                        fresh, _, _, _ = make()
                        if not _close(fresh(*other), p.module()(*other)):
                            parts.append(f"{stage} DIFFERS")
                    except Exception as e:
                        parts.append(f"{stage} FAILS {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    except Exception as e:
        parts.append(f"module FAILS {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    if printed:
        parts.append(f"printed x{printed}")
    if warned:
        parts.append("warns " + " / ".join(warned))
    return "; ".join(parts) or "="


def main(argv: list[str]) -> None:
    for name, make, kind in PROBES:
        if argv and not any(a in name for a in argv):
            continue
        for lib in ("graphcap", "torch"):
            for strict in (False, True):
                verdict = run_one(name, make, kind, lib, strict)
                print(f"{name} | {lib}/{'strict' if strict else 'nonstrict'} | {verdict}", flush=True)
                while _HANDLES:
                    _HANDLES.pop().remove()


if __name__ == "__main__":
    main(sys.argv[1:])
