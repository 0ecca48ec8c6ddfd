"""The private torch names :mod:`graphcap.hierarchy` (unflatten) reaches.

Each rebuilt submodule's ``forward`` is Python that fx generates from its
graph (``Graph.python_code``, public). Turning that source into a function is
what ``GraphModule.recompile`` does through fx's private loader, which also
registers the source so tracebacks show the generated lines; graphcap uses
the same loader here rather than compiling code itself.
"""
from __future__ import annotations

from typing import Any, Callable

from torch.fx import graph_module as _fx_graph_module

RELIES_ON = {
    "torch.fx.graph_module._forward_from_src": ("src", "globals"),
}


def forward_from_source(source: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """The ``forward`` function defined by fx-generated ``source`` with ``namespace`` as globals."""
    return _fx_graph_module._forward_from_src(source, namespace)
