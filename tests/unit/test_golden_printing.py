"""The printed form of small programs, compared with checked-in golden files.

Regenerate after an intended change with GRAPHCAP_UPDATE_GOLDEN=1 and say in
the commit why the printed form changed.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import graphcap

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "printed"
ROOT = Path(__file__).resolve().parents[2]
TORCH_DIR = Path(torch.__file__).resolve().parent


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)
        self.table = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x, *, shift: int = 1):
        self.count.add_(1)
        x.mul_(2)
        return {"y": x * self.table + shift + self.scratch, "n": self.count}


CASES = {
    "mlp": lambda: (MLP(), (torch.randn(2, 4),), {}),
    "conv_bn_eval": lambda: (ConvBN().eval(), (torch.randn(1, 3, 5, 5),), {}),
    "conv_bn_train": lambda: (ConvBN().train(), (torch.randn(2, 3, 5, 5),), {}),
    "stateful": lambda: (Stateful(), (torch.randn(3),), {"shift": 2}),
}


def _normalized(text: str) -> str:
    return text.replace(str(TORCH_DIR), "<torch>").replace(str(ROOT), "<repo>")


def _without_torch_lines(text: str) -> str:
    """Line numbers inside torch's own files (``<torch>/nn/modules/conv.py:565``) move between torch
    releases (2.10 through 2.15 are supported); the goldens keep them as written on the line that
    made them, and the comparison leaves them out: they say nothing about graphcap. So does the
    indentation of a blank line in fx's generated code (torch 2.10 indents it to the statements')."""
    import re  # (here, not at the top: the goldens quote this file's line numbers)
    text = re.sub(r"(<torch>/[^\s:]+\.py):\d+", r"\1:<line>", text)
    return re.sub(r"[ \t]+$", "", text, flags=re.M)


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_program_matches_golden(name):
    torch.manual_seed(0)
    model, args, kwargs = CASES[name]()
    text = _normalized(str(graphcap.export(model, args, kwargs)))
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("GRAPHCAP_UPDATE_GOLDEN") or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert _without_torch_lines(text) == _without_torch_lines(path.read_text()), f"printed program changed; see {path}"
