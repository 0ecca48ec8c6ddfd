"""Exported programs and their metadata, compared with goldens made before speed work.

Speed changes (lazy imports, fewer graph walks, cheaper per-export extras)
must not change what an export produces. Each case here is exported and
written out in full: the printed program, then for every node of every
(sub)graph its ``nn_module_stack``, ``source_fn_stack`` and ``stack_trace``
(paths normalized), so a change that drops or alters metadata fails as surely
as one that changes the graph. Zoo models included are the ones that export
in well under a second.

The goldens live under ``tests/golden/programs/torch-<major.minor>/``: printed
stack traces name lines of torch and transformers, which move between
releases. A torch line without goldens fails. Regenerate (after an intended
change, saying why in the commit) with ``GRAPHCAP_UPDATE_GOLDEN=1``.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

import graphcap
from conftest import HAVE_SHARED_ZOO, build_zoo

ROOT = Path(__file__).resolve().parents[2]
TORCH_LINE = ".".join(torch.__version__.split(".")[:2])
GOLDEN = ROOT / "tests" / "golden" / "programs" / f"torch-{TORCH_LINE}"
SITE = Path(sysconfig.get_paths()["purelib"]).resolve()
PREFIX = Path(sys.prefix).resolve()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.lin(x)) + x)


class Stack(nn.Module):
    """Nested and repeated submodules, a conversion, a python scalar and a view."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.shared = nn.Linear(6, 6)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x, scale: float = 0.5):
        self.steps.add_(1)
        for block in self.blocks:
            x = self.shared(block(x))
        x = self.shared(x)
        y = x.to(torch.float64).sum(-1) * scale
        return x.reshape(x.shape[0], -1).relu(), y


def _stack_case():
    return Stack(), (torch.randn(3, 4, 6),), {"scale": 0.25}


# The custom models' goldens name their source lines in ../shared/zoo/zoo.py: they need it (the
# library models' programs are the same built from tests/small_models.py).
_NAMES_ZOO_SOURCE = ("custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only")
_NEEDS_SHARED_ZOO = pytest.mark.skipif(not HAVE_SHARED_ZOO, reason="its golden names lines of ../shared/zoo/zoo.py, "
                                                                   "absent beside this clone")


def _zoo_case(name, dynamic):
    def make():
        built = build_zoo(name)
        return built.model, built.args, built.kwargs, (built.dynamic_shapes if dynamic else None)
    return make


CASES = {
    "stack_static": lambda: (*_stack_case(), None),
    "stack_dynamic": lambda: (*_stack_case(), ({0: Dim("b", min=2, max=32), 1: Dim("s")}, None)),
    **{f"{name}_{kind}": _zoo_case(name, kind == "dynamic")
       for name in ("custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only",
                    "tv_squeezenet1_0", "tv_resnet18", "hf_gpt2")
       for kind in ("static", "dynamic")},
}


def _library_roots(names=("torch", "torchvision", "transformers", "timm")) -> list[Path]:
    """Where the libraries a program's stack traces name are imported from, all printed ``<site>``:
    the environment's site-packages and each library's own import root, which differs when it was
    installed elsewhere on the path (``pip install --target`` on the GPU machine, a user site)."""
    from importlib.util import find_spec  # here, not at the top: the goldens name this file's lines above
    roots = {SITE}
    for name in names:
        spec = find_spec(name)
        if spec is not None and spec.origin:
            roots.add(Path(spec.origin).resolve().parents[1])
    return sorted(roots, key=lambda root: len(str(root)), reverse=True)


LIBRARY_ROOTS = _library_roots()


def _normalized(text: str) -> str:
    for path, tag in (*((root, "<site>") for root in LIBRARY_ROOTS), (PREFIX, "<prefix>"), (ROOT, "<repo>"),
                      (ROOT.parent / "shared", "<shared>")):
        text = text.replace(str(path), tag)
    return text


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or str(fn)


def _metadata_lines(ep) -> list[str]:
    lines = []
    for gm_name, gm in ep.graph_module.named_modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        lines.append(f"== graph {gm_name or '<root>'}")
        for node in gm.graph.nodes:
            meta = node.meta
            lines.append(f"{node.name}: {node.op} {node.target}")
            for key, (path, kind) in (meta.get("nn_module_stack") or {}).items():
                lines.append(f"  module {key} {path} {_name(kind)}")
            for name, fn in meta.get("source_fn_stack") or ():
                lines.append(f"  source_fn {name} {_name(fn)}")
            trace = meta.get("stack_trace")
            if trace:
                lines.extend("  | " + line for line in trace.rstrip().splitlines())
    return lines


def _render(ep) -> str:
    return _normalized(str(ep) + "\n" + "\n".join(_metadata_lines(ep)) + "\n")


def _params() -> list:
    return [pytest.param(name, marks=_NEEDS_SHARED_ZOO if name.startswith(_NAMES_ZOO_SOURCE) else ())
            for name in sorted(CASES)]


@pytest.mark.parametrize("name", _params())
def test_program_and_metadata_match_golden(name):
    torch.manual_seed(0)
    model, args, kwargs, dynamic_shapes = CASES[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    for sub in ep.graph_module.modules():  # passes that skip a recompile must leave the code current
        if isinstance(sub, torch.fx.GraphModule):
            assert sub.code == sub.graph.python_code("self").src, f"stale generated code in {name}"
    text = _render(ep)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("GRAPHCAP_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), (f"no golden for torch {TORCH_LINE} (each supported torch line has its own, printed "
                           f"programs differ a little between releases): make it with GRAPHCAP_UPDATE_GOLDEN=1")
    assert text == path.read_text(), f"exported program or its metadata changed; see {path}"


def test_metadata_is_present_on_operator_nodes():
    """Every operator node of a plain model carries the three metadata fields."""
    model, args, kwargs = _stack_case()
    ep = graphcap.export(model, args, kwargs)
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert ops
    for node in ops:
        assert node.meta.get("stack_trace"), node
        assert node.meta.get("nn_module_stack"), node
        assert node.meta.get("source_fn_stack") or node.target is torch.ops.aten.add_.Tensor, node


def test_a_library_imported_from_outside_site_packages_prints_as_site(tmp_path, monkeypatch):
    """A library installed with ``pip install --target`` (as on the GPU machine) is named in stack
    traces from its own directory; the goldens must read the same as from site-packages."""
    package = tmp_path / "graphcap_probe_lib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    roots = _library_roots(("graphcap_probe_lib", "torch"))
    assert tmp_path.resolve() in roots and SITE in roots
    line = f'File "{tmp_path.resolve()}/graphcap_probe_lib/__init__.py", line 1'
    text = line
    for root in roots:
        text = text.replace(str(root), "<site>")
    assert text == 'File "<site>/graphcap_probe_lib/__init__.py", line 1'
