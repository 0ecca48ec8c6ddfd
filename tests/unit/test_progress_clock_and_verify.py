"""Progress: the export bar's clock starts with the trace; verify shows a bar (issue 24, defect 8).

Before: the export bar appeared after its delay showing 0:00:00 (its clock
started when it was drawn), and verify ran for many seconds with nothing on
the terminal.
"""
from __future__ import annotations

import io
import re
import time

import torch
from rich.console import Console

import graphcap
from graphcap.capture import progress


class SlowStart(torch.nn.Module):
    """Spends over a second before its first submodule runs (as a big model's embedding setup might)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        time.sleep(1.3)
        return self.b(self.a(x))


def test_export_bar_elapsed_counts_from_the_trace_start(monkeypatch):
    out = io.StringIO()

    def start(modules, label):
        return progress.ModuleProgress(modules, label, delay=1.0,
                                       console=Console(file=out, force_terminal=True, width=120))
    monkeypatch.setattr(progress, "start", start)
    graphcap.export(SlowStart(), (torch.randn(2, 4),))
    text = out.getvalue()
    times = re.findall(r"\d:\d\d:(\d\d)", text)
    assert times, text
    assert int(times[0]) >= 1, text  # drawn 1.3 s into the trace: not 0:00:00


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def test_verify_shows_its_steps(monkeypatch):
    import graphcap.verification as verification
    out = io.StringIO()
    made = []

    def bar(title, total):
        b = progress.StepProgress(title, total, delay=0.0, shown=True,
                                  console=Console(file=out, force_terminal=True, width=160))
        made.append(b)
        return b
    monkeypatch.setattr(verification, "StepProgress", bar)
    model = Small()
    ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: graphcap.Dim("batch", max=16)},))
    result = graphcap.verify(ep, model, samples=2)
    assert result.passed
    text = out.getvalue()
    assert "graphcap.verify" in text and "inputs:" in text and "refusal:" in text, text
    (b,) = made
    assert b.done == len(result.input_sets) + len(result.refusals) + len(result.skipped)


def test_step_progress_waits_for_its_delay_and_follows_the_switch():
    out = io.StringIO()
    quick = progress.StepProgress("t", 3, delay=60.0, shown=True, console=Console(file=out, force_terminal=True))
    for i in range(3):
        quick.step(f"step {i}")
    quick.close()
    hidden = progress.StepProgress("t", 3, delay=0.0, shown=False, console=Console(file=out, force_terminal=True))
    hidden.step("x")
    hidden.close()
    assert out.getvalue() == ""
