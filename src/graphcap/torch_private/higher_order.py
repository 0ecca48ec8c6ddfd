"""torch's higher-order operators (``torch._higher_order_ops``).

The pre-dispatch tracer records ``with torch.no_grad():`` and
``with torch.autocast(...)`` blocks as calls of the region wrappers
(``torch._higher_order_ops.wrap``) around a subgraph; graphcap writes and
recognises them in the graphs it post-processes. Its control-flow capture runs
a branch given as a GraphModule the way torch's own control-flow tracing does.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

RELIES_ON = {
    "torch._higher_order_ops.wrap.wrap_with_set_grad_enabled": None,
    "torch._higher_order_ops.wrap.wrap_with_autocast": None,
    "torch._higher_order_ops.utils._maybe_run_with_interpreter": ("fn",),
}


def region_wrappers() -> tuple[Any, Any]:
    """``(wrap_with_set_grad_enabled, wrap_with_autocast)``: the operators a grad / autocast region is recorded as.

    Relies on both names in ``torch._higher_order_ops.wrap``.
    """
    from torch._higher_order_ops.wrap import wrap_with_autocast, wrap_with_set_grad_enabled
    return wrap_with_set_grad_enabled, wrap_with_autocast


def run_graph_preserving_meta(fn: Callable) -> Callable:
    """``fn``, or for a GraphModule while torch preserves node metadata, a function running it
    node by node (so nodes recorded from it keep the original nodes' source lines).

    Relies on ``torch._higher_order_ops.utils._maybe_run_with_interpreter(fn)``, the helper torch's
    own control-flow tracing uses for the same purpose."""
    from torch._higher_order_ops.utils import _maybe_run_with_interpreter
    return _maybe_run_with_interpreter(fn)


# the first torch release whose fake ``map`` keeps a symbolic leading dim (it traces the body on
# one slice and expands the outputs); torch 2.10 runs the body once per slice, which fixes the
# dim to the example's size (torch.export on 2.10 specializes it the same way)
MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE = "2.11"


def map_keeps_symbolic_leading_dim() -> bool:
    """Whether this torch's ``map`` operator can be traced over a mapped dim of symbolic size."""
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= tuple(int(p) for p in MAP_OVER_SYMBOLIC_LEADING_DIM_SINCE.split("."))
