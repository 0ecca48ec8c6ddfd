"""The supported torch versions are stated once and every pinned set agrees with it.

pyproject.toml states the range of torch (and torchvision) graphcap supports; the
Makefile's TORCH_VERSIONS lists the versions CI tests, each with the exact set of
packages in constraints/torch-<version>.txt. These checks catch the drift a hand edit
makes: a range widened without a pinned set, a pinned set outside the range or out of
step with another pin of pyproject.toml, a version CI does not run, or a test run on an
unsupported torch.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["test"])
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


def _makefile_versions() -> list[str]:
    match = re.search(r"^TORCH_VERSIONS\s*:?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile names no TORCH_VERSIONS"
    return match.group(1).split()


def _pins(version: str) -> dict[str, Version]:
    path = ROOT / "constraints" / f"torch-{version}.txt"
    assert path.exists(), f"TORCH_VERSIONS lists {version} but {path.relative_to(ROOT)} is missing"
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pinned = pinned[1:] if pinned.startswith("=") else pinned  # "===": that exact version string
            assert pinned, f"{path.name}: {line!r} is not an exact pin"
            pins[name.strip().lower().replace("_", "-")] = Version(pinned.strip())
    return pins


def test_the_running_torch_is_a_supported_one():
    installed = Version(torch.__version__.split("+")[0])
    assert installed in _requirements()["torch"].specifier, (
        f"torch {installed} is outside pyproject.toml's {_requirements()['torch']}")


@pytest.mark.parametrize("version", _makefile_versions())
def test_each_tested_version_has_a_pinned_set_inside_the_stated_range(version):
    pins, reqs = _pins(version), _requirements()
    assert f"{pins['torch'].major}.{pins['torch'].minor}" == version
    for name, req in reqs.items():
        key = name.replace("_", "-")
        assert key in pins, f"constraints/torch-{version}.txt does not pin {name}"
        assert pins[key] in req.specifier, (
            f"constraints/torch-{version}.txt pins {name}=={pins[key]}, outside pyproject.toml's {req}")


def test_the_stated_range_is_exactly_the_tested_versions():
    spec = _requirements()["torch"].specifier
    tested = {Version(v) for v in _makefile_versions()}
    # every minor version the range admits, between the lowest tested and one past the highest
    lowest, highest = min(tested), max(tested)
    for minor in range(lowest.minor - 1, highest.minor + 2):
        candidate = Version(f"{lowest.major}.{minor}.99")
        assert (candidate in spec) == (Version(f"{lowest.major}.{minor}") in tested), (
            f"pyproject.toml's torch{spec} and the Makefile's TORCH_VERSIONS disagree about "
            f"{lowest.major}.{minor}")


def _makefile_list(name: str) -> list[str]:
    match = re.search(rf"^{name}\s*:?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"the Makefile names no {name}"
    return match.group(1).split()


def test_ci_runs_the_oldest_the_default_and_the_newest_version():
    """CI's default test run covers the oldest, the default and the newest line on every
    submission (``make test-torch-ci``, issue 25); ``make test-torch-versions`` runs all of them."""
    assert "make test-torch-ci" in (ROOT / ".ci" / "run").read_text()
    tested, ci = _makefile_versions(), _makefile_list("CI_TORCH_VERSIONS")
    default = re.search(r"^TORCH\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    by_version = sorted(tested, key=Version)
    assert set(ci) <= set(tested), f"CI_TORCH_VERSIONS {ci} names a line outside TORCH_VERSIONS {tested}"
    for line in (by_version[0], default, by_version[-1]):
        assert line in ci, f"CI does not run torch {line} on every submission (CI_TORCH_VERSIONS: {ci})"
