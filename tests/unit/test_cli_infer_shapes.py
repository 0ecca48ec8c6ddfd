"""``graphcap export --infer-shapes``: the spec inferred from the factory's example and the samples given
with ``--samples FILE.py:SAMPLES`` or ``--sample-input 'NAME=SHAPE ...'``, run as a user runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphcap

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = Path(__file__).resolve().parent / "cli_factories.py"


def graphcap_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "graphcap", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def export(tmp_path: Path, *options: str, factory: str = "static_scorer") -> subprocess.CompletedProcess:
    return graphcap_cli("export", f"{FACTORIES}:{factory}", "-o", str(tmp_path / "out.pt2"), *options, cwd=tmp_path)


def _pasted_spec(code: str) -> dict:
    namespace: dict = {}
    exec(code, namespace)  # the printed code is meant to be pasted: it must run as it is
    return namespace["dynamic_shapes"]


def test_samples_file_gives_a_dynamic_batch_and_pasteable_code(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--samples", f"{FACTORIES}:scorer_samples", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    inferred = doc["inferred_shapes"]
    assert inferred["verified_samples"] == [0, 1, 2]  # the example and both samples match eager
    spec = _pasted_spec(inferred["code"])
    assert spec["tokens"][0] is spec["mask"][0]  # one Dim: the batch the two inputs share
    assert set(spec["tokens"]) == {0} and set(spec["mask"]) == {0}  # the feature dims stay static
    ep = graphcap.load(str(tmp_path / "out.pt2"))
    # the saved program takes other batch sizes and refuses other feature sizes
    runnable = ep.module()
    out = runnable(torch.randn(9, 8), torch.rand(9, 3) > 0.5)
    assert out.shape == (9, 4)
    with pytest.raises(graphcap.RuntimeInputError):
        runnable(torch.randn(9, 5), torch.rand(9, 3) > 0.5)
    assert [r["upper"] for r in doc["program"]["ranges"]] == [None]  # unbounded: JSON null, not a crash


def test_sample_input_sizes_build_samples_with_the_example_dtypes(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--sample-input", "tokens=2x8 mask=2x3",
                  "--sample-input", "tokens=7x8 mask=7x3")
    assert done.returncode == 0, done.stderr
    assert "Inferred dynamic shapes" in done.stdout
    assert "batch = Dim(\"batch\"" in done.stdout
    assert "sizes 4, 2, 7 in the samples" in done.stdout  # the example, then the two --sample-input sizes
    ep = graphcap.load(str(tmp_path / "out.pt2"))
    assert ep.module()(torch.randn(3, 8), torch.rand(3, 3) > 0.5).shape == (3, 4)


def test_both_ways_of_giving_samples_add_up(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--samples", f"{FACTORIES}:scorer_samples",
                  "--sample-input", "tokens=5x8 mask=5x3", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inferred_shapes"]["verified_samples"] == [0, 1, 2, 3]


def test_a_sample_that_names_only_some_inputs_keeps_the_example_for_the_rest(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--sample-input", "x=2x8", "--sample-input", "x=6x9", "--json",
                  factory="two_heads")
    assert done.returncode == 0, done.stderr
    spec = _pasted_spec(json.loads(done.stdout)["inferred_shapes"]["code"])
    assert set(spec["x"]) == {0, 1}  # both of x's dims varied
    assert not spec["y"]  # y kept the example's 3x5 in every sample: static


def test_the_export_ways_take_the_inferred_spec(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--sample-input", "tokens=2x8 mask=2x3", "--chain", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["way"] == "chain" and "batch" in doc["inferred_shapes"]["code"]


@pytest.mark.parametrize("options, status, words", [
    ((), 2, "--infer-shapes needs samples"),
    (("--samples", f"{FACTORIES}:no_samples"), 2, "returned no samples"),
    (("--samples", f"{FACTORIES}:disagreeing_samples"), 3, "float64"),
    (("--sample-input", "x=2x8"), 2, "no tensor or int parameter named 'x'"),
    (("--sample-input", "tokens=2by8"), 2, "is not a shape"),
    (("--sample-input", "tokens=2x8:float99"), 2, "is not a torch dtype"),
    (("--samples", f"{FACTORIES}:nowhere"), 2, "has no function named 'nowhere'"),
])
def test_errors_go_through_the_cli_error_path(tmp_path, options, status, words):
    done = export(tmp_path, "--infer-shapes", *options)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert words in done.stderr
    assert "How to fix:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.pt2").exists()


def test_errors_in_json_carry_what_where_fix(tmp_path):
    done = export(tmp_path, "--infer-shapes", "--samples", f"{FACTORIES}:disagreeing_samples", "--json")
    assert done.returncode == 3
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "ExportInputError" and error["where"] == "tokens" and "float32" in error["fix"]


def test_samples_without_infer_shapes_and_a_factory_spec_with_it_are_refused(tmp_path):
    done = export(tmp_path, "--sample-input", "tokens=2x8 mask=2x3")
    assert done.returncode == 2 and "only read with --infer-shapes" in done.stderr
    done = export(tmp_path, "--infer-shapes", "--sample-input", "tokens=2x8 mask=2x3", factory="dynamic")
    assert done.returncode == 2 and "returns a dynamic_shapes spec" in done.stderr
