"""The built-in example: export a small model, print it, run it, compare with eager.

Run with ``python -m graphcap.demo`` (or ``make demo``). Nothing is written to disk.
"""
from __future__ import annotations

import torch
import torch.nn as nn

import graphcap


class TinyClassifier(nn.Module):
    """A conv → batch-norm → pool → linear model with a dict output."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, classes)

    def forward(self, image: torch.Tensor, temperature: float = 1.0):
        feats = self.features(image).flatten(1)
        logits = self.head(feats) / temperature
        return {"logits": logits, "probs": logits.softmax(-1)}


def example():
    """The built-in example as a factory for the command line: ``graphcap verify graphcap.demo:example``."""
    torch.manual_seed(0)
    return TinyClassifier().eval(), (torch.randn(2, 3, 16, 16),), {"temperature": 2.0}


def main() -> int:
    model, (image,), kwargs = example()
    ep = graphcap.export(model, (image,), kwargs)
    print(ep)
    runnable = ep.module()
    fresh = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(fresh, temperature=2.0)
        got = runnable(fresh, temperature=2.0)
    worst = max((expected[k] - got[k]).abs().max().item() for k in expected)
    same = all(torch.allclose(expected[k], got[k], rtol=1e-5, atol=1e-5) for k in expected)
    print(f"module() vs eager on a fresh input: max abs difference {worst:.2e} -> "
          f"{'MATCH' if same else 'MISMATCH'}")
    try:
        runnable(torch.randn(3, 3, 16, 16), temperature=2.0)
    except graphcap.RuntimeInputError as e:
        print("A wrong input is refused before computing:\n  " + str(e).replace("\n", "\n  "))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
