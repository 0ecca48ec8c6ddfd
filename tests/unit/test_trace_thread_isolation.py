"""An export changes nothing another thread can see: Python's builtins and torch's global flags.

While graphcap traces, ``max`` / ``min`` / ``math.pow`` in the traced code must not
decide comparisons of symbolic values (graphcap.trace.python_overrides), and torch's
own stack recording is off for the top-level tracer. Both are for the exporting
thread only: a second thread running plain Python in the middle of an export gets
Python's results and Python's errors, and reads torch's flags unchanged.
"""
from __future__ import annotations

import builtins
import math
import threading

import pytest
import torch

import graphcap

REAL_MAX, REAL_MIN, REAL_POW = builtins.max, builtins.min, math.pow


def _outcome(call):
    """What a call gives: ("value", result) or ("error", type, message)."""
    try:
        return ("value", call())
    except Exception as e:  # the error is the observed behaviour
        return ("error", type(e), str(e))


def _plain_python_cases(max_, min_, pow_):
    """Everyday uses of the three functions, errors included, with the callables under test."""
    a, b = torch.tensor([1.0, 5.0]), torch.tensor([3.0, 2.0])
    return {
        "ints": lambda: (max_(3, 7, 5), min_(3, 7, 5)),
        "iterable": lambda: (max_([4, 9, 2]), min_(x for x in (4, 9, 2))),
        "key": lambda: (max_(["aa", "b", "cccc"], key=len), min_("xyz", "ab", key=len)),
        "default": lambda: (max_([], default=-1), min_((), default=None)),
        "empty": lambda: max_([]),
        "no arguments": lambda: min_(),
        "tensors compared": lambda: max_(a, b),  # Python's max: bool() of a 2-element tensor fails
        "0-dim tensors": lambda: max_(torch.tensor(2.0), torch.tensor(3.0)),
        "a tensor iterated": lambda: max_(torch.tensor([1, 8, 3])),
        "pow": lambda: (pow_(2, 10), pow_(2.5, 0.5), type(pow_(2, 3))),
        "pow error": lambda: pow_(-8, 1 / 3),
        "pow types": lambda: pow_("2", 3),
    }


def _norm(outcome):
    """Tensors compared by value (a tensor result is a new object each call)."""
    if outcome[0] == "value" and isinstance(outcome[1], torch.Tensor):
        return ("tensor", outcome[1].tolist())
    return outcome


class _PausesInsideTrace(torch.nn.Module):
    """Uses max/min/math.pow on sizes, then waits mid-trace while the other thread checks."""

    def __init__(self, inside: threading.Event, release: threading.Event):
        super().__init__()
        self.inside, self.release = inside, release

    def forward(self, x):
        n = max(x.shape[0], 2) + min(x.shape[1], 8)
        scale = math.pow(x.shape[1], 0.5)
        if self.inside is not None:
            self.inside.set()
            assert self.release.wait(timeout=120), "the checking thread never released the export"
        return x.sum(dim=1) * scale + n


def test_other_threads_see_python_builtins_and_torch_flags_unchanged_during_an_export():
    expected = {name: _norm(_outcome(call)) for name, call in _plain_python_cases(REAL_MAX, REAL_MIN, REAL_POW).items()}
    flag_names = [name for name in ("do_not_emit_stack_traces",) if hasattr(torch.fx.config, name)]
    flags_before = {name: getattr(torch.fx.config, name) for name in flag_names}

    inside, release = threading.Event(), threading.Event()
    seen: dict = {}

    def check_from_another_thread():
        try:
            assert inside.wait(timeout=120), "the export never reached its forward"
            # the names as plain code resolves them now, in the middle of the export
            cases = _plain_python_cases(builtins.max, builtins.min, math.pow)
            seen["outcomes"] = {name: _norm(_outcome(call)) for name, call in cases.items()}
            seen["flags"] = {name: getattr(torch.fx.config, name) for name in flag_names}
        finally:
            release.set()

    checker = threading.Thread(target=check_from_another_thread)
    checker.start()
    x = torch.randn(4, 9)
    try:
        program = graphcap.export(_PausesInsideTrace(inside, release), (x,))
    finally:
        release.set()
        checker.join(timeout=120)

    assert seen.get("outcomes") == expected, "plain Python in another thread saw different max/min/math.pow"
    assert seen["flags"] == flags_before, "a torch flag changed for the whole process during the export"
    assert (builtins.max, builtins.min, math.pow) == (REAL_MAX, REAL_MIN, REAL_POW), "not put back after"
    # and the exported program did use the traced code's own max/min/pow
    torch.testing.assert_close(program.module()(x), _PausesInsideTrace(None, None)(x))


@pytest.mark.parametrize("name", ["max", "min", "pow"])
def test_the_replaced_builtins_behave_as_python_outside_any_export(name):
    """Between exports the originals are in place (identity), so nothing is left behind."""
    current = math.pow if name == "pow" else getattr(builtins, name)
    original = {"max": REAL_MAX, "min": REAL_MIN, "pow": REAL_POW}[name]
    graphcap.export(_PausesInsideTrace(None, None), (torch.randn(2, 3),))
    assert (math.pow if name == "pow" else getattr(builtins, name)) is original is current
