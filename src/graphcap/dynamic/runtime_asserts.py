"""Insert the ShapeEnv's deferred runtime asserts into the graph, grad/autocast regions included.

The deferred asserts (relations kept as asserts, data-dependent values bounded
by ``torch._check``) become ``aten._assert_scalar`` nodes, so the program
refuses inputs and data that break them before computing.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..trace import metadata


def insert_runtime_asserts(gm: torch.fx.GraphModule, env: Any, name: str) -> None:
    """Insert ``env``'s deferred runtime asserts into ``gm`` (and into the grad/autocast region
    submodules where a data-dependent value they check is first computed), then regenerate code."""
    from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts
    before = set(gm.graph.nodes)
    insert_deferred_runtime_asserts(gm, env, f"exported program: {name}", export=True)
    metadata.attribute_added_nodes(gm, before)
    metadata.place_added_nodes_with_their_origin(gm, before)
    gm.recompile()
    _assert_in_regions(gm, env, name)


def _assert_in_regions(gm: torch.fx.GraphModule, env: Any, name: str) -> None:
    """Runtime asserts on data-dependent values first computed inside a grad-mode or
    autocast region (``x.item()`` under ``torch.no_grad()``): the region's submodule
    is where the value exists, so its asserts go there, next to it. Without this the
    top-level pass never sees the value defined and the user's ``torch._check`` on it
    would vanish from the program."""
    from ..torch_private.higher_order import region_wrappers
    wrap_with_set_grad_enabled, wrap_with_autocast = region_wrappers()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in (wrap_with_set_grad_enabled, wrap_with_autocast):
            continue
        sub = next((getattr(gm, a.target) for a in node.args
                    if isinstance(a, torch.fx.Node) and a.op == "get_attr"), None)
        if not isinstance(sub, torch.fx.GraphModule) or not _defines_unbacked(sub, env):
            continue
        insert_runtime_asserts(sub, env, name)  # and in the regions inside it


def _defines_unbacked(gm: torch.fx.GraphModule, env: Any) -> bool:
    """Whether an operator node of ``gm`` produces a value with an unbacked symbol."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        expr = getattr(getattr(val, "node", None), "expr", None)
        if node.op == "call_function" and expr is not None \
                and any(env.is_unbacked_symint(s) for s in expr.free_symbols):
            return True
    return False
