"""The public entry points. Thin: each checks its arguments and delegates."""
from __future__ import annotations

import threading
from typing import Any, Optional

import torch

from .program import ExportedProgram

TRACING_LOCK = threading.RLock()
"""Held by every export and ``run_decompositions`` while it traces (one at a time per process).

Tracing relies on state torch keeps per process, not per thread: the
pre-dispatch mode stack and the current ``make_fx`` tracer are module globals
of torch, and the trace switches process-wide flags (``torch.compiler``'s
exporting flag, the cuDNN/MKL-DNN/NNPACK switches, fx and shape-engine config,
the builtins of :mod:`graphcap.trace.python_overrides`) for its duration. Two
traces at once would push and pop each other's modes. Everything else (checking
arguments, ``module()`` and running it, save, load) runs concurrently. Re-entrant:
a forward that exports something itself does not deadlock.
"""


def export(
    mod: Any,
    args: tuple,
    kwargs: Optional[dict[str, Any]] = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    preserve_module_call_signature: tuple[str, ...] = (),
    prefer_deferred_runtime_asserts_over_guards: bool = False,
) -> ExportedProgram:
    """Capture ``mod`` called on ``args``/``kwargs`` into an ExportedProgram.

    The same signature as torch.export's ``export``. ``mod`` may be an
    ``nn.Module``, a function or a bound method. The user's Python runs as it
    is on fake tensors (non-strict capture) and every ATen operator it reaches
    is recorded at the training-IR level.

    ``prefer_deferred_runtime_asserts_over_guards=True`` keeps the program
    general where a shape guard would otherwise narrow or contradict a
    declared dynamic dim: the condition becomes a runtime assert in the graph
    (checked by ``module()`` before computing) instead of a constraint
    violation.
    """
    from .torch_private.dispatch import disable_current_modes
    if strict:
        from .capture.strict import export_strict
        with TRACING_LOCK, disable_current_modes():
            return export_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                 preserve_module_call_signature=tuple(preserve_module_call_signature),
                                 prefer_deferred_asserts=bool(prefer_deferred_runtime_asserts_over_guards))
    from .capture.non_strict import export_non_strict
    with TRACING_LOCK, disable_current_modes():
        return export_non_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                 preserve_module_call_signature=tuple(preserve_module_call_signature),
                                 prefer_deferred_asserts=bool(prefer_deferred_runtime_asserts_over_guards))


def save(ep: ExportedProgram, f: Any, *, extra_files: Optional[dict[str, Any]] = None) -> None:
    """Write ``ep`` to ``f`` (a path or binary file) in graphcap's pickle-free .pt2 format."""
    from .serialize import save as _save
    _save(ep, f, extra_files=extra_files)


def load(f: Any, *, extra_files: Optional[dict[str, Any]] = None, mmap: bool = False,
         weights: bool = True) -> ExportedProgram:
    """Read a program saved by :func:`save`; never unpickles or imports anything.

    ``extra_files`` (name → anything) is filled in place with the saved extra
    files; ``mmap=True`` leaves the weights in the file until used;
    ``weights=False`` loads the structure only (printable, not runnable).
    """
    from .serialize import load as _load
    return _load(f, extra_files=extra_files, mmap=mmap, weights=weights)
