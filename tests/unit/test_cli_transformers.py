"""A transformers model from the shell alone: export, inspect, run, verify, report and diff a tiny GPT-2,
each command a fresh ``python -m graphcap`` process, each result read from its ``--json`` document."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import transformers  # noqa: F401 (a pinned test dependency: the factories use it)

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = Path(__file__).resolve().parent / "cli_factories.py"


def shell(*args: str, cwd: Path) -> tuple[int, dict, str]:
    """``python -m graphcap ARGS --json`` in a fresh process: exit status, JSON document, stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "graphcap", *args, "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"graphcap {' '.join(args)} printed no JSON document:\n{done.stdout}\n{done.stderr}") \
            from None
    return done.returncode, doc, done.stderr


def test_gpt2_with_tensor_outputs_from_the_shell(tmp_path):
    gpt2 = f"{FACTORIES}:gpt2"
    status, doc, err = shell("export", gpt2, "--arg", "layers=2", "-o", "gpt2.pt2", cwd=tmp_path)
    assert status == 0, err
    labels = {r["input_dimension"]: (r["lower"], r["upper"]) for r in doc["program"]["ranges"]}
    assert labels == {"input_ids.shape[0]": (2, 8), "input_ids.shape[1]": (2, 64)}

    status, doc, err = shell("inspect", "gpt2.pt2", cwd=tmp_path)
    assert status == 0, err
    assert [i["name"] for i in doc["inputs"] if i["kind"] == "USER_INPUT"] == ["input_ids"]
    assert any(w["name"] == "lm.transformer.h.1.attn.c_attn.weight" for w in doc["weights"])

    status, doc, err = shell("run", "gpt2.pt2", "--input", "input_ids=4x16", cwd=tmp_path)
    assert status == 0, err
    assert doc["runs"][0]["outputs"] == {"output": [4, 16, 128]}

    status, doc, err = shell("verify", "gpt2.pt2", gpt2, "--arg", "layers=2", "--samples", "1", cwd=tmp_path)
    assert status == 0 and doc["passed"], doc.get("summary", err)

    status, doc, err = shell("report", "gpt2.pt2", "-o", "gpt2.html", cwd=tmp_path)
    assert status == 0 and (tmp_path / "gpt2.html").stat().st_size == doc["bytes"], err

    status, doc, err = shell("export", gpt2, "--arg", "layers=3", "-o", "gpt2_3.pt2", cwd=tmp_path)
    assert status == 0, err
    status, doc, err = shell("diff", "gpt2.pt2", "gpt2_3.pt2", cwd=tmp_path)
    assert status == 1 and not doc["same"], err
    assert any(c["section"] == "weights" and c["item"].startswith("lm.transformer.h.2.") for c in doc["changes"])


def test_gpt2_with_transformers_output_class_from_the_shell(tmp_path):
    gpt2 = f"{FACTORIES}:gpt2"
    status, doc, err = shell("export", gpt2, "--arg", "logits_only=False", "-o", "lm.pt2", cwd=tmp_path)
    assert status == 0, err  # exporting works today: the failure below is opening the file again
    status, doc, err = shell("inspect", "lm.pt2", cwd=tmp_path)
    assert status == 0, err
    status, doc, err = shell("run", "lm.pt2", "--samples", "1", cwd=tmp_path)
    assert status == 0 and [2, 8, 128] in doc["runs"][0]["outputs"].values(), err
    status, doc, err = shell("verify", "lm.pt2", gpt2, "--arg", "logits_only=False", "--samples", "1", cwd=tmp_path)
    assert status == 0 and doc["passed"], err
    status, doc, err = shell("diff", "lm.pt2", "lm.pt2", cwd=tmp_path)
    assert status == 0 and doc["same"], err
