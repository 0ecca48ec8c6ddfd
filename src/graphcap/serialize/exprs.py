"""Symbolic sizes as text: sympy expressions to strings and back, safely.

Shapes and range constraints are written as sympy's own printed form
(``2*s0 + 1``, ``(s0//2)``, ``Max(1, s1)``), except logical connectives, which
are written as the functions ``And(...)`` / ``Or(...)`` / ``Not(...)`` that the
format-1 reader has always parsed (sympy's ``a | b`` it never did; guards of
cond branches made such asserts appear). Reading them back must not use
``sympy.sympify``, which evaluates Python; this is a small recursive-descent
parser over a closed grammar — integers, the file's own symbols, ``+ - * /
// % **``, comparisons, and a whitelist of the integer functions torch's
ShapeEnv produces (``Piecewise`` with its ``(value, condition)`` pairs too)
— with limits on length, depth and number sizes, so a crafted string can neither run code nor make the loader hang.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

import sympy
from sympy.printing.str import StrPrinter

from ..errors import SerializationError
from ..torch_private.symbolic import functions as F
from ..torch_private.symbolic import int_oo
from . import schema

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(F, name) for name in (
        "FloorDiv", "CleanDiv", "CeilDiv", "Mod", "PythonMod", "ModularIndexing", "Max", "Min",
        "CeilToInt", "FloorToInt", "TruncToInt", "RoundToInt", "ToFloat", "TruncToFloat",
        "IntTrueDiv", "FloatTrueDiv", "PowByNatural", "FloatPow", "Identity", "LShift", "RShift",
        "Where", "IsNonOverlappingAndDenseIndicator",
        "OpaqueUnaryFn_sqrt", "OpaqueUnaryFn_exp", "OpaqueUnaryFn_log", "OpaqueUnaryFn_log2",
        "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "BitwiseFn_bitwise_xor",
    ) if hasattr(F, name)
}
_FUNCTIONS.update({"Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt,
                   "Ge": sympy.Ge, "Abs": sympy.Abs, "floor": sympy.floor, "ceiling": sympy.ceiling,
                   "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not, "ITE": sympy.ITE})
# Functions whose arguments are (value, condition) pairs, printed as tuples: ``Piecewise((1, Eq(u0, 1)),
# (0, True))`` is what ShapeEnv makes of ``int(flag)`` for a data-dependent bool (``bool(t)``, ``t.item()``).
_PAIR_FUNCTIONS: dict[str, Callable[..., Any]] = {"Piecewise": sympy.Piecewise}
_CONSTANTS = {"oo": sympy.oo, "int_oo": int_oo, "True": sympy.true, "False": sympy.false}
_COMPARE = {"<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge, "==": sympy.Eq, "!=": sympy.Ne}

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:e[+-]?\d+)?|\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|//|<=|>=|==|!=|[-+*/%(),<>]))")
_MAX_POW_BITS = 4096


class _Printer(StrPrinter):  # type: ignore[misc]  # sympy has no type annotations
    """sympy's printed form, but with ``And(a, b)`` / ``Or(a, b)`` / ``Not(a)`` for the
    connectives (sympy prints ``a & b``, ``a | b``, ``~a``), which the reader knows as functions."""

    def _connective(self, name: str, expr: Any) -> str:
        return f"{name}({', '.join(self._print(a) for a in expr.args)})"

    def _print_And(self, expr: Any) -> str:
        return self._connective("And", expr)

    def _print_Or(self, expr: Any) -> str:
        return self._connective("Or", expr)

    def _print_Not(self, expr: Any) -> str:
        return self._connective("Not", expr)


_PRINTER = _Printer()


def expr_to_str(expr: Any) -> str:
    return str(_PRINTER.doprint(expr))


def _fail(text: str, why: str) -> SerializationError:
    return SerializationError(
        f"The symbolic expression {text[:120]!r} in the file cannot be read: {why}.",
        where="program.json",
        fix="The file is damaged or was crafted; save the program again with graphcap.save.")


class _Parser:
    def __init__(self, text: str, symbols: dict[str, sympy.Symbol]):
        self.text = text
        self.symbols = symbols
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.depth = 0

    def _tokenize(self, text: str) -> list[tuple[str, str]]:
        tokens, i = [], 0
        while i < len(text):
            if text[i:].strip() == "":
                break
            m = _TOKEN.match(text, i)
            if m is None:
                raise _fail(text, f"unexpected character {text[i:i + 1]!r} at {i}")
            number, name, op = m.groups()
            tokens.append(("num", number) if number else ("name", name) if name else ("op", op))
            i = m.end()
        return tokens

    def peek(self) -> Optional[tuple[str, str]]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, op: Optional[str] = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (op is not None and tok != ("op", op)):
            raise _fail(self.text, f"expected {op or 'more'} at token {self.pos}")
        self.pos += 1
        return tok

    def parse(self) -> Any:
        value = self.comparison()
        extra = self.peek()
        if extra is not None:
            raise _fail(self.text, f"unexpected {extra[1]!r} after the expression")
        return value

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > schema.MAX_NESTING:
            raise _fail(self.text, "nested too deeply")

    def comparison(self) -> Any:
        left = self.additive()
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] in _COMPARE:
            self.take()
            return _COMPARE[tok[1]](left, self.additive())
        return left

    def additive(self) -> Any:
        value = self.term()
        while (tok := self.peek()) in (("op", "+"), ("op", "-")):
            self.take()
            rhs = self.term()
            value = value + rhs if tok[1] == "+" else value - rhs
        return value

    def term(self) -> Any:
        value = self.unary()
        while (tok := self.peek()) in (("op", "*"), ("op", "/"), ("op", "//"), ("op", "%")):
            self.take()
            rhs = self.unary()
            if tok[1] == "*":
                value = value * rhs
            elif tok[1] == "/":
                if rhs == 0:
                    raise _fail(self.text, "division by zero")
                value = value / rhs
            elif tok[1] == "//":
                value = F.FloorDiv(value, rhs)
            else:
                value = F.PythonMod(value, rhs)
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "-"):
            self.take()
            self._enter()
            value = -self.unary()
            self.depth -= 1
            return value
        if self.peek() == ("op", "+"):
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Any:
        base = self.atom()
        if self.peek() == ("op", "**"):
            self.take()
            self._enter()
            exponent = self.unary()
            self.depth -= 1
            if not (isinstance(exponent, sympy.Integer) and abs(int(exponent)) <= 64):
                raise _fail(self.text, "only small integer exponents are allowed")
            if isinstance(base, sympy.Number) and \
                    int(abs(base)).bit_length() * abs(int(exponent)) > _MAX_POW_BITS:
                raise _fail(self.text, "a number too large")
            return base ** exponent
        return base

    def atom(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            if "." in text:
                return sympy.Float(text)
            value = int(text)
            if value > schema.MAX_INT_LITERAL:
                raise _fail(self.text, "an integer literal too large")
            return sympy.Integer(value)
        if kind == "name":
            if self.peek() == ("op", "("):
                pairs = text in _PAIR_FUNCTIONS
                fn = _PAIR_FUNCTIONS[text] if pairs else _FUNCTIONS.get(text)
                if fn is None:
                    raise _fail(self.text, f"unknown function {text!r}")
                self.take("(")
                self._enter()
                args = [self.pair() if pairs else self.comparison()]
                while self.peek() == ("op", ","):
                    self.take()
                    args.append(self.pair() if pairs else self.comparison())
                self.take(")")
                self.depth -= 1
                return fn(*args)
            if text in self.symbols:
                return self.symbols[text]
            if text in _CONSTANTS:
                return _CONSTANTS[text]
            raise _fail(self.text, f"symbol {text!r} has no entry in the file's symbol table")
        if text == "(":
            self._enter()
            value = self.comparison()
            self.take(")")
            self.depth -= 1
            return value
        raise _fail(self.text, f"unexpected {text!r}")

    def pair(self) -> tuple[Any, Any]:
        """``(value, condition)``: one argument of ``Piecewise``."""
        self.take("(")
        self._enter()
        value = self.comparison()
        self.take(",")
        condition = self.comparison()
        self.take(")")
        self.depth -= 1
        return value, condition


def str_to_expr(text: Any, symbols: dict[str, sympy.Symbol]) -> Any:
    """Parse a printed sympy expression over ``symbols`` (name → Symbol)."""
    if not isinstance(text, str):
        raise _fail(repr(text), "not a string")
    if len(text) > schema.MAX_EXPR_CHARS:
        raise _fail(text, "too long")
    try:
        return _Parser(text, symbols).parse()
    except SerializationError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError) as e:
        raise _fail(text, f"{type(e).__name__}: {e}") from None
