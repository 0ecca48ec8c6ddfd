"""The case catalogue: every registered case, the topic modules imported.

The topic modules (``control_flow``, ``dynamic_shapes``, ...) register their cases in
``registry``; this module imports them all and returns the filled registry.
``tests/unit/test_case_catalogue.py`` checks every case's status;
``python -m graphcap.cases.docs`` writes the page.
"""
from __future__ import annotations

# import order is the catalogue's order (registration order; docs/cases.md follows it)
from . import control_flow, dynamic_shapes, python_constructs, beyond_torch, mutation  # noqa: F401  # isort: skip
from .registry import CASES, Case


def all_cases() -> dict[str, Case]:
    """Every case, the topic modules imported."""
    return CASES
