"""The test suite's own rules: a feature that breaks shows as a failure, never as a skip.

* No test calls ``pytest.skip`` / ``pytest.importorskip`` at run time (that is how an
  error turns into a skip).
* A ``skipif`` marker is only for a missing optional resource, and says so: its
  condition tests CUDA, the public zoo beside the repository (``HAVE_SHARED_ZOO``, a clone
  alone lacks ../shared), or that an optional package is not installed
  (``importlib.util.find_spec("executorch") is None``: the consumers, installed on the torch
  line ExecuTorch pairs with), and its reason names it.
* An ``xfail`` is strict (it fails once the cause is fixed) and states its reason.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _calls():
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                yield path.relative_to(TESTS), node


def _name(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _keyword(call: ast.Call, key: str):
    return next((k.value for k in call.keywords if k.arg == key), None)


def test_no_test_turns_an_error_into_a_skip():
    found = [f"{path}:{call.lineno} {_name(call.func)}" for path, call in _calls()
             if _name(call.func).split(".")[-1] in ("skip", "importorskip") and _name(call.func).startswith("pytest")]
    assert not found, "tests must fail, not skip, when a feature breaks: " + ", ".join(found)


# condition's word -> what the reason must name
_OPTIONAL_RESOURCES = {"cuda": "cuda", "HAVE_SHARED_ZOO": "../shared/zoo", "HAVE_SHARED_SUITE": "../shared/torch_suite",
                       "TORCH_LINE": "torch 2."}


def test_skipif_only_for_a_missing_cuda_device_stated_in_the_marker():
    for path, call in _calls():
        if not _name(call.func).endswith("mark.skipif"):
            continue
        condition = ast.unparse(call.args[0]) if call.args else ""
        reason = _keyword(call, "reason")
        where = f"{path}:{call.lineno}"
        packages = re.findall(r"find_spec\(['\"]([\w.]+)['\"]\) is None", condition)
        if packages:
            named = packages
        else:
            resource = next((r for r in _OPTIONAL_RESOURCES if r.lower() in condition.lower()), None)
            assert resource, (f"{where}: skipif must test for an optional resource "
                              f"({', '.join(_OPTIONAL_RESOURCES)}, or a package not installed)")
            named = [_OPTIONAL_RESOURCES[resource]]
        assert isinstance(reason, ast.Constant) and all(r in str(reason.value).lower() for r in named), \
            f"{where}: the skipif reason must name the missing resource ({', '.join(named)})"


def test_every_xfail_is_strict_and_says_why():
    for path, call in _calls():
        if not _name(call.func).endswith("mark.xfail"):
            continue
        where = f"{path}:{call.lineno}"
        strict = _keyword(call, "strict")
        assert isinstance(strict, ast.Constant) and strict.value is True, f"{where}: xfail must be strict=True"
        assert _keyword(call, "reason") is not None, f"{where}: xfail must state its reason"
