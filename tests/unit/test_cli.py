"""The ``graphcap`` command, called as a user calls it: in a subprocess, reading output and exit status."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from graphcap.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = Path(__file__).resolve().parent / "cli_factories.py"


def graphcap_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "graphcap.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_console_script_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["scripts"]["graphcap"]
    module, func = target.split(":")
    assert module == "graphcap.cli" and callable(getattr(__import__(module, fromlist=[func]), func))


def test_help_on_every_command(capsys):
    for command in ([], ["export"], ["inspect"], ["run"], ["verify"], ["diff"], ["report"], ["completion"]):
        with pytest.raises(SystemExit) as stop:
            main([*command, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert "usage: graphcap" in out
    assert {"export", "inspect", "run", "verify", "diff", "report", "completion"} <= set(
        build_parser()._subparsers._group_actions[0].choices)  # argparse's own structure


def test_builtin_example_export_inspect_run_verify(tmp_path, capsys, monkeypatch):
    out = graphcap_cmd("export", "graphcap.demo:example", "-o", "demo.pt2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "demo.pt2").is_file() and "Wrote demo.pt2" in out.stdout

    out = graphcap_cmd("verify", "demo.pt2", "graphcap.demo:example", "--samples", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Program vs eager" in out.stdout and "input sets match eager" in out.stdout

    monkeypatch.chdir(tmp_path)  # the same commands in this process (faster than more subprocesses)
    status, text, err = run_main(capsys, "inspect", "demo.pt2", "--graph")
    assert status == 0, err
    for part in ("format version", "Signature", "USER_INPUT", "Operators", "aten.conv2d.default",
                 "Weights", "features.0.weight", "def forward"):
        assert part in text, part
    status, text, err = run_main(capsys, "run", "demo.pt2", "--samples", "1")
    assert status == 0, err
    assert "output['logits'] [2, 5]" in text


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """The command in this process (same code path as the console script, faster)."""
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_dynamic_model_verify_diff_and_exit_codes(tmp_path, capsys, monkeypatch):
    out = graphcap_cmd("verify", f"{FACTORIES}:dynamic", "--samples", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "upper ends" in out.stdout and "tokens [32, 8]" in out.stdout and "refused" in out.stdout

    counter = graphcap_cmd("verify", f"{FACTORIES}:counter", "--samples", "2", cwd=tmp_path)
    assert counter.returncode == 1
    assert "DIFFERS" in counter.stdout and "First failure" in counter.stdout

    monkeypatch.chdir(tmp_path)
    for name, factory in (("a.pt2", "dynamic"), ("b.pt2", "dynamic_scaled")):
        status, _, err = run_main(capsys, "export", f"{FACTORIES}:{factory}", "-o", name)
        assert status == 0, err
    status, out_text, err = run_main(capsys, "run", "a.pt2")
    assert status == 0 and "random #2" in out_text, err
    status, out_text, _ = run_main(capsys, "diff", "a.pt2", "a.pt2")
    assert status == 0 and "same signature" in out_text
    status, out_text, _ = run_main(capsys, "diff", "a.pt2", "b.pt2")
    assert status == 1
    assert "proj.weight" in out_text and "values differ" in out_text


def test_errors_are_messages_without_traceback_unless_debug(tmp_path, capsys, monkeypatch):
    broken = graphcap_cmd("verify", f"{FACTORIES}:broken", cwd=tmp_path)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.startswith("graphcap: error:")
    assert "ValueError: the factory cannot build its model" in broken.stderr
    assert "cli_factories.py:" in broken.stderr  # where: the user's line

    debug = graphcap_cmd("verify", f"{FACTORIES}:broken", "--debug", cwd=tmp_path)
    assert debug.returncode == 2 and "Traceback" in debug.stderr

    monkeypatch.chdir(tmp_path)
    status, _, err = run_main(capsys, "export", f"{FACTORIES}:nope", "-o", "x.pt2")
    assert status == 2 and "How to fix:" in err and "dynamic" in err  # lists the functions it has
    for args in (("verify", f"{FACTORIES}:wrong_shape"), ("inspect", "missing.pt2"), ("frobnicate",),
                 ("verify", "a", "b", "c"), ("export", f"{FACTORIES}:dynamic")):
        status, _, err = run_main(capsys, *args)
        assert status == 2, (args, err)
        assert err.startswith("graphcap: error:") and "Traceback" not in err, (args, err)


def test_report_option_calls_graphcap_report_with_the_verification(tmp_path, capsys, monkeypatch):
    import graphcap
    calls = []

    def fake_report(ep, path, *, verification=None, **kwargs):
        calls.append((ep, path, verification))
        with open(path, "w") as f:
            f.write("<html></html>")
    import graphcap.html_report
    monkeypatch.setattr(graphcap.html_report, "report", fake_report)
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(capsys, "verify", f"{FACTORIES}:dynamic", "--samples", "0", "--no-refusals",
                                "--report", "r.html")
    assert status == 0, err
    (ep, path, verification), = calls
    assert path == "r.html" and verification.passed and isinstance(ep, graphcap.ExportedProgram)
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "d.pt2", "--report", "e.html")
    assert status == 0 and calls[-1][1:] == ("e.html", None) and "Wrote e.html" in out
