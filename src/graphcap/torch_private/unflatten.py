"""The private torch names :mod:`graphcap.hierarchy` (unflatten) reaches.

The rebuilt root module takes the user's own arguments (``forward(self, x,
*, y)``) and returns the eager model's output structure. fx generates such a
forward only through its pytree code generator, which torch keeps private;
graphcap sets it on a graph, and reads its specs back, here.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch.fx import graph as _fx_graph

RELIES_ON = {
    "torch.fx.graph._PyTreeCodeGen": ("pytree_info",),
    "torch.fx.graph._PyTreeInfo": ("orig_args", "in_spec", "out_spec"),
    "torch.fx.Graph#_codegen": None,
}


def set_pytree_codegen(graph: torch.fx.Graph, arg_names: Sequence[str], in_spec: Any, out_spec: Any) -> None:
    """Make ``graph``'s generated forward take ``arg_names`` structured as ``in_spec`` and return
    its outputs structured as ``out_spec``."""
    graph._codegen = _fx_graph._PyTreeCodeGen(_fx_graph._PyTreeInfo(list(arg_names), in_spec, out_spec))


def pytree_codegen_specs(graph: Optional[torch.fx.Graph]) -> tuple[Any, Any]:
    """(in_spec, out_spec) of a graph given a pytree code generator, else (None, None)."""
    info = getattr(getattr(graph, "_codegen", None), "pytree_info", None)
    if info is None:
        return None, None
    return info.in_spec, info.out_spec
