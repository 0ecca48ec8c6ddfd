"""One export run: take the tracing lock and hand the call to the strict or non-strict front end.

``graphcap.export`` is this plus its documentation; ``draft_export`` runs it
once per attempt. It lives in the capture package, not in :mod:`graphcap.api`,
so that a capture mode built on export (the draft) calls down to it instead of
up into the public module that imports the draft.
"""
from __future__ import annotations

from typing import Any, Optional

from ..program import ExportedProgram
from ..torch_logs import quiet_torch_logs
from ..torch_private.dispatch import disable_current_modes
from ..tracing_lock import TRACING_LOCK


def run_front_end(mod: Any, args: Optional[tuple[Any, ...]], kwargs: Optional[dict[str, Any]] = None, *,
                dynamic_shapes: Any = None, strict: bool = False, preserve_module_call_signature: tuple[str, ...] = (),
                prefer_deferred_runtime_asserts_over_guards: bool = False) -> ExportedProgram:
    """Capture ``mod(*args, **kwargs)`` with the front end ``strict`` names; the arguments are
    those of ``graphcap.export``. Any dispatch mode active around the call (a caller's fake
    mode, say) is left for the duration: the trace makes its own."""
    preserved = tuple(preserve_module_call_signature)
    prefer_deferred = bool(prefer_deferred_runtime_asserts_over_guards)
    if strict:
        from .strict import export_strict
        with TRACING_LOCK, quiet_torch_logs(), disable_current_modes():
            return export_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                 preserve_module_call_signature=preserved, prefer_deferred_asserts=prefer_deferred)
    from .non_strict import export_non_strict
    with TRACING_LOCK, quiet_torch_logs(), disable_current_modes():
        return export_non_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                 preserve_module_call_signature=preserved, prefer_deferred_asserts=prefer_deferred)
