"""Installed versions, read from the package metadata (no package is imported to learn its version)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Optional


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution``, or None when it has no metadata (not installed)."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
