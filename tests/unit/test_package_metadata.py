"""What the package tells tools about itself: its version from the metadata, and that it is typed."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import graphcap


def test_version_is_the_installed_metadata_or_says_unknown():
    try:
        expected = version("graphcap")
    except PackageNotFoundError:
        expected = "0+unknown"
    assert graphcap.__version__ == expected


def test_the_package_ships_its_type_marker():
    package_dir = Path(graphcap.__file__).parent
    assert (package_dir / "py.typed").is_file()


def test_pyproject_ships_py_typed_as_package_data():
    import tomllib
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["graphcap"]
