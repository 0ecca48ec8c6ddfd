"""Conditional sizes (``Piecewise``) survive save/load.

ShapeEnv writes ``int(flag)`` of a data-dependent bool as ``Piecewise((1, Eq(u0, 1)), (0, True))``;
a program holding one must load again, and the reader must still refuse anything outside its grammar.
"""
from __future__ import annotations

import io

import pytest
import sympy
import torch
import torch._functorch.config

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize.exprs import expr_to_str, str_to_expr

u0 = sympy.Symbol("u0", integer=True)
s0 = sympy.Symbol("s0", integer=True, positive=True)
SYMS = {"u0": u0, "s0": s0}


@pytest.mark.parametrize("expr", [
    sympy.Piecewise((1, sympy.Eq(u0, 1)), (0, True)),
    sympy.Piecewise((2 * s0, u0 > 3), (u0 + 1, sympy.Eq(s0, 4)), (0, True)),
    s0 + 2 * sympy.Piecewise((1, sympy.Ne(u0, 0)), (0, True)),
    sympy.ITE(u0 > 1, s0 > 2, u0 < 0),
])
def test_conditional_expressions_round_trip(expr):
    assert str_to_expr(expr_to_str(expr), SYMS) == expr


@pytest.mark.parametrize("text", [
    "Piecewise(1, 2)",                    # arguments must be (value, condition) pairs
    "Piecewise((1,))",                    # a pair has two members
    "Piecewise((1, u0 > 1, 2))",
    "Max((1, 2), 3)",                     # pairs only where Piecewise takes them
    "(1, 2)",
    "Piecewise((1, __import__('os')))",
    "Piecewise(" + "(" * 300 + "1" + ")" * 300 + ")",
])
def test_malformed_conditional_expressions_are_refused(text):
    with pytest.raises(SerializationError, match="cannot be read"):
        str_to_expr(text, SYMS)


class FlagScale(torch.nn.Module):
    def forward(self, x):
        flag = bool(x.eq(0.5).any())
        return x * int(flag) + 1, torch.is_nonzero(x[:1].sum())


def test_program_with_data_dependent_bool_loads_and_runs():
    example = torch.tensor([0.5, 1.0])
    with torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True):
        ep = graphcap.export(FlagScale(), (example,))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    assert str(loaded.graph) == str(ep.graph)
    torch.testing.assert_close(loaded.module()(example), FlagScale()(example))
    other = torch.tensor([0.25, 1.0])  # the flag is false here: the program was specialized to true
    for program in (ep, loaded):
        with pytest.raises(RuntimeError, match=r"u0 >= 1|Eq\(u0, 1\)"):
            program.module()(other)
