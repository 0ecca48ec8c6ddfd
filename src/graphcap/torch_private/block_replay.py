"""The recorder's per-call bookkeeping that replaying a repeated block must keep in step.

``graphcap.trace.block_reuse`` records a submodule's call once and replays it
for a structurally identical one. A full trace of that second call would have
moved some of the tracer's counters and read some engine state; these
functions read and set them:

- the fx tracer's ``module_stack`` (the live ``nn_module_stack``) and
  ``num_calls`` (calls per module path: the ``@N`` of a call key);
- the proxy tracer's ``torch_fn_metadata`` / ``torch_fn_counts`` (the
  ``torch_fn`` metadata of each node: the torch function the user called and
  how many times it had been called);
- ``proxy_tensor._AttrProxy``: the stand-in the tracer puts for a module
  shared under two names (such calls are never replayed);
- nn.Module's process-wide hook registries (``_global_forward_hooks`` ...): a
  hook anywhere means calls are traced, not replayed (a module's own hooks and
  attributes: ``torch_private.modules``);
- what a ShapeEnv knows (its guards, replacements, ranges, deferred asserts),
  as one comparable value: replay needs the same knowledge before the call, and
  a recorded call must have added none.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental import proxy_tensor

from . import shapes

RELIES_ON = {
    "torch.fx.Tracer#module_stack": None,
    "torch.fx.Tracer#num_calls": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#torch_fn_counts": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#torch_fn_metadata": None,
    "torch.fx.experimental.proxy_tensor._AttrProxy": None,
    "torch.nn.modules.module._global_forward_hooks": None,
    "torch.nn.modules.module._global_forward_pre_hooks": None,
    "torch.nn.modules.module._global_backward_hooks": None,
    "torch.nn.modules.module._global_backward_pre_hooks": None,
    "torch.fx.experimental.proxy_tensor.set_proxy_slot": ("obj", "tracer", "proxy"),
    "torch.fx.experimental.proxy_tensor._ProxyTensor": None,
    "torch.fx.experimental.proxy_tensor.track_tensor": ("tensor", "proxy"),
    "torch._C.DisableTorchFunction": None,
    "torch.Tensor._base": None,
}

SAMPLES = {
    "torch.fx.Tracer": lambda: torch.fx.Tracer(),
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer": lambda: proxy_tensor.PythonKeyTracer(),
}

__all__ = ["module_stack", "module_call_counts", "torch_fn_counts", "torch_fn_metadata", "set_torch_fn_state",
           "is_attr_proxy", "global_module_hooks", "shape_env_knowledge", "track_tensor_as",
           "outside_tracing", "is_view", "track_tensor_with_sizes", "no_torch_function"]


def module_stack(tracer: Any) -> Any:
    """The tracer's live module stack: call key -> (module path, class). Relies on ``Tracer.module_stack``."""
    return tracer.module_stack


def module_call_counts(tracer: Any) -> dict:
    """The tracer's live calls per module path. Relies on ``Tracer.num_calls``."""
    return tracer.num_calls


def torch_fn_counts(tracer: Any) -> dict:
    """The live count of calls per torch function. Relies on ``PythonKeyTracer.torch_fn_counts``."""
    return tracer.torch_fn_counts


def torch_fn_metadata(tracer: Any) -> Any:
    """The torch function called last (what a new node's ``torch_fn`` names)."""
    return tracer.torch_fn_metadata


def set_torch_fn_state(tracer: Any, counts: dict, last: Any) -> None:
    """Set the per-function counts (in place) and the function called last."""
    tracer.torch_fn_counts.clear()
    tracer.torch_fn_counts.update(counts)
    tracer.torch_fn_metadata = last


def is_attr_proxy(module: Any) -> bool:
    """Whether ``module`` is the tracer's stand-in for a module shared under two names."""
    return isinstance(module, proxy_tensor._AttrProxy)


def global_module_hooks() -> bool:
    """Whether any process-wide module hook is registered."""
    from torch.nn.modules import module as nn_module
    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks)


def shape_env_knowledge(env: Any) -> Any:
    """What ``env`` knows about its symbols, as one value that compares equal while nothing was learnt:
    the number of guards, replacements and deferred asserts, the example values' count, and
    every symbol's range (``None`` for no ShapeEnv)."""
    if env is None:
        return None
    asserts = shapes.deferred_asserts(env)
    return (len(shapes.guards(env)), len(shapes.replacements(env)),
            sum(len(v) for v in asserts.values()), len(shapes.example_values(env)),
            tuple(shapes.symbol_ranges(env).items()))


def track_tensor_as(tensor: torch.Tensor, node: torch.fx.Node, tracer: Any) -> None:
    """Have ``tracer`` read ``tensor`` as the value of ``node`` from now on (what an operator's result
    gets). Relies on ``proxy_tensor.set_proxy_slot`` and ``proxy_tensor._ProxyTensor``."""
    proxy_tensor.set_proxy_slot(tensor, tracer, proxy_tensor._ProxyTensor(torch.fx.Proxy(node, tracer), None))


def outside_tracing() -> Any:
    """A context manager within which tensor code runs on no mode (nothing recorded, no fake mode
    entered; a fake tensor's own dispatch still applies). Relies on
    ``dispatch.disable_current_modes`` and ``torch._C.DisableTorchFunction``."""
    import contextlib

    from torch.utils._python_dispatch import _disable_current_modes
    stack = contextlib.ExitStack()
    stack.enter_context(_disable_current_modes())
    stack.enter_context(torch._C.DisableTorchFunction())
    return stack



def is_view(t: torch.Tensor) -> bool:
    """Whether ``t`` is a view of another tensor (``Tensor._base`` is set)."""
    return t._base is not None


def track_tensor_with_sizes(tensor: torch.Tensor, node: torch.fx.Node, tracer: Any) -> None:
    """As an operator's result is tracked: ``tensor`` reads as ``node``, and each of its symbolic sizes
    that has no node yet gets one made on first use. Relies on ``proxy_tensor.track_tensor``."""
    proxy_tensor.track_tensor(tensor, torch.fx.Proxy(node, tracer), constant=None, tracer=tracer)


def no_torch_function() -> Any:
    """A context manager within which tensor methods skip every torch-function mode (reading a fake
    tensor's metadata then costs no Python mode call). Relies on ``torch._C.DisableTorchFunction``."""
    return torch._C.DisableTorchFunction()
