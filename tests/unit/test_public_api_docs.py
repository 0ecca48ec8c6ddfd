"""Every public name (``graphcap.__all__``) documents its arguments, result, errors and an example.

Functions: ``Args:`` (when they take any), ``Returns:``, ``Raises:``, ``Example:``.
Classes: ``Args:`` or ``Attributes:``, ``Raises:`` (``Raised by:`` for exception
classes), ``Example:``. Constants: a docstring right after the assignment, in
the module that defines them. Examples must at least be valid Python.
``ExportedProgram`` lists each of its fields under ``Attributes:``.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import graphcap

SRC = Path(graphcap.__file__).resolve().parent


def _constant_doc(name: str) -> str:
    """The string literal that follows ``name = ...`` at the top level of a graphcap module."""
    for path in SRC.rglob("*.py"):
        body = ast.parse(path.read_text()).body
        for stmt, after in zip(body, body[1:]):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    return inspect.cleandoc(after.value.value)
    return ""


def _doc(name: str) -> str:
    obj = getattr(graphcap, name)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return _constant_doc(name)
    return inspect.cleandoc(obj.__doc__ or "") if obj.__dict__.get("__doc__") or inspect.isfunction(obj) else ""


def _section(doc: str, title: str) -> str:
    """The indented block under ``title:`` (empty if absent)."""
    m = re.search(rf"^{re.escape(title)}:\n((?:    .*\n?|\n)+)", doc, re.M)
    return textwrap.dedent(m.group(1)) if m else ""


def _example_code(doc: str) -> str:
    lines = [line[4:] for line in _section(doc, "Example").splitlines() if line.startswith((">>> ", "... "))]
    return "\n".join(lines)


@pytest.mark.parametrize("name", graphcap.__all__)
def test_public_name_documents_arguments_result_errors_and_example(name):
    obj = getattr(graphcap, name)
    doc = _doc(name)
    assert doc, f"graphcap.{name} has no docstring of its own"
    missing = []
    if inspect.isfunction(obj):
        if inspect.signature(obj).parameters and not _section(doc, "Args"):
            missing.append("Args:")
        missing += [s + ":" for s in ("Returns", "Raises") if not _section(doc, s)]
    elif inspect.isclass(obj):
        if not (_section(doc, "Args") or _section(doc, "Attributes")):
            missing.append("Args: or Attributes:")
        errors = "Raised by" if issubclass(obj, BaseException) else "Raises"
        if not _section(doc, errors):
            missing.append(errors + ":")
    else:
        missing += [s + ":" for s in ("Returns", "Example") if not _section(doc, s)]
    if not _section(doc, "Example"):
        missing.append("Example:")
    assert not missing, f"graphcap.{name}'s docstring lacks {', '.join(missing)}"
    code = _example_code(doc)
    assert code, f"graphcap.{name}'s example has no >>> lines"
    compile(code, f"<graphcap.{name} example>", "exec")  # at least valid Python


def test_exported_program_documents_each_field():
    attributes = _section(_doc("ExportedProgram"), "Attributes")
    documented = set(re.findall(r"^(\w+):", attributes, re.M))
    fields = {n for n, v in vars(graphcap.ExportedProgram).items() if isinstance(v, property) and not n.startswith("_")}
    assert fields, "ExportedProgram has no public properties?"
    assert fields <= documented, f"ExportedProgram's docstring does not document {sorted(fields - documented)}"
