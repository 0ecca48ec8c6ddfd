"""Dead-code elimination that keeps side effects.

A node is removed when nothing uses it and running it changes nothing: an
assertion (``_assert_scalar``, ``_assert_async``, range checks), an operator
whose schema writes to an argument or returns nothing (called for its effect: a custom
operator that logs), a call with a hidden write
(``batch_norm`` in training mode), or a Python callable the graph calls for
its effect (``torch._C._set_grad_enabled``) always stays.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Collection

import torch
import torch.fx

from ..torch_private.dispatch import set_grad_enabled
from ..torch_private.ops import schema_of

if TYPE_CHECKING:
    from ..program import ExportedProgram


aten = torch.ops.aten

_SIDE_EFFECTS = {
    aten._assert_async.default, aten._assert_async.msg, aten._assert_scalar.default,
    aten.sym_constrain_range.default, aten.sym_constrain_range_for_size.default,
    aten._assert_tensor_metadata.default, aten._print.default,
    aten.batch_norm.default, aten.native_batch_norm.default, aten.instance_norm.default,
    aten._batch_norm_impl_index.default,
    set_grad_enabled,
}


def has_side_effect(node: torch.fx.Node) -> bool:
    target = node.target
    if target in _SIDE_EFFECTS:
        return True
    schema = schema_of(target)
    if schema is not None and (schema.is_mutable or not schema.returns):
        return True  # (an operator that returns nothing is called for its effect: a log, a custom op's I/O)
    return node.is_impure()


def eliminate_dead_code(gm: torch.fx.GraphModule, generate_code: bool = True,
                        keep: Collection[str] = ()) -> bool:
    """Remove dead, effect-free nodes from ``gm`` (and its subgraphs) in place; True if any went.

    Each module whose graph changed regenerates its code; with ``generate_code`` False, ``gm``'s own
    is left to the caller, who generates it once its graph is final. Nodes of ``gm``'s own graph
    named in ``keep`` stay (values a module call signature names)."""
    changed = False
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        graph = module.graph
        removed = False
        for node in reversed(list(graph.nodes)):
            if node.op in ("placeholder", "output") or node.users or (module is gm and node.name in keep):
                continue
            if node.op == "get_attr" or (node.op == "call_function" and not has_side_effect(node)):
                graph.erase_node(node)
                removed = True
        if removed and (generate_code or module is not gm):
            module.recompile()
        changed |= removed
    return changed


def dce_pass(ep: ExportedProgram) -> ExportedProgram:
    from ..signature import call_graph_of
    named = {a.name for e in call_graph_of(ep) or [] if e.signature is not None
             for a in [*e.signature.inputs, *e.signature.outputs] if isinstance(getattr(a, "name", None), str)}
    eliminate_dead_code(ep.graph_module, keep=named)  # a size passed to a preserved call stays
    return ep
