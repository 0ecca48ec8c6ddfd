"""compat/compat.py's ratchet over the suite files other than test_export.py: a known pass that
fails is a regression, a pass not on the list must be recorded, and recording only adds."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import HAVE_SHARED_SUITE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def compat(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("compat_under_test", ROOT / "compat" / "compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "KNOWN_PASSES_DIR", tmp_path / "known_passes")
    return module


def _junit(path: Path, outcomes: dict[str, str]) -> Path:
    cases = []
    for name, outcome in outcomes.items():
        inner = {"passed": "", "failed": '<failure message="AssertionError: no">x</failure>',
                 "skipped": '<skipped message="s"/>'}[outcome]
        cases.append(f'<testcase classname="test_verifier.TestVerifier" name="{name}">{inner}</testcase>')
    path.write_text(f'<testsuites><testsuite>{"".join(cases)}</testsuite></testsuites>')
    return path


def _ids(*names):
    return [f"test_verifier.py::TestVerifier::{n}" for n in names]


def test_other_files_are_named_by_file_class_and_test(compat, tmp_path):
    results = compat.read_junit(_junit(tmp_path / "j.xml", {"test_a": "passed"}), "test_verifier.py")
    assert results == {"test_verifier.py::TestVerifier::test_a": ("passed", "")}
    main = compat.read_junit(_junit(tmp_path / "k.xml", {"test_a": "passed"}))
    assert list(main) == ["TestVerifier::test_a"]  # test_export.py keeps its short ids


def test_a_known_pass_that_fails_is_a_violation(compat, tmp_path):
    results = compat.read_junit(_junit(tmp_path / "j.xml", {"test_a": "passed", "test_b": "failed"}),
                                "test_verifier.py")
    assert compat.report_file("test_verifier.py", results, [], _ids("test_a", "test_b"), {}) == 1
    assert compat.report_file("test_verifier.py", results, [], _ids("test_a"), {}) == 0


def test_a_pass_not_on_the_list_must_be_recorded_and_recording_only_adds(compat, tmp_path):
    results = compat.read_junit(_junit(tmp_path / "j.xml", {"test_a": "passed", "test_b": "passed",
                                                             "test_c": "skipped"}), "test_verifier.py")
    assert compat.report_file("test_verifier.py", results, [], _ids("test_a"), {}) == 1
    list_file = compat.KNOWN_PASSES_DIR / "test_verifier.txt"
    list_file.parent.mkdir()
    list_file.write_text("\n".join(_ids("test_a", "test_old")) + "\n")
    assert compat.record_passes("test_verifier.py", results) == 1
    assert compat.read_list(list_file) == _ids("test_a", "test_b", "test_old")


def test_a_listed_difference_that_passes_is_a_violation(compat, tmp_path):
    results = compat.read_junit(_junit(tmp_path / "j.xml", {"test_a": "passed"}), "test_verifier.py")
    known = {_ids("test_a")[0]: ("differs", "a reason")}
    assert compat.report_file("test_verifier.py", results, [], _ids("test_a"), known) == 1


@pytest.mark.skipif(not HAVE_SHARED_SUITE, reason="the suite is not at ../shared/torch_suite beside the clone")
def test_the_listed_files_are_test_export_and_those_with_a_list(compat):
    compat.KNOWN_PASSES_DIR.mkdir()
    (compat.KNOWN_PASSES_DIR / "test_verifier.txt").write_text("")
    assert compat.chosen_files("listed") == ["test_export.py", "test_verifier.py"]
    assert compat.chosen_files("test_hop") == ["test_hop.py"]
    with pytest.raises(SystemExit):
        compat.chosen_files("test_nothing.py")


def test_workers_become_pytest_xdist_processes(compat):
    assert compat.xdist_args("0") == [] and compat.xdist_args("") == []
    assert compat.xdist_args("2") == ["-n", "2", "--dist", "loadscope"]
    assert compat.xdist_args("auto") == ["-n", "auto", "--dist", "loadscope"]
    with pytest.raises(SystemExit, match="--workers"):
        compat.xdist_args("two")


def _make_list(name: str) -> list[str]:
    """A file list of the Makefile (``NAME := a.py b.py \\`` with continuation lines)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith(name + " :="):
            return line.split(":=", 1)[1].split()
    raise AssertionError(f"the Makefile defines no {name}")


def test_ci_holds_every_listed_file_but_opinfo():
    """CI's two ratchet runs (compat-check-ci, compat-check-rerun) cover every file with a list, once;
    only opinfo (about 40 minutes alone) is left to `make compat-check`."""
    ci, rerun = _make_list("CI_COMPAT_FILES"), _make_list("CI_RERUN_FILES")
    assert not set(ci) & set(rerun)
    listed = {"test_export.py"} | {p.stem + ".py" for p in (ROOT / "compat" / "known_passes").glob("*.txt")}
    assert listed - set(ci) - set(rerun) == {"test_export_opinfo.py"}
    assert set(ci) | set(rerun) <= listed  # a file CI runs has its list
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert "make compat-check-ci" in ci_script and "make compat-check-rerun" in ci_script
