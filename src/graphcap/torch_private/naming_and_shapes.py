"""torch's private names that graphcap's node naming and shape handling read.

One small function per touchpoint, so a torch release that moves one of them
breaks here, under a name that says what graphcap needed it for.
``RELIES_ON`` lists each touchpoint (dotted path -> expected leading
parameter names for callables, ``None`` for attributes).
"""
from __future__ import annotations

from typing import Any

RELIES_ON = {
    "torch.fx.graph._custom_builtins": None,
    "torch._meta_registrations.meta_copy_": ("self", "src"),
}


def fx_codegen_global_names() -> frozenset[str]:
    """The names torch.fx's code generator binds as globals of every generated forward
    (``torch``, ``fx_pytree``, ``pytree``, ``inf``, ``nan``, ``device``, ``NoneType``).

    A forward parameter with one of these names would shadow it in the generated
    body (``torch.ops.aten...`` would read the parameter), so no placeholder and
    no signature name may take them."""
    from torch.fx import graph as fx_graph
    return frozenset(fx_graph._custom_builtins)


def raised_by_copy_overlap_check(frame: Any) -> bool:
    """Whether a guard was raised by ``copy_``'s fake kernel asking if the destination
    overlaps itself (``torch._debug_has_internal_overlap`` in ``meta_copy_``).

    That answer only decides whether the kernel raises "more than one element
    of the written-to tensor refers to a single memory location"; the recorded
    operator and its output are the same either way, and the real ``copy_``
    makes the same check when the program runs. Its size questions (is this
    size 1, are these strides contiguous) are therefore no requirement of the
    program. Matched by the kernel's name and the source line of the call (the overlap function
    itself is declared where graphcap asks it without a guard, ``fake._overlap_asked_without_guards``), so
    a torch release that rewrites it makes this answer ``False`` (the guards
    are then kept: stricter, never unsound)."""
    return (getattr(frame, "name", None) == "meta_copy_"
            and "/torch/" in str(getattr(frame, "filename", "")).replace("\\", "/")
            and "_debug_has_internal_overlap" in (getattr(frame, "line", None) or ""))
