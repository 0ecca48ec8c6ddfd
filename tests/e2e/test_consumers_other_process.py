"""Files torch's tools make from a graphcap program, loaded in another process.

A program whose structure holds a class graphcap flattens by its attributes (an
unregistered dataclass output, transformers' ``DynamicCache``) is handed to
torch's pytree in the process that exports it (docs/consumers.md). A process
that only loads the AOTInductor package or ``torch.export.save``'s file has no
such registration, and torch's loader fails with its own message. There the
user calls ``graphcap.register_flattenable(cls, with_torch=True)`` for each
class, as a torch.export user calls ``register_pytree_node`` /
``register_dataclass`` before loading. Each test exports and packages in one
fresh process and loads and runs in another, comparing with eager.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_TYPES = '''
import dataclasses, torch

@dataclasses.dataclass
class Out:
    """Not registered anywhere: graphcap flattens it by its attributes."""
    hidden: torch.Tensor
    scaled: torch.Tensor
    scale: float = 2.0

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        return h.relu(), Out(h.tanh(), h * 2.0)
'''

# Exports, packages for AOTInductor, and writes torch's and graphcap's files, with eager's leaves.
MAKE = '''
import importlib.util, sys, warnings, torch, torch._inductor, graphcap
import torch.utils._pytree as torch_pytree
which = sys.argv[1]
torch.manual_seed(0)
if which == "dataclass":
    import user_types
    model, args = user_types.Model().eval(), (torch.randn(3, 8),)
else:
    from transformers import GPT2Config, GPT2Model
    model = GPT2Model(GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=2, n_positions=64)).eval()
    args = (torch.randint(0, 128, (2, 8)),)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ep = graphcap.export(model, args)
    torch._inductor.aoti_compile_and_package(ep, package_path="aoti.pt2")
    torch.export.save(ep, "torch.pt2")
    graphcap.save(ep, "graphcap.pt2")
    if which == "dataclass" and importlib.util.find_spec("executorch") is not None:
        from executorch.exir import to_edge_transform_and_lower
        with open("model.pte", "wb") as f:
            f.write(to_edge_transform_and_lower(ep).to_executorch().buffer)
    with torch.no_grad():
        eager = model(*args)
# the hand-over registered the classes in this process, so torch's pytree takes the output apart
torch.save({"args": args, "eager": torch_pytree.tree_leaves(eager)}, "io.pt")
print("MADE", type(torch_pytree.tree_structure(eager)))
'''

# Loads each file with its own loader and runs it: "bare" registers nothing, "registered" calls
# graphcap.register_flattenable(cls, with_torch=True) for each class first.
LOAD = '''
import os, sys, torch, torch._inductor.codecache, graphcap  # torch 2.10's loader needs codecache imported
from graphcap import auto_flatten
which, mode = sys.argv[1:3]
if which == "dataclass":
    import user_types
    classes = [user_types.Out]
else:
    from transformers.cache_utils import DynamicCache, DynamicLayer
    classes = [DynamicCache, DynamicLayer]
if mode == "registered":
    for cls in classes:
        graphcap.register_flattenable(cls, with_torch=True)
io = torch.load("io.pt")

def check(name, run):
    try:
        with torch.no_grad():
            got = run()
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e).splitlines()[0])
        return
    leaves, spec = auto_flatten.flatten(got)  # torch's pytree, and graphcap's table (graphcap.load, bare)
    assert len(leaves) == len(io["eager"]), (name, len(leaves), len(io["eager"]))
    diff = max((a - b).abs().max().item() for a, b in zip(leaves, io["eager"]))
    kinds, todo = set(), [spec]
    while todo:
        s = todo.pop()
        kinds |= {s.type.__name__} if s.type in classes else set()
        todo += s.children()
    print(name, "OK", diff, ",".join(sorted(kinds)))

check("graphcap.load", lambda: graphcap.load("graphcap.pt2").module()(*io["args"]))
check("aoti_load_package", lambda: torch._inductor.aoti_load_package("aoti.pt2")(*io["args"]))
check("torch.export.load", lambda: torch.export.load("torch.pt2").module()(*io["args"]))
if os.path.exists("model.pte"):  # ExecuTorch's runtime returns the flat outputs: it reads no class
    from executorch.runtime import Runtime
    flat = lambda: Runtime.get().load_program("model.pte").load_method("forward").execute(list(io["args"]))
    check("executorch", lambda: list(flat()))
else:
    print("executorch SKIPPED")
try:  # Model Explorer's .pt2 file adapter reads the file with torch.export.load (the server's process)
    from model_explorer.builtin_pytorch_exportedprogram_adapter import BuiltinPytorchExportedProgramAdapter
    from model_explorer.consts import DEFAULT_SETTINGS
except ImportError:
    print("model_explorer SKIPPED")
else:
    try:
        graph = BuiltinPytorchExportedProgramAdapter().convert("torch.pt2", dict(DEFAULT_SETTINGS))["graphs"][0]
        print("model_explorer OK", len(graph.nodes))
    except Exception as e:
        print("model_explorer FAILED", type(e).__name__, str(e).splitlines()[0])
'''


def _fresh(code: str, cwd: Path, *args: str) -> tuple[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(cwd)]))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout, out.stderr


def _results(output: tuple[str, str]) -> dict[str, list[str]]:
    stdout, stderr = output
    return {"stderr": [stderr]} | {line.split()[0]: line.split()[1:] for line in stdout.splitlines()
            if line.split() and line.split()[0] in ("graphcap.load", "aoti_load_package", "torch.export.load",
                                                     "model_explorer", "executorch")}


def _made_and_loaded(which: str, tmp_path: Path) -> tuple[dict, dict]:
    (tmp_path / "user_types.py").write_text(USER_TYPES)
    assert "MADE" in _fresh(MAKE, tmp_path, which)[0]
    return _results(_fresh(LOAD, tmp_path, which, "bare")), _results(_fresh(LOAD, tmp_path, which, "registered"))


def _check(bare: dict, registered: dict, missing: str, classes: str, tolerance: float) -> None:
    # graphcap's own file finds the class by its importable name, without a registration
    assert bare["graphcap.load"][0] == "OK" and float(bare["graphcap.load"][1]) < tolerance, bare
    # torch's loaders fail with torch's own message when nothing registered the class (torch.export.load
    # logs it and raises its RuntimeError)...
    # (torch 2.15 words it "Deserializing <name> in pytree failed because the serialized type is not
    # registered", earlier lines "Deserializing <name> in pytree is not registered")
    message = re.compile(rf"Deserializing {re.escape(missing)} in pytree .*not registered")
    assert bare["aoti_load_package"][:2] == ["FAILED", "NotImplementedError"], bare
    assert message.search(" ".join(bare["aoti_load_package"])), bare
    assert bare["torch.export.load"][:2] == ["FAILED", "RuntimeError"] and message.search(bare["stderr"][0]), bare
    # ... and rebuild it, matching eager, once graphcap.register_flattenable(cls, with_torch=True) ran
    for loader in ("graphcap.load", "aoti_load_package", "torch.export.load"):
        status, diff, kinds = registered[loader]
        assert status == "OK" and float(diff) < tolerance and kinds == classes, (loader, registered)
    # ExecuTorch's .pte (where installed; the dataclass case) runs in a process that registered nothing
    if bare["executorch"] != ["SKIPPED"]:
        assert bare["executorch"][0] == "OK" and float(bare["executorch"][1]) < tolerance, bare
    # Model Explorer's .pt2 adapter (where installed) loads with torch.export.load: the same
    if bare["model_explorer"] != ["SKIPPED"]:
        assert bare["model_explorer"][:2] == ["FAILED", "RuntimeError"], bare
        assert registered["model_explorer"][0] == "OK" and int(registered["model_explorer"][1]) > 0, registered


def test_a_dataclass_output_loads_in_another_process_after_registering_it(tmp_path):
    bare, registered = _made_and_loaded("dataclass", tmp_path)
    if importlib.util.find_spec("executorch") is not None:
        assert bare["executorch"][0] == "OK", bare
    else:
        assert bare["executorch"] == ["SKIPPED"]
    _check(bare, registered, "user_types.Out", "Out", 1e-5)


@pytest.mark.slow
def test_gpt2_with_its_cache_loads_in_another_process_after_registering_it(tmp_path):
    bare, registered = _made_and_loaded("gpt2", tmp_path)
    _check(bare, registered, "transformers.cache_utils.DynamicCache", "DynamicCache,DynamicLayer", 1e-4)
