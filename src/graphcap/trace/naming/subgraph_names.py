"""Name control-flow subgraph placeholders after the operands bound to them, and regenerate subgraph code.

Subgraph placeholders are anonymous (``arg0_1``) while recording; after
lifting they are named after the operands passed in
(:func:`name_subgraph_inputs`), which then generates each subgraph's code once.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..control_flow.hops import subgraphs
from .owed_names import apply_owed_names


def recompile_subgraphs(gm: torch.fx.GraphModule) -> None:
    """Regenerate the code of every subgraph once, after all edits.

    The passes here edit graphs in place and leave code generation to the end:
    it is the costly part, and the top-level module gets its code when lifting
    builds the final GraphModule.
    """
    for sub in gm.modules():
        if sub is not gm and isinstance(sub, torch.fx.GraphModule):
            sub.recompile()


def name_subgraph_inputs(gm: torch.fx.GraphModule) -> None:
    """Name each subgraph placeholder after the operand bound to it, recursively
    (other subgraph nodes move aside, as torch.export names them)."""
    _name_inputs(gm)
    recompile_subgraphs(gm)


def _name_inputs(gm: torch.fx.GraphModule) -> None:
    for _, sub, operands in list(subgraphs(gm)):
        _name_from_operands(sub, operands)
        _name_inputs(sub)


def _name_from_operands(sub: torch.fx.GraphModule, operands: list[Any]) -> None:
    """Placeholders take the names of the enclosing values bound to them."""
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    apply_owed_names(sub.graph, [(ph, value.name) for ph, value in zip(placeholders, operands)
                                 if isinstance(value, torch.fx.Node)])
