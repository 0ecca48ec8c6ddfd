"""Progress of long exports: modules entered of modules total, on a terminal only, off by GRAPHCAP_PROGRESS=0."""
from __future__ import annotations

import io
import re

import pytest
import torch
from rich.console import Console

import graphcap
from graphcap.capture import progress


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


@pytest.mark.parametrize("setting, tty, shown", [
    ("0", True, False), ("off", True, False), ("1", False, True), ("", True, True), ("", False, False)])
def test_shown_on_a_terminal_unless_switched(monkeypatch, setting, tty, shown):
    monkeypatch.setenv(progress.ENV_VAR, setting)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: tty, raising=False)
    assert progress.wanted() is shown


@pytest.fixture
def drawn(monkeypatch):
    """Exports draw at once, into a buffer; the bars made are collected."""
    out = io.StringIO()
    bars = []

    def start(modules, label):
        bar = progress.ModuleProgress(modules, label, delay=0.0,
                                      console=Console(file=out, force_terminal=True, width=100))
        bars.append(bar)
        return bar
    monkeypatch.setattr(progress, "start", start)
    return out, bars


def test_bar_counts_modules_entered_of_total(drawn):
    out, bars = drawn
    model = Stack()
    graphcap.export(model, (torch.randn(2, 4),))
    (bar,) = bars
    assert (bar.entered, bar.total) == (4, 5)  # root and three blocks; the unused one never runs (the list: no forward)
    text = out.getvalue()
    assert "graphcap.export" in text and "Stack" in text and re.search(r"[1-4]/5", text) and "modules" in text


def test_hook_is_gone_after_export_and_program_unchanged(drawn, monkeypatch):
    out, bars = drawn
    model = Stack()
    x = torch.randn(2, 4)
    with_bar = graphcap.export(model, (x,))
    entered = bars[0].entered
    model(x)  # eager calls after the export are not counted
    assert bars[0].entered == entered
    monkeypatch.setattr(progress, "start", lambda modules, label: None)
    without_bar = graphcap.export(model, (x,))
    assert str(with_bar) == str(without_bar)


def test_hook_is_gone_after_a_failed_export(drawn):
    out, bars = drawn

    class Fails(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).view(-1, 7)

    model = Fails()
    with pytest.raises(graphcap.TraceError):
        graphcap.export(model, (torch.randn(2, 4),))
    entered = bars[0].entered
    model.lin(torch.randn(2, 4))
    assert bars[0].entered == entered


def test_off_switch_makes_no_counter(monkeypatch):
    monkeypatch.setenv(progress.ENV_VAR, "0")
    assert progress.start(list(Stack().modules()), "Stack") is None
    monkeypatch.setenv(progress.ENV_VAR, "1")
    assert progress.start([], "fn") is None  # a plain function has no modules to count
