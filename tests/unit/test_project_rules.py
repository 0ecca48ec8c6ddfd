"""Promises of the project that the source itself can show."""
from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "graphcap"

# What graphcap implements and therefore must not call (docs/architecture.md, "What graphcap builds"):
# torch.export's entry points and helpers, torch._export, export's AOT wrapper.
FORBIDDEN_MODULES = ("torch.export", "torch._export", "torch._functorch.aot_autograd")
FORBIDDEN_NAMES = {"aot_export_module", "aot_export_joint_simple"}
INTEROP = {"interop.py"}  # the one module allowed to build/read torch's ExportedProgram
# Plain data types graphcap's own classes derive from, so that torch's utilities
# (unflatten, passes) reading a graphcap program recognise its signature arguments.
DATA_TYPES = {"graph_arguments.py": "torch.export.graph_signature",  # its data types, subclassed
              # the class graphcap's ExportedProgram derives from, so consumers take it as is
              # (DESIGN.md, "Type compatibility with the consumers"); its constructor is not run
              "program.py": "torch.export.exported_program",
              # torch's verifier classes as that module names them, by dialect, for torch's code
              # that rebuilds a program (nothing of torch._export is imported)
              "export_program.py": "torch.export.exported_program",
              # torch's signature and module-call dataclasses, subclassed so that a user's
              # isinstance(ep.graph_signature, torch.export.ExportGraphSignature) holds
              "signature.py": ("torch.export.graph_signature", "torch.export.exported_program")}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _hits(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    hits = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node)]
        elif isinstance(node, ast.Name):
            names = [node.id]
        for name in names:
            allowed = DATA_TYPES.get(path.name, ())
            allowed = (allowed,) if isinstance(allowed, str) else allowed
            if any(name == a or name.startswith(a + ".") for a in allowed):
                continue
            if name.startswith(FORBIDDEN_MODULES) or name.split(".")[-1] in FORBIDDEN_NAMES:
                hits.append(f"{path.relative_to(SRC)}:{node.lineno}: {name}")
    return hits


def test_src_does_not_call_the_system_it_implements():
    hits = [h for p in SRC.rglob("*.py") if p.name not in INTEROP for h in _hits(p)]
    assert not hits, "src/graphcap reaches into torch.export:\n" + "\n".join(sorted(set(hits)))


def test_no_pickle_in_src():
    pattern = re.compile(r"^\s*(import pickle|from pickle)|pickle\.loads?\(|torch\.load\(|weights_only\s*=\s*False")
    hits = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_src_text_does_not_send_users_to_the_pipeline_it_implements():
    """Messages and docstrings say "torch's save", not ``torch.export.save``: graphcap is the
    export pipeline a user switched to, and spelling torch's entry points in its own text reads
    as a call of them. interop.py, whose job is handing programs to torch, may name them."""
    pattern = re.compile(r"torch\.export\.(save|load|export|unflatten|draft_export|_trace)\b")
    hits = [f"{p.relative_to(SRC)}:{i}: {line.strip()}" for p in SRC.rglob("*.py") if p.name not in INTEROP
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)
