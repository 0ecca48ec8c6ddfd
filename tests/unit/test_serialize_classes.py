"""Programs whose structure names classes of an installed library load in a fresh process.

The loader finds such classes only below packages the process imported, or
modules the user names; the command line puts stand-in records in their place.
Each case runs in a fresh subprocess: nothing this test process registered may help.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap import auto_flatten
from graphcap.serialize.archive import read_entries, write_archive

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def fresh(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(cwd)]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "graphcap.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    try:
        import transformers_factories as factories
    finally:
        sys.path.remove(str(HERE))
    folder = tmp_path_factory.mktemp("gpt2")
    for name in ("gpt2", "gpt2_cache"):
        model, args = getattr(factories, name)()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = graphcap.export(model, args)
        graphcap.save(ep, folder / f"{name}.pt2")
        leaves = [t for t in auto_flatten.flatten(ep.module()(*args))[0] if isinstance(t, torch.Tensor)]
        torch.save({"args": args, "leaves": leaves}, folder / f"{name}.expected")
    return folder


_RUN_AND_COMPARE = """
    import sys, torch, graphcap
    {prelude}
    ep = graphcap.load(sys.argv[1], {load_args})
    expected = torch.load(sys.argv[2])
    out = ep.module()(*expected["args"])
    from graphcap import auto_flatten
    leaves = [t for t in auto_flatten.flatten(out)[0] if isinstance(t, torch.Tensor)]
    assert len(leaves) == len(expected["leaves"]) and all(torch.equal(a, b) for a, b in zip(leaves, expected["leaves"]))
    cache = getattr(out, "past_key_values", None)
    print("OUT", type(out).__module__, type(out).__name__, type(cache).__name__ if cache is not None else "-")
    print("IMPORTED", "transformers" in sys.modules)
