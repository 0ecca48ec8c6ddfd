"""torch's region higher-order operators (``torch._higher_order_ops.wrap``).

The pre-dispatch tracer records ``with torch.no_grad():`` and
``with torch.autocast(...)`` blocks as calls of these wrappers around a
subgraph; graphcap recognises them in the graphs it post-processes.
"""
from __future__ import annotations

from typing import Any

RELIES_ON = {
    "torch._higher_order_ops.wrap.wrap_with_set_grad_enabled": None,
    "torch._higher_order_ops.wrap.wrap_with_autocast": None,
}


def region_wrappers() -> tuple[Any, Any]:
    """``(wrap_with_set_grad_enabled, wrap_with_autocast)``: the operators a grad / autocast region is recorded as.

    Relies on both names in ``torch._higher_order_ops.wrap``.
    """
    from torch._higher_order_ops.wrap import wrap_with_autocast, wrap_with_set_grad_enabled
    return wrap_with_set_grad_enabled, wrap_with_autocast
