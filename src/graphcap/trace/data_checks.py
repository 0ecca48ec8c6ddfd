"""The ``torch._check`` a user pastes for a branch on data, written in the user's own code.

A condition on a value read from tensor data reaches graphcap as a sympy
relation over unbacked symbols (``Eq(u0, 1)``, ``u0 > 2``). A user cannot
write ``u0``. This module writes the check in the user's terms:

- a symbol a local of the user's frame holds (``n = y.item()``) is written
  with that name: ``torch._check(n > 2)`` before the line;
- a value read on the line itself (``if y.item() > 2:``, ``if
  y.nonzero().shape[0] > 2:``) is given a name first, since reading it again
  would give a new, unrelated value: the line is shown rewritten as
  ``value = y.item()`` / ``torch._check(value > 2)`` / ``if value > 2:``;
- a tensor used as a condition (``if x.sum() > 0:``, a ``while`` or an
  ``assert`` on a tensor) is read with ``.item()`` into a named flag the same
  way: ``flag = (x.sum() > 0).item()`` / ``torch._check(flag)`` / ``if flag:``.

The source line is read with :mod:`ast`, so the names and expressions are
the user's own text.
"""
from __future__ import annotations

import ast
import functools
import linecache
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
from sympy.printing.str import StrPrinter


class _PythonPrinter(StrPrinter):
    """sympy → Python source: relations with Python operators, min/max, //, %."""

    _OPS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

    def _print_Relational(self, expr: Any) -> str:
        op = self._OPS.get(expr.rel_op, expr.rel_op)
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"

    def _print_Not(self, expr: Any) -> str:
        return f"not ({self._print(expr.args[0])})"

    def _print_And(self, expr: Any) -> str:
        return " and ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Or(self, expr: Any) -> str:
        return " or ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Function(self, expr: Any) -> str:
        name = type(expr).__name__
        args = [self._print(a) for a in expr.args]
        if name in ("FloorDiv", "IntTrueDiv") and len(args) == 2:
            return f"({args[0]} // {args[1]})"
        if name in ("Mod", "PythonMod") and len(args) == 2:
            return f"({args[0]} % {args[1]})"
        return super()._print_Function(expr)

    def _print_Min(self, expr: Any) -> str:
        return f"min({', '.join(self._print(a) for a in expr.args)})"

    def _print_Max(self, expr: Any) -> str:
        return f"max({', '.join(self._print(a) for a in expr.args)})"

    def _print_Mod(self, expr: Any) -> str:
        return f"({self._print(expr.args[0])} % {self._print(expr.args[1])})"


def python_condition(cond: Any, names: dict[Any, str]) -> str:
    """``cond`` as Python source, each named symbol replaced by the user's expression for it."""
    if isinstance(cond, sympy.Basic):
        compound = {e: sympy.Symbol(n) for e, n in names.items() if not isinstance(e, sympy.Symbol)}
        if compound:  # whole expressions first (a relation's side that is a local's size)
            cond = cond.xreplace(compound)
        named = {s: sympy.Symbol(names[s]) for s in cond.free_symbols if s in names}
        if named:
            cond = cond.xreplace(named)
        return _PythonPrinter().doprint(cond)
    return str(cond)


@dataclass
class WrittenCheck:
    """A check in the user's code: ``lines`` replace ``line`` of ``filename`` (the check alone,
    to put before the line, when ``replaces_line`` is False)."""

    check: str  # "torch._check(n > 2)"
    negated: str  # the check when the condition never holds
    condition: str  # the condition in the user's words: "n > 2", "x.sum() > 0", "y.item() > 2"
    lines: list[str] = field(default_factory=list)  # what to write at the line, indented as the line
    replaces_line: bool = False

    def as_fix(self, where: str = "this line") -> str:
        if not self.replaces_line:
            return (f"state it before {where} with {self.check} (or {self.negated} if it never holds)")
        body = "\n".join(self.lines)
        return (f"give the value a name and state it: replace {where} with\n{body}\n"
                f"(or {self.negated} if it never holds)")


