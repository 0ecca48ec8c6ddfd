"""torch's higher-order operators (``torch._higher_order_ops``).

The pre-dispatch tracer records ``with torch.no_grad():`` and
``with torch.autocast(...)`` blocks as calls of the region wrappers
(``torch._higher_order_ops.wrap``) around a subgraph; graphcap writes and
recognises them in the graphs it post-processes. Its control-flow capture runs
a branch given as a GraphModule the way torch's own control-flow tracing does.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator

import torch

from .thread_scoped import ThreadScopedPatch

RELIES_ON = {
    "torch._higher_order_ops.invoke_subgraph.invoke_subgraph_placeholder": ("func",),
    "torch._higher_order_ops.wrap.wrap_with_set_grad_enabled": None,
    "torch._higher_order_ops.wrap.wrap_with_autocast": None,
    "torch._higher_order_ops.wrap.tag_activation_checkpoint": None,
    "torch._functorch.autograd_function.autograd_function_apply": None,
    "torch._higher_order_ops.utils._maybe_run_with_interpreter": ("fn",),
}


def region_wrappers() -> tuple[Any, Any]:
    """``(wrap_with_set_grad_enabled, wrap_with_autocast)``: the operators a grad / autocast region is recorded as.

    Relies on both names in ``torch._higher_order_ops.wrap``.
    """
    from torch._higher_order_ops.wrap import wrap_with_autocast, wrap_with_set_grad_enabled
    return wrap_with_set_grad_enabled, wrap_with_autocast


def activation_checkpoint_operator() -> Any:
    """The operator dynamo writes for a ``torch.utils.checkpoint.checkpoint(fn, ...)`` call: its first
    argument is ``fn`` traced to a GraphModule, the rest are that graph's inputs.

    Relies on ``torch._higher_order_ops.wrap.tag_activation_checkpoint``."""
    from torch._higher_order_ops.wrap import tag_activation_checkpoint
    return tag_activation_checkpoint


def autograd_function_operator() -> Any:
    """The operator dynamo writes for a user's ``torch.autograd.Function.apply``:
    ``autograd_function_apply(fwd, bwd, *inputs, **flags)``, where ``fwd`` is the Function's
    forward traced to a GraphModule returning ``(outputs, saved_for_backward)``.

    Relies on ``torch._functorch.autograd_function.autograd_function_apply``."""
    from torch._functorch.autograd_function import autograd_function_apply
    return autograd_function_apply


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


# --- torch.compiler.nested_compile_region while graphcap records ---------------------------------

def _placeholder_module() -> Any:
    import torch._higher_order_ops.invoke_subgraph  # noqa: F401  (the module, not the operator of that name)
    return sys.modules["torch._higher_order_ops.invoke_subgraph"]


def _inlined_region(func: Callable, *args: Any, **kwargs: Any) -> Any:
    if _COMPILE_REGIONS.in_scope():
        return func(*args, **kwargs)
    return _COMPILE_REGIONS.saved(func, *args, **kwargs)


def _install_inlined_region() -> Any:
    module = _placeholder_module()
    saved = module.invoke_subgraph_placeholder
    module.invoke_subgraph_placeholder = _inlined_region
    return saved


def _restore_region(saved: Any) -> None:
    _placeholder_module().invoke_subgraph_placeholder = saved


_COMPILE_REGIONS = ThreadScopedPatch(_install_inlined_region, _restore_region)


@contextlib.contextmanager
def compile_regions_inlined() -> Iterator[None]:
    """While a recording runs on this thread, a function marked
    ``torch.compiler.nested_compile_region`` runs as the plain function it is in eager, and its
    operators are recorded in the program (torch.export's program inlines the region too).

    torch's stand-in for such a call (``invoke_subgraph_placeholder``) sees an export running and
    hands the call to ``torch.compile``, which skips the frame under graphcap's recording mode (not
    one of torch's own) and runs it eagerly, calling the stand-in again: the export failed with a
    RecursionError. Other threads keep torch's stand-in.

    Relies on ``torch._higher_order_ops.invoke_subgraph.invoke_subgraph_placeholder(func, *args,
    **kwargs)``, looked up by the marked function at each call."""
    with _COMPILE_REGIONS.active():
        yield
