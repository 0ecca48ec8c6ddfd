"""The names a user's type checker sees in ``graphcap`` are the public names, bound to the same objects.

At run time ``graphcap`` loads its public names lazily (PEP 562), which a type checker cannot follow;
the package's ``if TYPE_CHECKING:`` block imports them statically instead. This keeps that block and
``__all__`` from drifting apart: a public name added to one and not the other fails here.
"""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import graphcap

INIT = Path(graphcap.__file__)


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """{public name: (module, name in it)} for every import in the package's TYPE_CHECKING block."""
    tree = ast.parse(INIT.read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If)
              and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"]
    assert len(blocks) == 1, "graphcap/__init__.py has one `if TYPE_CHECKING:` block of public names"
    found = {}
    for stmt in blocks[0].body:
        assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1, ast.unparse(stmt)
        for alias in stmt.names:
            found[alias.asname or alias.name] = (f"graphcap.{stmt.module}", alias.name)
    return found


def test_type_checking_block_names_every_public_name():
    assert sorted(_type_checking_imports()) == sorted(graphcap.__all__)


def test_type_checking_block_binds_the_runtime_objects():
    for public, (module, name) in _type_checking_imports().items():
        assert getattr(importlib.import_module(module), name) is getattr(graphcap, public), public


def test_the_errors_module_is_reached_from_a_plain_import():
    """``graphcap.errors.StrictCaptureError`` (as the docs write it) after ``import graphcap`` alone."""
    code = ("import sys, graphcap\nassert 'torch' not in sys.modules\n"
            "print(graphcap.errors.DataDependentError.__name__, 'errors' in dir(graphcap))\n")
    env = dict(os.environ, PYTHONPATH=str(INIT.parents[1]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["DataDependentError", "True"], out.stderr[-2000:]
