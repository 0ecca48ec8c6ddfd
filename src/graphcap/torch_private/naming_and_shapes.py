"""torch's private names that graphcap's node naming and shape handling read.

One small function per touchpoint, so a torch release that moves one of them
breaks here, under a name that says what graphcap needed it for.
``RELIES_ON`` lists each touchpoint (dotted path -> expected leading
parameter names for callables, ``None`` for attributes).
"""
from __future__ import annotations

RELIES_ON = {
    "torch.fx.graph._custom_builtins": None,
}


def fx_codegen_global_names() -> frozenset[str]:
    """The names torch.fx's code generator binds as globals of every generated forward
    (``torch``, ``fx_pytree``, ``pytree``, ``inf``, ``nan``, ``device``, ``NoneType``).

    A forward parameter with one of these names would shadow it in the generated
    body (``torch.ops.aten...`` would read the parameter), so no placeholder and
    no signature name may take them."""
    from torch.fx import graph as fx_graph
    return frozenset(fx_graph._custom_builtins)
