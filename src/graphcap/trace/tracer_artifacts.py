"""Calls the tracer adds on its own that do nothing when their result is unused.

torch's pre-dispatch tracer records a ``detach`` of tensors it wraps (vmap's
batched tensors, the inner tensors of subclasses), each read of a subclass's
inner tensor (see :mod:`.subclass_access`) and eager profiling marks. Unused,
they are noise in the program; the user's own operators stay, used or not.
"""
from __future__ import annotations

import torch
import torch.fx

# Calls the tracer itself adds that do nothing when their result is unused: ``detach`` of
# tensors it wraps (vmap's batched tensors, subclass inner tensors), reads of subclass inner
# tensors (see .subclass_access) and eager profiling marks.
_TRACING_ARTIFACTS = {torch.ops.aten.detach.default}
if hasattr(torch.ops, "export") and hasattr(torch.ops.export, "access_subclass_inner_tensor"):
    _TRACING_ARTIFACTS.add(torch.ops.export.access_subclass_inner_tensor.default)
for _name in ("_record_function_enter", "_record_function_enter_new", "_record_function_exit"):
    _packet = getattr(torch.ops.profiler, _name, None)
    if _packet is not None:
        _TRACING_ARTIFACTS.update(getattr(_packet, o) for o in _packet.overloads())


def drop_dead(gm: torch.fx.GraphModule) -> None:
    """Erase unused calls in ``_TRACING_ARTIFACTS`` (user operators stay, used or not)."""
    erased = False
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and node.target in _TRACING_ARTIFACTS and not node.users:
            gm.graph.erase_node(node)
            erased = True
    if erased:
        gm.recompile()