@functools.lru_cache(maxsize=8)
def _parsed(source: str) -> Optional[ast.Module]:
    """``source`` parsed (once per text: a message may ask for several lines of one big file),
    without the warnings the compiler gives about the file's own code (invalid escapes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):
            return None


def _statement(filename: str, lineno: int) -> tuple[Optional[ast.stmt], str]:
    """The innermost statement that starts at ``lineno`` of ``filename``, and the file's source."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None, ""
    tree = _parsed(source)
    if tree is None:
        return None, source
    found: Optional[ast.stmt] = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno == lineno:
            if found is None or (node.col_offset >= found.col_offset):
                found = node
    return found, source


def _header_exprs(stmt: ast.stmt) -> list[ast.expr]:
    """The expressions evaluated on the statement's first line (an ``if``'s test, an assignment's value)."""
    if isinstance(stmt, (ast.If, ast.While, ast.Assert)):
        return [stmt.test]
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
        return [stmt.value] if stmt.value is not None else []
    return []


_SIZE_OF = ("shape", "size", "numel")


def _data_reads(expr: ast.expr) -> list[ast.expr]:
    """Sub-expressions of ``expr`` that read one value from data: ``t.item()``, and sizes of a
    ``nonzero()`` result (``t.nonzero().shape[0]``, ``len(t.nonzero())``, ``.size(0)``, ``.numel()``)."""
    reads: list[ast.expr] = []

    def is_nonzero(e: ast.expr) -> bool:
        return isinstance(e, ast.Call) and (
            (isinstance(e.func, ast.Attribute) and e.func.attr in ("nonzero", "argwhere", "unique"))
            or (isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name)
                and e.func.value.id == "torch" and e.func.attr in ("nonzero", "argwhere", "unique")))

    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item" \
                and not node.args:
            reads.append(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "shape" and is_nonzero(node.value.value):
            reads.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("size", "numel") and is_nonzero(node.func.value):
            reads.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
                and len(node.args) == 1 and is_nonzero(node.args[0]):
            reads.append(node)
    return reads


def _free_name(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


def _replace_segment(line: str, start: int, end: int, text: str) -> str:
    return line[:start] + text + line[end:]


def _flag_check(cond: Any, sym: sympy.Symbol, flag: str) -> Optional[tuple[str, str]]:
    """``Eq(u, 1)`` (a bool read from data is true) as ``(flag, torch.sym_not(flag))`` and its
    opposite, or None when ``cond`` is not a truth test of ``sym``."""
    true_when = {sympy.Eq(sym, 1), sympy.Ne(sym, 0), sympy.Ge(sym, 1), sympy.Gt(sym, 0)}
    false_when = {sympy.Eq(sym, 0), sympy.Ne(sym, 1), sympy.Le(sym, 0), sympy.Lt(sym, 1)}
    positive, negative = f"torch._check({flag})", f"torch._check(torch.sym_not({flag}))"
    if cond in true_when:
        return positive, negative
    if cond in false_when:
        return negative, positive
    return None


def write_check(cond: Any, names: dict[Any, str], filename: Optional[str], lineno: Optional[int],
                taken: Optional[set[str]] = None) -> Optional[WrittenCheck]:
    """The check ``cond`` asks for, in the user's code at ``filename:lineno``; None when it cannot be
    written without an internal symbol.

    ``names``: symbol (or expression) -> the user's expression holding it (locals of the frame);
    ``taken``: names already used in the frame (the new value's name avoids them)."""
    if not isinstance(cond, sympy.Basic):
        return None
    spelled = python_condition(cond, names)
    unnamed = {s for s in cond.free_symbols if re.search(rf"\b{s}\b", spelled)}
    if not unnamed:
        return WrittenCheck(f"torch._check({spelled})",
                            f"torch._check({python_condition(sympy.Not(cond), names)})", spelled)
    if len(unnamed) != 1 or filename is None or lineno is None:
        return None
    (sym,) = unnamed
    stmt, source = _statement(filename, lineno)
    if stmt is None:
        return None
    line = linecache.getline(filename, lineno).rstrip("\n")
    if line.lstrip().startswith("elif"):  # nothing can go between an if's body and its elif
        return None
    indent = line[:len(line) - len(line.lstrip())]
    taken = set(taken or ()) | {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    exprs = _header_exprs(stmt)
    reads = [r for e in exprs for r in _data_reads(e) if r.lineno == r.end_lineno == lineno]
    if len(reads) == 1:  # the value is read on this line: name it, check it, use the name
        read = reads[0]
        text = ast.get_source_segment(source, read)
        name = _free_name("count" if not (isinstance(read, ast.Call) and getattr(read.func, "attr", "") == "item")
                          else "value", taken)
        named = {**names, sym: name}
        check = f"torch._check({python_condition(cond, named)})"
        negated = f"torch._check({python_condition(sympy.Not(cond), named)})"
        rewritten = _replace_segment(line, read.col_offset, read.end_col_offset, name)
        words = python_condition(cond, {**names, sym: text})
        return WrittenCheck(check, negated, words,
                            [f"{indent}{name} = {text}", f"{indent}{check}", rewritten], True)
    if not reads and isinstance(stmt, (ast.If, ast.While, ast.Assert)) \
            and stmt.test.lineno == stmt.test.end_lineno == lineno:
        # a tensor used as a truth value: read it into a named flag
        test = stmt.test
        name = _free_name("flag", taken)
        checks = _flag_check(cond, sym, name)
        if checks is None:
            return None
        text = ast.get_source_segment(source, test)
        wrapped = text if isinstance(test, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"
        rewritten = _replace_segment(line, test.col_offset, test.end_col_offset, name)
        if isinstance(stmt, ast.While):  # the flag must be read again on every iteration
            return None
        words = text if checks[0] == f"torch._check({name})" else f"not {wrapped}"
        return WrittenCheck(checks[0], checks[1], words,
                            [f"{indent}{name} = {wrapped}.item()", f"{indent}{checks[0]}", rewritten], True)
    return None


def unnamed_check(cond: Any, names: dict[Any, str]) -> tuple[str, str]:
    """The check and its negation with each value that has no name at the line written ``value``
    (``value_2``, ...): the last resort when :func:`write_check` finds no rewrite."""
    spelled = python_condition(cond, names)
    unnamed = sorted((s for s in cond.free_symbols if re.search(rf"\b{s}\b", spelled)), key=str)
    placeholders = {s: sympy.Symbol("value" if i == 0 else f"value_{i + 1}") for i, s in enumerate(unnamed)}
    full = {**names, **{s: str(p) for s, p in placeholders.items()}}
    return (f"torch._check({python_condition(cond, full)})",
            f"torch._check({python_condition(sympy.Not(cond), full)})")


@dataclass
class NumberUse:
    """What a user line does with a value read from data that needs it as a plain number."""

    reads: list[str] = field(default_factory=list)  # data reads on the line: "n.item()"
    conversions: list[tuple[str, str]] = field(default_factory=list)  # ("int(n)", "n.item()")


def number_use(filename: Optional[str], lineno: Optional[int]) -> NumberUse:
    """The data reads on the user's line and the ``int(t)`` / ``float(t)`` conversions of a tensor
    written there, with the ``.item()`` that reads the same value and stays symbolic."""
    use = NumberUse()
    if filename is None or lineno is None:
        return use
    stmt, source = _statement(filename, lineno)
    if stmt is None:
        return use
    exprs = [stmt.iter] if isinstance(stmt, ast.For) else _header_exprs(stmt)  # for _ in range(n.item()):
    for expr in exprs:
        use.reads += [ast.get_source_segment(source, r) or "" for r in _data_reads(expr)]
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("int", "float") and len(node.args) == 1 and not node.keywords:
                arg = ast.get_source_segment(source, node.args[0])
                call = ast.get_source_segment(source, node)
                if arg and call and not _data_reads(node.args[0]):
                    wrapped = arg if isinstance(node.args[0], (ast.Name, ast.Attribute, ast.Call,
                                                               ast.Subscript)) else f"({arg})"
                    use.conversions.append((call, f"{wrapped}.item()"))
    use.reads = [r for r in use.reads if r]
    return use
