"""Kept for scripts that import it: the zoo path set-up and ``wall_seconds`` live in harness.py."""
from __future__ import annotations

from harness import ROOT, ZOO_DIR, wall_seconds  # noqa: F401 - also puts ../shared/zoo on the path
