"""The one hook graphcap puts into torch: the public ``torch.cond`` entry, while it records.

Why a hook at all. ``torch.cond(pred, t, f, operands)`` accepts operands
nested in dicts, lists and tuples. torch's own capture leaves the flattening to
dynamo, which compiles the call; graphcap captures control flow without dynamo
(:mod:`graphcap.trace.control_flow.hop_capture`), and on that path torch's ``cond`` passes
the operands unflattened to the ``cond`` operator, whose ``__call__`` refuses
anything but a flat tuple *before* any mode of graphcap's sees the call. No
public hook lies between the user's ``torch.cond`` call and that refusal
(the call then goes through ``torch.compile``'s eager fallback and the
operator's own ``__call__``), so the only place graphcap can flatten the
operands is the entry the user calls.

What the hook is. While a graphcap recording runs, the ``torch.cond``
attribute (the public, documented entry) names a function of graphcap's that
delegates to torch's ``cond`` unchanged on every other thread, under dynamo,
and for flat operands. The attribute is set when the first recording starts and
restored when the last one ends (a count under a lock, on every path, as
:mod:`graphcap.trace.python_overrides` does for ``max``/``min``).

Limits, said plainly: a ``cond`` bound to another name before the export
(``from torch import cond``, ``functorch.experimental.control_flow.cond``) is
torch's function itself and is not flattened: graphcap refuses nested operands
there with an explanation (``control_flow_errors.explain_failure``). While a recording runs, a
``torch.compile``'d function calling ``torch.cond`` on *another* thread sees a
different ``torch.cond`` object and may be recompiled once.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch

RELIES_ON = {
    # public, but the hook relies on its parameters (it passes them on by position)
    "torch.cond": ("pred", "true_fn", "false_fn", "operands"),
}

_lock = threading.Lock()
_count = 0
_original: Any = None
_hook: Any = None


def swap_public_cond(make_hook: Callable[[Callable], Callable]) -> contextlib.AbstractContextManager:
    """A context in which ``torch.cond`` is ``make_hook(torch's cond)`` (made once per
    process), set on entry of the first holder and restored on exit of the last."""
    return _swapped(make_hook)


@contextlib.contextmanager
def _swapped(make_hook: Callable[[Callable], Callable]) -> Iterator[None]:
    global _count, _original, _hook
    with _lock:
        if _count == 0:
            current = torch.cond
            if _hook is None or current is not _hook:
                _original, _hook = current, make_hook(current)
            torch.cond = _hook
        _count += 1
    try:
        yield
    finally:
        with _lock:
            _count -= 1
            if _count == 0 and torch.cond is _hook:
                torch.cond = _original