"""


@pytest.mark.parametrize("name", ["gpt2", "gpt2_cache"])
def test_fresh_process_after_import_of_the_top_package(gpt2_files, name):
    out = fresh(_RUN_AND_COMPARE.format(prelude="import transformers", load_args=""), gpt2_files,
                f"{name}.pt2", f"{name}.expected")
    assert out.returncode == 0, out.stderr
    assert "OUT transformers.modeling_outputs CausalLMOutputWithCrossAttentions" in out.stdout
    if name == "gpt2_cache":
        assert "DynamicCache" in out.stdout


def test_fresh_process_cache_is_the_real_class_and_usable(gpt2_files):
    code = """
        import sys, torch, transformers, graphcap
        ep = graphcap.load("gpt2_cache.pt2")
        out = ep.module()(*ep.example_inputs[0])
        from transformers.cache_utils import DynamicCache
        assert isinstance(out.past_key_values, DynamicCache)
        print("SEQ", out.past_key_values.get_seq_length())
    """
    out = fresh(code, gpt2_files)
    assert out.returncode == 0, out.stderr
    assert "SEQ 8" in out.stdout


def test_fresh_process_without_import_is_refused_with_the_fix_and_imports_nothing(gpt2_files):
    code = """
        import sys, graphcap
        try:
            graphcap.load("gpt2.pt2")
        except graphcap.SerializationError as e:
            print("ERR", e)
        print("IMPORTED", "transformers" in sys.modules)
    """
    out = fresh(code, gpt2_files)
    assert out.returncode == 0, out.stderr
    assert "CausalLMOutputWithCrossAttentions" in out.stdout
    assert "import_modules=['transformers']" in out.stdout and "--import transformers" in out.stdout
    assert "IMPORTED False" in out.stdout


def test_fresh_process_import_modules_argument(gpt2_files):
    out = fresh(_RUN_AND_COMPARE.format(prelude="", load_args="import_modules=['transformers']"), gpt2_files,
                "gpt2_cache.pt2", "gpt2_cache.expected")
    assert out.returncode == 0, out.stderr
    assert "CausalLMOutputWithCrossAttentions DynamicCache" in out.stdout


def test_fresh_process_stand_ins_run_and_save_again_without_importing(gpt2_files):
    code = """
        import sys, torch, graphcap
        from graphcap.torch_private import pytree
        ep = graphcap.load("gpt2_cache.pt2", stand_ins=True, mmap=True)
        out = ep.module()(*ep.example_inputs[0])
        assert type(out).__name__ == "CausalLMOutputWithCrossAttentions", type(out)
        assert out.logits.shape == (1, 8, 64)
        cache = out.past_key_values
        assert type(cache).__name__ == "DynamicCache" and cache.layers[1].values.shape == (1, 2, 8, 16)
        graphcap.save(ep, "again.pt2")
        print("IMPORTED", "transformers" in sys.modules)
        import transformers
        again = graphcap.load("again.pt2")  # names and flattening kept: the real classes now
        print("AGAIN", type(again.module()(*ep.example_inputs[0]).past_key_values).__module__)
    """
    out = fresh(code, gpt2_files)
    assert out.returncode == 0, out.stderr
    assert "IMPORTED False" in out.stdout and "AGAIN transformers.cache_utils" in out.stdout


def test_cli_opens_transformers_programs_in_a_fresh_process(gpt2_files):
    for args in (["inspect", "gpt2_cache.pt2"], ["run", "gpt2_cache.pt2", "--samples", "1"],
                 ["diff", "gpt2.pt2", "gpt2_cache.pt2"], ["inspect", "--import", "transformers", "gpt2.pt2"],
                 ["verify", "gpt2_cache.pt2", f"{HERE / 'transformers_factories.py'}:gpt2_cache", "--samples", "1"]):
        out = cli(*args, cwd=gpt2_files)
        expected = 1 if args[0] == "diff" else 0  # diff: the two programs differ
        assert out.returncode == expected, (args, out.stdout[-2000:], out.stderr[-2000:])
        assert "not registered" not in out.stderr
    out = cli("run", "gpt2_cache.pt2", "--samples", "0", cwd=gpt2_files)
    assert "output.past_key_values.layers[1].values [1, 2, 8, 16]" in out.stdout


def test_cli_import_of_a_missing_module_is_a_clear_error(gpt2_files):
    out = cli("inspect", "--import", "no_such_module_xyz", "gpt2.pt2", cwd=gpt2_files)
    assert out.returncode == 3  # graphcap could not load: exit status 3 (docs/cli.md)
    assert "no_such_module_xyz" in out.stderr and "Traceback" not in out.stderr


def _rename_out_class(src: Path, dst: Path, new_name: str) -> None:
    entries = read_entries(src)
    program = json.loads(entries["program.json"])
    program["module_call_graph"][0]["signature"]["out_spec"]["type"] = new_name
    entries["program.json"] = json.dumps(program).encode()
    write_archive(dst, entries)


def test_a_file_never_makes_the_loader_import_a_package(gpt2_files, tmp_path):
    pkg = tmp_path / "sidefx_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("open('IMPORTED_BY_LOAD', 'w').close()\n")
    (pkg / "outputs.py").write_text("from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions "
                                    "as Out\n")
    _rename_out_class(gpt2_files / "gpt2.pt2", tmp_path / "named.pt2", "sidefx_pkg.outputs.Out")
    code = """
        import os, graphcap, transformers
        try:
            graphcap.load("named.pt2")
            print("LOADED")
        except graphcap.SerializationError as e:
            print("REFUSED", e.what)
        print("SIDE EFFECT", os.path.exists("IMPORTED_BY_LOAD"))
    """
    out = fresh(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "REFUSED" in out.stdout and "SIDE EFFECT False" in out.stdout
    # named by the user: imported, and its submodule found below it
    code = code.replace('graphcap.load("named.pt2")', 'graphcap.load("named.pt2", import_modules=["sidefx_pkg"])')
    out = fresh(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "SIDE EFFECT True" in out.stdout


class Holder:
    def __init__(self, a, b, scale):
        self.a, self.b, self.scale = a, b, scale


def test_register_flattenable_is_what_export_does_without_the_warning():
    class Model(torch.nn.Module):
        def forward(self, h):
            return Holder(h.a * h.scale, h.b + 1, h.scale)

    holder = Holder(torch.randn(3), torch.randn(2), 2.0)
    graphcap.register_flattenable(Holder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the class is known: no auto-flattening warning
        ep = graphcap.export(Model(), (holder,))
    out = ep.module()(holder)
    assert isinstance(out, Holder) and torch.equal(out.a, holder.a * 2) and out.scale == 2.0
    with pytest.raises(graphcap.ExportInputError, match="already a pytree node"):
        graphcap.register_flattenable(tuple)
    with pytest.raises(graphcap.ExportInputError, match="expects a class"):
        graphcap.register_flattenable(holder)


def test_register_flattenable_lets_a_fresh_process_load_a_users_class(tmp_path):
    (tmp_path / "user_types.py").write_text(textwrap.dedent("""
        class Pair:
            def __init__(self, x, y):
                self.x, self.y = x, y
    """))
    code = """
        import sys, torch, graphcap, user_types, warnings
        class M(torch.nn.Module):
            def forward(self, x):
                return user_types.Pair(x + 1, x * 2)
        if sys.argv[1] == "save":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graphcap.save(graphcap.export(M(), (torch.ones(2),)), "pair.pt2")
        else:
            out = graphcap.load("pair.pt2").module()(torch.ones(2))
            print("PAIR", type(out).__name__, out.y.tolist())
    """
    assert fresh(code, tmp_path, "save").returncode == 0
    out = fresh(code, tmp_path, "load")
    assert out.returncode == 0, out.stderr
    assert "PAIR Pair [2.0, 2.0]" in out.stdout


def test_a_file_cannot_rebuild_a_standard_library_class_by_attributes(gpt2_files, tmp_path):
    entries = read_entries(gpt2_files / "gpt2_cache.pt2")
    program = json.loads(entries["program.json"])
    cache = program["module_call_graph"][0]["signature"]["out_spec"]["children"][1]
    assert cache["type"] == "transformers.cache_utils.DynamicCache" and cache["flattened"] == "attributes"
    cache["type"] = "subprocess.Popen"  # imported by the process, a finalizer acting on its attributes
    entries["program.json"] = json.dumps(program).encode()
    write_archive(tmp_path / "popen.pt2", entries)
    code = """
        import subprocess, transformers, graphcap
        try:
            graphcap.load("popen.pt2")
            print("LOADED")
        except graphcap.SerializationError as e:
            print("REFUSED", e.what)
    """
    out = fresh(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "REFUSED" in out.stdout and "subprocess.Popen" in out.stdout


def test_namedtuple_outputs_found_by_name_or_stood_in(tmp_path):
    (tmp_path / "nt_types.py").write_text("import collections\nPair = collections.namedtuple('Pair', ['lo', 'hi'])\n")
    code = """
        import sys, torch, graphcap
        if sys.argv[1] == "save":
            import nt_types
            class M(torch.nn.Module):
                def forward(self, x):
                    return nt_types.Pair(x - 1, x + 1)
            graphcap.save(graphcap.export(M(), (torch.zeros(2),)), "nt.pt2")
        elif sys.argv[1] == "stand-in":
            out = graphcap.load("nt.pt2", stand_ins=True).module()(torch.zeros(2))
            print("OUT", type(out).__module__, type(out).__name__, out.hi.tolist(), "nt_types" in sys.modules)
        else:
            import nt_types
            out = graphcap.load("nt.pt2").module()(torch.zeros(2))
            print("OUT", type(out) is nt_types.Pair, out.lo.tolist())
    """
    assert fresh(code, tmp_path, "save").returncode == 0
    out = fresh(code, tmp_path, "stand-in")
    assert out.returncode == 0, out.stderr
    assert "OUT graphcap.stand_in Pair [1.0, 1.0] False" in out.stdout
    out = fresh(code, tmp_path, "real")
    assert out.returncode == 0, out.stderr
    assert "OUT True [-1.0, -1.0]" in out.stdout
