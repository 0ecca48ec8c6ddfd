"""The conventions of a Python command: ``python -m graphcap``, ``--version``, ``--json`` on every command,
documented exit statuses, shell completion, factory arguments, user-given inputs, ``report``, fast ``--help``.

Subprocess tests run the command as a user does; the rest call ``graphcap.cli.main`` in this process (the
same code path as the console script, without a torch import per call).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from graphcap.cli import COMMANDS, EXIT_STATUSES, build_parser, main
from graphcap.cli.factory import parse_factory_args

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = Path(__file__).resolve().parent / "cli_factories.py"


def graphcap_m(*args: str, cwd: Path, module: str = "graphcap") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def run_json(capsys, *args: str) -> tuple[int, dict]:
    status, out, err = run_main(capsys, *args, "--json")
    doc = json.loads(out)  # stdout is exactly one JSON document
    assert doc["exit_status"] == status and doc["ok"] == (status == 0), (doc, err)
    return status, doc


# -- python -m graphcap, --version, fast start ------------------------------------------------------

def test_python_m_graphcap_version_and_json_export(tmp_path):
    from graphcap.cli.versions import installed_version
    out = graphcap_m("--version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    version = installed_version("graphcap")
    assert out.stdout.startswith(f"graphcap {version}" if version else "graphcap unknown")
    assert f"torch {torch.__version__.split('+')[0]}" in out.stdout

    out = graphcap_m("export", f"{FACTORIES}:dynamic", "-o", "a.pt2", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] and doc["command"] == "export" and doc["output"] == "a.pt2" and doc["way"] == "non_strict"
    assert doc["bytes"] == (tmp_path / "a.pt2").stat().st_size
    assert doc["program"]["ranges"] == [{"symbol": doc["program"]["ranges"][0]["symbol"],
                                         "dim": "batch", "input_dimension": "tokens.shape[0]",
                                         "lower": 1, "upper": 32}]

    err = graphcap_m("inspect", "missing.pt2", "--json", cwd=tmp_path)  # errors are JSON too, and exit 2
    assert err.returncode == 2
    doc = json.loads(err.stdout)
    assert doc == {"ok": False, "exit_status": 2, "error": doc["error"]}
    assert doc["error"]["type"] == "UsageError" and doc["error"]["where"] == "missing.pt2"
    assert err.stderr.startswith("graphcap: error: No such file")


def test_help_version_and_completion_import_no_torch(tmp_path):
    """--help, --version and completion answer without importing torch (the seconds --help took)."""
    code = ("import sys\nfrom graphcap.cli import main\n"
            "for argv in (['--help'], ['export', '--help'], ['--version'], ['completion', 'bash'],"
            " ['completion', 'zsh']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('TORCH IMPORTED', 'torch' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("TORCH IMPORTED False"), out.stdout[-300:]


def test_import_graphcap_is_lazy_and_keeps_its_public_names():
    code = ("import sys, graphcap\nassert 'torch' not in sys.modules\n"
            "import graphcap.capture.progress\n"  # the subpackage: graphcap.capture stays the function
            "assert callable(graphcap.capture) and graphcap.capture.__module__ == 'graphcap.capture.strategies'\n"
            "assert set(graphcap.__all__) <= set(dir(graphcap))\n"
            "from graphcap import *\nassert export is graphcap.export and Dim is graphcap.Dim\n"
            "print('OK')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-2000:]
    import graphcap
    assert set(graphcap._CORE_NAMES) == set(graphcap._import_core())  # the lazy table is complete


# -- exit statuses -------------------------------------------------------------------------------------

def test_exit_statuses_are_documented_and_each_is_produced(tmp_path, capsys, monkeypatch):
    doc = (ROOT / "docs" / "cli.md").read_text()
    for code in EXIT_STATUSES:
        assert f"| {code} |" in doc, f"docs/cli.md has no row for exit status {code}"
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2")[0] == 0
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic_scaled", "-o", "b.pt2")[0] == 0
    assert run_main(capsys, "diff", "a.pt2", "b.pt2")[0] == 1  # a check failed
    assert run_main(capsys, "inspect", "a.pt2", "--frobnicate")[0] == 2  # usage
    status, _, err = run_main(capsys, "export", f"{FACTORIES}:shape_bug", "-o", "c.pt2")
    assert status == 3 and "Traceback" not in err, err  # graphcap could not export it: its own message
    status, _, err = run_main(capsys, "run", "a.pt2", "--input", "tokens=40x8")
    assert status == 3 and "<= 32" in err, err  # the program refused the input (its range is [1, 32])

    import graphcap.cli.commands as commands

    def bug(args):
        raise KeyError("an unexpected key")
    monkeypatch.setattr(commands, "inspect_command", bug)
    status, _, err = run_main(capsys, "inspect", "a.pt2")
    assert status == 4 and "KeyError" in err and "--debug" in err


# -- --json on every command -----------------------------------------------------------------------------

def test_every_command_prints_one_json_document(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, doc = run_json(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2")
    assert status == 0 and doc["program"]["operator_calls"] > 0
    status, doc = run_json(capsys, "inspect", "a.pt2", "--graph")
    assert status == 0 and doc["program"] == "a.pt2" and "def forward" in doc["graph"]
    assert [i["name"] for i in doc["inputs"] if i["kind"] == "USER_INPUT"] == ["tokens", "mask"]
    assert {w["name"]: w["shape"] for w in doc["weights"]} == {"proj.weight": [4, 8], "proj.bias": [4]}
    assert doc["weight_bytes"] == 144 and doc["format_version"] >= 1
    status, doc = run_json(capsys, "run", "a.pt2", "--samples", "1")
    assert status == 0 and [r["input_set"] for r in doc["runs"]] == ["example sizes", "random #1"]
    assert doc["runs"][0]["outputs"] == {"output": [4, 4]} and doc["runs"][0]["inputs"]["tokens"] == [4, 8]
    status, doc = run_json(capsys, "verify", "a.pt2", f"{FACTORIES}:dynamic", "--samples", "1")
    assert status == 0 and doc["passed"] and doc["input_sets"] and doc["refusals"]
    assert doc["summary"].startswith(f"{len(doc['input_sets'])}/{len(doc['input_sets'])} input sets match")
    status, doc = run_json(capsys, "verify", f"{FACTORIES}:counter", "--samples", "2", "--no-refusals")
    assert status == 1 and doc["ok"] is False and doc["passed"] is False
    status, doc = run_json(capsys, "diff", "a.pt2", "a.pt2")
    assert status == 0 and doc["same"] and doc["changes"] == []
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic_scaled", "-o", "b.pt2")[0] == 0
    status, doc = run_json(capsys, "diff", "a.pt2", "b.pt2")
    assert status == 1 and not doc["same"]
    assert {"section": "weights", "item": "proj.weight"}.items() <= doc["changes"][0].items() or \
        any(c["item"] == "proj.weight" for c in doc["changes"])
    status, doc = run_json(capsys, "report", "a.pt2", "-o", "a.html")
    assert status == 0 and doc["bytes"] == (tmp_path / "a.html").stat().st_size
    status, doc = run_json(capsys, "completion", "bash")
    assert status == 0 and doc["shell"] == "bash" and "complete -o filenames" in doc["script"]
    status, out, err = run_main(capsys, "verify", f"{FACTORIES}:dynamic", "--json", "v.json")
    assert status == 2 and "graphcap ... --json > v.json" in err  # --json takes no file: it says how instead


# -- completion ------------------------------------------------------------------------------------------

def test_completion_scripts_name_every_command_and_option(tmp_path):
    parser = build_parser()
    out = graphcap_m("completion", "bash", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert "complete -o filenames -o bashdefault -F _graphcap_complete graphcap" in script
    for command in COMMANDS:
        assert f"        {command}) opts=\"" in script
    for option in ("--samples", "--input", "--inputs", "--arg", "--draft", "--chain", "--strategies", "--json"):
        assert option in script
    bash = shutil.which("bash")
    if bash:
        (tmp_path / "c.bash").write_text(script)
        probe = ('source c.bash\n'
                 'COMP_WORDS=(graphcap ex); COMP_CWORD=1; _graphcap_complete; echo "top: ${COMPREPLY[*]}"\n'
                 'COMP_WORDS=(graphcap run x.pt2 --sa); COMP_CWORD=3; _graphcap_complete; echo "run: ${COMPREPLY[*]}"\n'
                 'COMP_WORDS=(graphcap completion ""); COMP_CWORD=2; _graphcap_complete; echo "sh: ${COMPREPLY[*]}"\n')
        done = subprocess.run([bash, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "top: export" in done.stdout and "run: --samples" in done.stdout
        assert "sh: bash zsh" in done.stdout
    zsh_script = graphcap_m("completion", "zsh", cwd=tmp_path).stdout
    assert zsh_script.startswith("#compdef graphcap") and "compdef _graphcap graphcap" in zsh_script
    assert all(f"'{c}:" in zsh_script for c in COMMANDS)
    assert "'export:export FILE.py\\:FACTORY to a .pt2 file'" in zsh_script  # a colon in help is escaped
    zsh = shutil.which("zsh")
    if zsh:
        (tmp_path / "c.zsh").write_text(zsh_script)
        assert subprocess.run([zsh, "-n", "c.zsh"], cwd=tmp_path, capture_output=True, timeout=60).returncode == 0
        loaded = subprocess.run([zsh, "-c", "autoload -U compinit; compinit -u; source ./c.zsh; "
                                           "echo ${_comps[graphcap]}"], cwd=tmp_path, capture_output=True, text=True,
                                timeout=60)
        assert loaded.stdout.strip() == "_graphcap", loaded.stderr
    assert parser.prog == "graphcap"


# -- factory arguments -----------------------------------------------------------------------------------

def test_factory_arguments_are_literals_never_code():
    args = parse_factory_args(["depth=4", "rate=0.5", "name=gpt2", "flag=True", "shape=(1, 2)", "none=None",
                               "quoted='x y'", "call=__import__('os').getcwd()"])
    assert args == {"depth": 4, "rate": 0.5, "name": "gpt2", "flag": True, "shape": (1, 2), "none": None,
                    "quoted": "x y", "call": "__import__('os').getcwd()"}  # not a literal: kept as text


def test_factory_argument_given_missing_and_unknown(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:needs_depth", "-o", "n.pt2", "--arg", "depth=3")
    assert status == 0, err
    status, doc = run_json(capsys, "inspect", "n.pt2")
    assert sum(1 for w in doc["weights"] if w["name"].endswith(".weight")) == 3
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:needs_depth", "-o", "n.pt2")
    assert status == 2
    # the user's factory is blamed (its file, line and signature), not graphcap's own code, and the fix is pasteable
    assert "cli/factory.py" not in err
    assert f"{FACTORIES}:" in err and "def needs_depth(depth, width=8)" in err
    assert "--arg depth=VALUE" in err
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:needs_depth", "-o", "n.pt2", "--arg", "depht=3")
    assert status == 2 and "no argument named depht" in err and "depth, width" in err
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:needs_depth", "-o", "n.pt2", "--arg", "3")
    assert status == 2 and "is not NAME=VALUE" in err


# -- run: samples, shapes, inputs file -------------------------------------------------------------------

def test_run_refuses_negative_samples_and_takes_given_shapes_and_files(tmp_path, capsys, monkeypatch):
    from safetensors.torch import save_file
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2")[0] == 0
    status, _, err = run_main(capsys, "run", "a.pt2", "--samples", "-1")
    assert status == 2 and "--samples -1" in err and "cannot be negative" in err
    status, _, err = run_main(capsys, "verify", f"{FACTORIES}:dynamic", "--samples", "-3")
    assert status == 2 and "cannot be negative" in err

    # one shape given: the other input shares its batch symbol and follows it
    status, doc = run_json(capsys, "run", "a.pt2", "--input", "tokens=7x8")
    assert status == 0, doc
    (run,) = doc["runs"]
    assert run["input_set"] == "given sizes" and run["inputs"] == {"tokens": [7, 8], "mask": [7, 3]}
    assert run["outputs"] == {"output": [7, 4]}
    status, _, err = run_main(capsys, "run", "a.pt2", "--input", "tokens=7x8:float64")
    assert status == 3 and "dtype" in err  # refused by the program, with its message
    for bad, words in (("toks=4x8", "no input named 'toks'"), ("tokens=4by8", "is not a shape"),
                       ("tokens=4x8:floaty", "not a torch dtype"), ("tokens", "is not NAME=SHAPE")):
        status, _, err = run_main(capsys, "run", "a.pt2", "--input", bad)
        assert status == 2 and words in err, (bad, err)
    assert "tokens (float32[" in run_main(capsys, "run", "a.pt2", "--input", "toks=4x8")[2]  # lists the inputs

    tokens, mask = torch.randn(5, 8), torch.rand(5, 3) > 0.5
    save_file({"tokens": tokens, "mask": mask}, str(tmp_path / "in.safetensors"))
    status, doc = run_json(capsys, "run", "a.pt2", "--inputs", "in.safetensors")
    assert status == 0 and doc["runs"][0]["input_set"] == "from in.safetensors"
    assert doc["runs"][0]["outputs"] == {"output": [5, 4]}
    save_file({"tokens": tokens}, str(tmp_path / "part.safetensors"))  # the rest generated to agree
    status, doc = run_json(capsys, "run", "a.pt2", "--inputs", "part.safetensors")
    assert status == 0 and doc["runs"][0]["inputs"] == {"tokens": [5, 8], "mask": [5, 3]}
    save_file({"tokenz": tokens}, str(tmp_path / "wrong.safetensors"))
    status, _, err = run_main(capsys, "run", "a.pt2", "--inputs", "wrong.safetensors")
    assert status == 2 and "tokenz" in err
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x04not safetensors")
    status, _, err = run_main(capsys, "run", "a.pt2", "--inputs", "pickle.pt")
    assert status == 2 and "is not a safetensors file" in err


def test_run_given_inputs_give_the_programs_result(tmp_path, capsys, monkeypatch):
    """The tensors of an inputs file are the ones the program runs on (its output equals eager's)."""
    from safetensors.torch import save_file

    import graphcap
    from graphcap.cli.factory import load_factory
    monkeypatch.chdir(tmp_path)
    model = load_factory(f"{FACTORIES}:dynamic").model  # the same model, for eager
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2")[0] == 0
    tokens, mask = torch.randn(3, 8), torch.rand(3, 3) > 0.5
    save_file({"tokens": tokens, "mask": mask}, str(tmp_path / "in.safetensors"))
    from graphcap.cli.inputs import given_inputs
    from graphcap.verification.signature_inputs import ProgramInputs
    ep = graphcap.load("a.pt2")
    call = given_inputs(ProgramInputs(ep), [], "in.safetensors", 0)
    assert torch.equal(call.args[0], tokens) and torch.equal(call.args[1], mask)
    torch.testing.assert_close(ep.module()(*call.args), model(tokens, mask))


# -- export --draft / --chain, report --------------------------------------------------------------------

def test_export_draft_and_chain(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = run_main(capsys, "export", f"{FACTORIES}:branch_on_data", "-o", "x.pt2")
    assert status == 3 and "torch._check" in err  # a plain export refuses the branch on data
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:branch_on_data", "-o", "d.pt2", "--draft")
    assert status == 0, err
    assert "(draft)" in out and "Wrote d.pt2" in out and "data" in out.lower()
    status, doc = run_json(capsys, "export", f"{FACTORIES}:branch_on_data", "-o", "d.pt2", "--draft")
    assert doc["way"] == "draft" and [p["kind"] for p in doc["draft_report"]] == ["data_dependent"]
    status, doc = run_json(capsys, "export", f"{FACTORIES}:branch_on_data", "-o", "c.pt2", "--chain",
                           "--strategies", "non_strict,draft")
    assert status == 0 and doc["way"] == "chain" and doc["capture"]["strategy"] == "draft"
    assert [(a["strategy"], a["success"]) for a in doc["capture"]["attempts"]] == [("non_strict", False),
                                                                                   ("draft", True)]
    status, doc = run_json(capsys, "inspect", "c.pt2")
    assert status == 0
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2", "--strategies", "strict")
    assert status == 2 and "--chain" in err
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2", "--chain",
                                "--strategies", "fast")
    assert status == 2 and "unknown strategy fast" in err
    status, out, err = run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2", "--draft", "--strict")
    assert status == 2 and "not allowed with" in err


def test_report_command_writes_graphcaps_report(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "export", f"{FACTORIES}:dynamic", "-o", "a.pt2")[0] == 0
    status, out, err = run_main(capsys, "report", "a.pt2", "-o", "a.html", "--title", "Scorer v1")
    assert status == 0 and "Wrote a.html" in out, err
    page = (tmp_path / "a.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "Scorer v1" in page and "proj" in page
    status, _, err = run_main(capsys, "report", "a.pt2", "-o", "a.pdf")
    assert status == 2 and "a.html" in err
    status, _, err = run_main(capsys, "report", "a.pt2", "-o", "no/such/folder/a.html")
    assert status == 2 and "does not exist" in err


def test_no_command_prints_help_or_a_json_error(capsys):
    status, out, _ = run_main(capsys)
    assert status == 2 and out.startswith("usage: graphcap") and "exit status:" in out
    status, out, err = run_main(capsys, "--json")
    doc = json.loads(out)
    assert status == 2 and doc["ok"] is False and doc["error"]["what"] == "No command given."
    status, out, err = run_main(capsys, "--json", "inspect")  # --json before the command counts as well
    assert status == 2 and json.loads(out)["error"]["type"] == "CommandLineUsage"


def test_run_int_input_is_given_by_value(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "export", f"{FACTORIES}:int_input", "-o", "i.pt2")[0] == 0
    status, doc = run_json(capsys, "run", "i.pt2", "--samples", "1")
    assert status == 0 and [r["inputs"]["x"] for r in doc["runs"]] == [[3], [3]]
    assert all(1 <= r["inputs"]["n"] <= 10 for r in doc["runs"])  # generated inside its range
    status, doc = run_json(capsys, "run", "i.pt2", "--input", "n=7")
    assert status == 0 and doc["runs"][0]["inputs"] == {"x": [3], "n": 7}
    status, _, err = run_main(capsys, "run", "i.pt2", "--input", "n=70")
    assert status == 3 and "<= 10" in err  # outside its range: the program refuses it
    status, _, err = run_main(capsys, "run", "i.pt2", "--input", "n=2x3")
    assert status == 2 and "is an int input" in err
