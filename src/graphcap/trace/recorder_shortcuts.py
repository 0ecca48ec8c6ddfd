"""The switch for the recorder's shortcuts: work skipped or done once that gives the same program.

The recorder (:mod:`graphcap.trace.recorder`) runs torch's ``make_fx`` and records each node's
user stack itself. Its shortcuts, each producing exactly the program the long way produces:

* torch's tracer formats the whole Python stack for every placeholder and output node it makes
  and then deletes the result (``PythonKeyTracer.create_node`` keeps no stack trace on those):
  while graphcap records, that formatting is skipped
  (:func:`graphcap.torch_private.fx.dropped_stack_traces_skipped`);
* graphcap's own stack recording finds the frames above the traced function once per
  recording and decides once per code object whether its frames are kept.

They are on unless turned off, for this thread with :func:`recorder_shortcuts` or for the
process with the environment variable ``GRAPHCAP_RECORDER_SHORTCUTS=0`` (tests compare the
programs both ways; see docs/recorder.md).
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

ENV_VAR = "GRAPHCAP_RECORDER_SHORTCUTS"
_setting = threading.local()


def enabled() -> bool:
    """Whether the recorder takes its shortcuts on this thread (on unless turned off)."""
    explicit = getattr(_setting, "enabled", None)
    if explicit is not None:
        return explicit
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def recorder_shortcuts(on: bool) -> Iterator[None]:
    """Within the block, exports on this thread take the recorder's shortcuts (``True``) or
    the long way (``False``); it overrides ``GRAPHCAP_RECORDER_SHORTCUTS``."""
    saved = getattr(_setting, "enabled", None)
    _setting.enabled = bool(on)
    try:
        yield
    finally:
        _setting.enabled = saved
