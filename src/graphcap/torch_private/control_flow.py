"""Private torch names graphcap's control-flow capture relies on (see ``graphcap.trace.hop_capture``,
``hops``, ``branch_scope`` and ``regions``).

One function per touchpoint; each docstring says what it relies on. ``RELIES_ON``
lists them for the surface test.
"""
from __future__ import annotations

from typing import Any, Callable

RELIES_ON = {
    "torch._ops.HigherOrderOperator": None,
    "torch._higher_order_ops.utils._maybe_run_with_interpreter": ("fn",),
    "torch.utils._python_dispatch.TorchDispatchMode": None,
    "torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER": None,
    "torch.fx.experimental.proxy_tensor._MakefxTracer#fx_tracer": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#tensor_tracker": None,
    "torch.fx.experimental.proxy_tensor._ProxyTensor#proxy": None,
}


def is_higher_order_operator(obj: Any) -> bool:
    """Whether ``obj`` is a higher-order operator (``torch.ops.higher_order.*``).

    Relies on the operators' common base class ``torch._ops.HigherOrderOperator``."""
    import torch._ops
    return isinstance(obj, torch._ops.HigherOrderOperator)


def run_graph_preserving_meta(fn: Callable) -> Callable:
    """``fn``, or for a GraphModule while torch preserves node metadata, a function running it
    node by node (so nodes recorded from it keep the original nodes' source lines).

    Relies on ``torch._higher_order_ops.utils._maybe_run_with_interpreter(fn)``, the helper torch's
    own control-flow tracing uses for the same purpose."""
    from torch._higher_order_ops.utils import _maybe_run_with_interpreter
    return _maybe_run_with_interpreter(fn)


def dispatch_mode_base() -> type:
    """The base class of user dispatch modes.

    Relies on ``torch.utils._python_dispatch.TorchDispatchMode`` (documented, but only under that
    private module path): a subclass that does not ignore compile internals makes ``torch.compile``
    run eagerly while it is active, and with ``supports_higher_order_operators`` it receives
    higher-order operators at the Python dispatch key."""
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


def current_recording() -> Any:
    """(graph, tensor tracker) of the make_fx recording running now (a branch's while one is
    traced), or None: what a control-flow call's closed-over tensors are read from.

    Relies on ``torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER`` (the running
    ``_MakefxTracer``, set for the top-level trace and for each subgraph trace), its ``fx_tracer``
    and that tracer's ``graph`` and ``tensor_tracker`` (a weak map from each tensor the recording
    made or took as input to its ``_ProxyTensor``)."""
    from torch.fx.experimental import proxy_tensor
    tracer = getattr(proxy_tensor, "_CURRENT_MAKE_FX_TRACER", None)
    fx_tracer = getattr(tracer, "fx_tracer", None)
    tracker = getattr(fx_tracer, "tensor_tracker", None)
    if fx_tracer is None or tracker is None:
        return None
    return fx_tracer.graph, tracker


def recorded_node(tracker: Any, tensor: Any) -> Any:
    """The graph node a recording's tensor tracker holds for ``tensor``, or None.

    Relies on the tracker's values being ``_ProxyTensor`` with a ``proxy`` attribute."""
    try:
        slot = tracker.get(tensor)
    except TypeError:
        return None
    proxy = getattr(slot, "proxy", None)
    return getattr(proxy, "node", None)
