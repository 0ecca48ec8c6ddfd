"""torch's log records stay off the terminal during graphcap's calls (issue 24, defect 4).

torch logs a full traceback (``E1125 ... fake_tensor.py ... Traceback``) when a
kernel's shape check fails on fake tensors; graphcap raises its own error for
it. The records of the exporting thread are dropped, other threads' are not,
the filter is gone afterwards, and the user can ask for the records.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap.torch_logs import quiet_torch_logs, show_torch_logs


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class ShapeBug(torch.nn.Module):
    def forward(self, x, y):
        return x @ y


@pytest.fixture
def torch_handler():
    handler = _Collect()
    # torch's registered loggers (fake_tensor's among them) do not propagate: each has its own handler
    logs = [logging.getLogger(n) for n in ("torch", "torch._subclasses.fake_tensor")]
    for log in logs:
        log.addHandler(handler)
    try:
        yield handler
    finally:
        for log in logs:
            log.removeHandler(handler)
        show_torch_logs(None)


def _fake_tensor_records(handler: _Collect) -> list[logging.LogRecord]:
    return [r for r in handler.records if r.name.startswith("torch._subclasses")]


def test_kernel_traceback_is_dropped_and_filter_removed(torch_handler):
    with pytest.raises(graphcap.TraceError, match="same reduction dim"):
        graphcap.export(ShapeBug(), (torch.ones(3, 4), torch.ones(5, 6)))
    assert _fake_tensor_records(torch_handler) == []
    assert all(not f.name.startswith("graphcap") for f in torch_handler.filters)
    for name in ("torch", "torch._subclasses.fake_tensor"):
        assert not any(getattr(f, "name", "").startswith("graphcap") for h in logging.getLogger(name).handlers
                       for f in h.filters)


def test_user_can_ask_for_torch_logs(torch_handler):
    show_torch_logs(True)
    with pytest.raises(graphcap.TraceError):
        graphcap.export(ShapeBug(), (torch.ones(3, 4), torch.ones(5, 6)))
    assert _fake_tensor_records(torch_handler), "torch's record of the failing kernel was dropped"


def test_other_threads_keep_their_torch_logs(torch_handler):
    other = logging.getLogger("torch.graphcap_test_other_thread")

    class LogsFromAnotherThread(torch.nn.Module):
        def forward(self, x):
            t = threading.Thread(target=lambda: other.warning("from another thread"))
            t.start()
            t.join()
            logging.getLogger("torch.graphcap_test_this_thread").warning("from the exporting thread")
            return x + 1

    graphcap.export(LogsFromAnotherThread(), (torch.ones(2),))
    messages = [r.getMessage() for r in torch_handler.records]
    assert "from another thread" in messages
    assert "from the exporting thread" not in messages


def test_nested_quiet_calls_restore_on_the_outermost():
    handler = _Collect()
    log = logging.getLogger("torch.graphcap_test_nested")
    log.addHandler(handler)
    try:
        with quiet_torch_logs():
            with quiet_torch_logs():
                log.warning("inner")
            log.warning("outer")
        log.warning("after")
        assert [r.getMessage() for r in handler.records] == ["after"]
        assert handler.filters == []
    finally:
        log.removeHandler(handler)


def test_no_torch_traceback_on_the_terminal(tmp_path: Path):
    script = tmp_path / "shape_bug.py"
    script.write_text(textwrap.dedent("""
        import torch, graphcap
        class M(torch.nn.Module):
            def forward(self, x, y):
                return x @ y
        try:
            graphcap.export(M(), (torch.ones(3, 4), torch.ones(5, 6)))
        except graphcap.TraceError as e:
            print("graphcap:", str(e).splitlines()[0])
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "GRAPHCAP_TORCH_LOGS")}
    env["PYTHONPATH"] = str(Path(graphcap.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert "graphcap: M raised RuntimeError" in out.stdout
    assert "Traceback" not in out.stderr and "fake_tensor.py" not in out.stderr, out.stderr
