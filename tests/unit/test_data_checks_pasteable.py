"""Every data-dependent fix graphcap prints is code the user pastes at the line it names (issue 24, defect 5).

Each model is written to a file, exported (the error) and draft-exported (the
report); the fix is pasted into the file at the line named, and the patched
model must then export and keep the meaning of the check (data on the other
side is refused). No fix may name an internal symbol (``u0``).
"""
from __future__ import annotations

import importlib.util
import linecache
import re
import textwrap
from pathlib import Path

import pytest
import torch

import graphcap

MODELS = {
    "tensor_as_condition": ("""
        class M(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x + 1
                return x - 1
        """, (torch.ones(3),), (-torch.ones(3),)),
    "item_on_the_line": ("""
        class M(torch.nn.Module):
            def forward(self, y):
                if y.item() > 2:
                    return y * 2
                return y
        """, (torch.tensor(5),), (torch.tensor(1),)),
    "nonzero_size_on_the_line": ("""
        class M(torch.nn.Module):
            def forward(self, y):
                if y.nonzero().shape[0] > 1:
                    return y * 2
                return y
        """, (torch.tensor([1, 0, 1]),), (torch.tensor([0, 0, 1]),)),
    "named_local": ("""
        class M(torch.nn.Module):
            def forward(self, y):
                n = y.item()
                if n > 2:
                    return y * 2
                return y
        """, (torch.tensor(5),), (torch.tensor(1),)),
}


def _load(path: Path):
    linecache.checkcache(str(path))
    spec = importlib.util.spec_from_file_location(f"pasted_{path.stem}_{abs(hash(path.read_text()))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.M()


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return path


def _fix_lines(fix: str, line: str) -> list[str]:
    """The code of a fix, as lines to put at the named line (a rewrite, or a check before it)."""
    if "replace this line with\n" in fix:
        block = fix.split("replace this line with\n", 1)[1].splitlines()
        code = [ln for ln in block if ln.strip() and not ln.lstrip().startswith(("(", "#"))]
        width = min(len(ln) - len(ln.lstrip()) for ln in code)
        indent = line[:len(line) - len(line.lstrip())]
        return [indent + ln[width:] for ln in code]
    check = re.search(r"torch\._check\((?:[^()]|\([^()]*\))*\)", fix).group(0)
    indent = line[:len(line) - len(line.lstrip())]
    return [indent + check, line]


def _paste(path: Path, lineno: int, fix: str) -> Path:
    lines = path.read_text().splitlines()
    new = lines[:lineno - 1] + _fix_lines(fix, lines[lineno - 1]) + lines[lineno:]
    patched = path.with_name(path.stem + "_fixed.py")
    patched.write_text("\n".join(new) + "\n")
    return patched


@pytest.mark.parametrize("case", sorted(MODELS))
def test_export_error_fix_pastes_and_exports(tmp_path: Path, case: str):
    body, example, other = MODELS[case]
    path = _write(tmp_path, case, body)
    with pytest.raises(graphcap.errors.DataDependentError) as info:
        graphcap.export(_load(path), example)
    err = info.value
    assert not re.search(r"\bu\d+\b", err.fix), err.fix
    lineno = int(re.search(r"line (\d+)", err.where).group(1))
    ep = graphcap.export(_load(_paste(path, lineno, err.fix)), example)
    torch.testing.assert_close(ep.module()(*example), _load(path)(*example))
    with pytest.raises(RuntimeError):
        ep.module()(*other)


@pytest.mark.parametrize("case", sorted(MODELS))
def test_draft_report_fix_pastes_and_exports(tmp_path: Path, case: str):
    body, example, _ = MODELS[case]
    path = _write(tmp_path, case, body)
    ep = graphcap.draft_export(_load(path), example)
    problems = [p for p in ep.report.problems if "data" in p.kind.lower() or "Data" in str(p)]
    assert problems, str(ep.report)
    problem = problems[0]
    assert not re.search(r"\bu\d+\b", problem.fix + problem.details["check"]), problem.fix
    fixed = graphcap.export(_load(_paste(path, problem.where.lineno, problem.fix)), example)
    torch.testing.assert_close(fixed.module()(*example), _load(path)(*example))


def test_elif_gets_no_rewrite_that_would_not_parse(tmp_path: Path):
    path = _write(tmp_path, "elif_case", """
        class M(torch.nn.Module):
            def forward(self, x):
                if x.shape[0] > 10:
                    return x
                elif x.sum() > 0:
                    return x + 1
                return x - 1
        """)
    with pytest.raises(graphcap.errors.DataDependentError) as info:
        graphcap.export(_load(path), (torch.ones(3),))
    fix = info.value.fix
    assert "replace this line" not in fix and not re.search(r"\bu\d+\b", fix), fix


def test_number_read_from_data_used_as_a_number_says_keep_it_a_tensor():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.arange(4.0))

        def forward(self, x):
            return x + float(self.table.max())

    with pytest.raises(graphcap.errors.DataDependentError) as info:
        graphcap.export(M(), (torch.randn(3),))
    assert "Keep the value a tensor" in info.value.fix
    assert not re.search(r"\bz?u[f]?\d+\b", info.value.fix), info.value.fix
