"""``graphcap.__version__``: read from the installed package's metadata, so pyproject.toml stays its one source.

A source tree used without installing it (``PYTHONPATH=src``) has no metadata: its version reads ``0+unknown``.
Reading metadata imports nothing heavy (no torch).
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _installed_version() -> str:
    try:
        return version("graphcap")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()
