"""Facts about control-flow operator nodes (``cond``, ``map``, ``while_loop``, ``scan``, grad/autocast wraps).

graphcap captures each call of a control-flow operator itself
(:mod:`.hop_capture`): ``make_fx(pre_dispatch=True)`` records it as one node
whose branches and bodies are ``get_attr`` submodules (``true_graph_0``,
``body_graph_0``, ...). This module answers, for such a node, which operator
it is and which values are bound to each subgraph's placeholders (both in
:mod:`graphcap.node_facts`, which the verifier shares), and here which
subgraph modules it runs. The steps that rewrite these nodes live beside it:
:mod:`.subgraph_constants` (hoisting), :mod:`.subgraph_metadata`,
:mod:`graphcap.trace.naming.subgraph_names`, :mod:`.before_lifting` (the
capture step that runs them) and :mod:`.control_flow_errors` (why a branch
could not be captured).
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import torch
import torch.fx

from ...node_facts import subgraph_operands

# operator → (index of the argument that carries extra operands, or None)
EXTRA_OPERANDS_AT = {
    "cond": 3,
    "map_impl": 2,
    "while_loop": 3,
    "scan": 3,
    "wrap_with_set_grad_enabled": None,
    "wrap_with_autocast": None,
}


def subgraph_module(gm: torch.fx.GraphModule, attr: Any) -> Optional[torch.fx.GraphModule]:
    """The subgraph module ``attr`` (a ``get_attr`` node of ``gm``) names, else None."""
    if isinstance(attr, torch.fx.Node) and attr.op == "get_attr":
        value = getattr(gm, attr.target, None)
        if isinstance(value, torch.fx.GraphModule):
            return value
    return None


def subgraphs(gm: torch.fx.GraphModule) -> Iterator[tuple[torch.fx.Node, torch.fx.GraphModule, list[Any]]]:
    """Every (node, subgraph module, operands) of ``gm``'s control-flow calls, not recursive."""
    for node in gm.graph.nodes:
        for attr, operands in subgraph_operands(node):
            sub = subgraph_module(gm, attr)
            if sub is not None:
                yield node, sub, operands
