"""The command line on a file of several methods (graphcap.export_methods): inspect lists them,
--method picks one for inspect, run, verify and report (issue 27)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_cli import graphcap_cmd, run_main
from test_export_methods import TinyDecoder, _export

import graphcap

HERE = Path(__file__).resolve().parent
FACTORY = f"""
import sys, torch
sys.path.insert(0, {str(HERE)!r})
from test_export_methods import TinyDecoder

def make():
    torch.manual_seed(0)
    return TinyDecoder(), (torch.tensor([[1, 2, 3]]),)
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("methods")
    torch.manual_seed(0)
    graphcap.save(_export(TinyDecoder()), folder / "dec.pt2")
    graphcap.save(graphcap.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),)), folder / "one.pt2")
    (folder / "decoder_factory.py").write_text(FACTORY)
    return folder


def test_inspect_lists_the_methods_and_what_they_share(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    status, text, err = run_main(capsys, "inspect", "dec.pt2")
    assert status == 0, err
    assert "2 methods over one state" in text and "--method prefill" in text
    status, text, err = run_main(capsys, "inspect", "dec.pt2", "--json")
    data = json.loads(text)
    methods = {m["method"]: m for m in data["methods"]}
    assert list(methods) == ["prefill", "decode"]
    assert methods["prefill"]["inputs"] == ["ids"] and methods["decode"]["inputs"] == ["tok"]
    assert methods["prefill"]["writes"] == methods["decode"]["writes"] == ["k_cache", "pos", "v_cache"]
    assert data["state_tensors"] == 7


def test_inspect_run_and_report_pick_a_method(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    status, text, err = run_main(capsys, "inspect", "dec.pt2", "--method", "decode", "--json")
    assert status == 0, err
    data = json.loads(text)
    assert data["method"] == "decode" and [i["name"] for i in data["inputs"] if i["kind"] == "USER_INPUT"] == ["tok"]
    status, text, err = run_main(capsys, "run", "dec.pt2", "--method", "prefill", "--samples", "1", "--json")
    assert status == 0, err
    runs = json.loads(text)["runs"]
    assert len(runs) == 2 and all(r["outputs"] == {"output": [1, 1, 13]} for r in runs)
    status, text, err = run_main(capsys, "run", "dec.pt2", "--method", "decode", "--input", "tok=1x1")
    assert status == 0, err
    assert "method decode" in text
    status, text, err = run_main(capsys, "report", "dec.pt2", "--method", "decode", "-o", "decode.html")
    assert status == 0, err
    assert "method decode" in (files / "decode.html").read_text()


def test_verify_checks_a_method_against_the_factory_models_method(files):
    out = graphcap_cmd("verify", "dec.pt2", "decoder_factory.py:make", "--method", "decode", "--samples", "1",
                       "--json", cwd=files)
    assert out.returncode == 0, out.stderr + out.stdout
    data = json.loads(out.stdout)
    assert data["method"] == "decode" and data["passed"]


@pytest.mark.parametrize("command", [["inspect", "dec.pt2", "--method", "encode"], ["run", "dec.pt2"],
                                     ["report", "dec.pt2", "-o", "x.html"], ["run", "one.pt2", "--method", "decode"],
                                     ["diff", "dec.pt2", "one.pt2"]])
def test_a_missing_unknown_or_needless_method_is_a_usage_error(files, capsys, monkeypatch, command):
    monkeypatch.chdir(files)
    status, text, err = run_main(capsys, *command)
    assert status == 2
    message = text + err
    if "one.pt2" in command and "--method" in command:
        assert "holds one program" in message
    elif "encode" in command:
        assert "no method 'encode'" in message and "prefill, decode" in message
    else:
        assert "several methods (prefill, decode)" in message and "--method prefill" in message
