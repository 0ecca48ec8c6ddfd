"""torch's dispatcher and mode stacks (``torch._C``, ``torch.utils._python_dispatch``, ``torch._dispatch``).

What graphcap needs from below the Python API: the grad-mode setter that traced
programs record as a call, leaving the current dispatch modes for the length of
a public call, the Python dispatcher decompositions run under, the dispatch-key
queries that tell a composite operator from a backend one, and the backend
switches (oneDNN, cuDNN, NNPACK) whose kernel choice would otherwise guard on
sizes.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch._C import DispatchKey

RELIES_ON = {
    "torch._C._set_grad_enabled": (),
    "torch._C.DispatchKey": None,
    "torch._C.DispatchKey.CompositeImplicitAutograd": None,
    "torch._C._AutoDispatchBelowAutograd": None,
    "torch._C._dispatch_has_kernel": (),
    "torch._C._dispatch_has_kernel_for_dispatch_key": (),
    "torch._C._dispatch_get_registrations_for_dispatch_key": (),
    "torch._C._is_torch_function_mode_enabled": (),
    "torch._C._functorch.is_batchedtensor": (),
    "torch._C._get_mkldnn_enabled": (),
    "torch._C._set_mkldnn_enabled": (),
    "torch._C._get_cudnn_enabled": (),
    "torch._C._set_cudnn_enabled": (),
    "torch._C._get_nnpack_enabled": (),
    "torch._C._set_nnpack_enabled": (),
    "torch.utils._python_dispatch._disable_current_modes": (),
    "torch.utils._python_dispatch.TorchDispatchMode": None,
    "torch.utils._python_dispatch.is_traceable_wrapper_subclass": ("t",),
    "torch._dispatch.python.enable_python_dispatcher": None,
}

__all__ = ["DispatchKey", "set_grad_enabled", "auto_dispatch_below_autograd", "has_kernel",
           "has_kernel_for_dispatch_key", "registrations_for_dispatch_key", "torch_function_mode_enabled",
           "is_batched_tensor", "backend_kernel_switches", "backend_kernels_off", "backend_kernels_off_for_a_retrace",
           "disable_current_modes",
           "is_traceable_wrapper_subclass", "enable_python_dispatcher", "dispatch_mode_base"]

# The grad-mode setter itself: traced programs record calls of this very function
# (``torch._C._set_grad_enabled``), so graphcap compares graph targets against it.
set_grad_enabled: Callable[[bool], None] = torch._C._set_grad_enabled


def auto_dispatch_below_autograd() -> Any:
    """A guard object: within ``with``, operators dispatch below the autograd keys.

    Relies on ``torch._C._AutoDispatchBelowAutograd()``.
    """
    return torch._C._AutoDispatchBelowAutograd()


def has_kernel(qualified_name: str) -> bool:
    """Whether the operator ``ns::name[.overload]`` has any kernel registered. Relies on
    ``torch._C._dispatch_has_kernel``."""
    return torch._C._dispatch_has_kernel(qualified_name)


def has_kernel_for_dispatch_key(qualified_name: str, key: DispatchKey) -> bool:
    """Whether the operator has a C++ kernel for ``key``. Relies on
    ``torch._C._dispatch_has_kernel_for_dispatch_key``."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified_name, key)


def registrations_for_dispatch_key(key_name: str) -> list[str]:
    """Qualified names of the operators with a kernel for the key named ``key_name``.

    Relies on ``torch._C._dispatch_get_registrations_for_dispatch_key``.
    """
    return torch._C._dispatch_get_registrations_for_dispatch_key(key_name)


def torch_function_mode_enabled() -> bool:
    """Whether ``__torch_function__`` handling is on (off inside a mode's own handler).

    Relies on ``torch._C._is_torch_function_mode_enabled()``.
    """
    return torch._C._is_torch_function_mode_enabled()


def is_batched_tensor(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a functorch (vmap) batched tensor. Relies on ``torch._C._functorch.is_batchedtensor``."""
    return torch._C._functorch.is_batchedtensor(tensor)


def backend_kernel_switches() -> list[tuple[Callable[[], bool], Callable[[bool], None]]]:
    """(get, set) pairs of the oneDNN, cuDNN and NNPACK enable flags, the raw switches without side effects.

    Relies on ``torch._C._get/_set_{mkldnn,cudnn,nnpack}_enabled``.
    """
    return [(torch._C._get_mkldnn_enabled, torch._C._set_mkldnn_enabled),
            (torch._C._get_cudnn_enabled, torch._C._set_cudnn_enabled),
            (torch._C._get_nnpack_enabled, torch._C._set_nnpack_enabled)]


@contextlib.contextmanager
def backend_kernels_off() -> Iterator[None]:
    """Within the block, the oneDNN, cuDNN and NNPACK backends are switched off.

    A fake convolution picks its backend kernel from the batch size (``batch < 16``) and so
    asks a question of a symbolic batch that would become a guard; the recorded operator is the
    same whichever kernel a backend would pick, so a trace runs with them off."""
    switches = backend_kernel_switches()
    saved = [get() for get, _ in switches]
    try:
        for _, set_ in switches:
            set_(False)
        yield
    finally:
        for (_, set_), value in zip(switches, saved):
            set_(value)


def backend_kernels_off_for_a_retrace() -> Any:
    """:func:`backend_kernels_off` for a decomposition retrace, from torch 2.13 on.

    With oneDNN off an LSTM reaches torch's own decomposition of ``aten.lstm.input``, which
    before 2.13 returns ``h_n`` and ``c_n`` with an extra leading dim (torch.export's
    decompositions give the same wrong shape). On torch 2.10 to 2.12 the retrace keeps the
    backends as they are, and an LSTM stays oneDNN's CPU kernel: eager's values, not core ATen."""
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return backend_kernels_off() if (major, minor) >= (2, 13) else contextlib.nullcontext()


def disable_current_modes() -> Any:
    """A context manager that pops every dispatch mode for its block and pushes them back after.

    A public call (export, load) must not run under the caller's fake or proxy
    mode. Relies on ``torch.utils._python_dispatch._disable_current_modes()``.
    """
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def dispatch_mode_base() -> type:
    """The base class of user dispatch modes.

    Relies on ``torch.utils._python_dispatch.TorchDispatchMode`` (documented, but only under that
    private module path): a subclass that does not ignore compile internals makes ``torch.compile``
    run eagerly while it is active, and with ``supports_higher_order_operators`` it receives
    higher-order operators at the Python dispatch key."""
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


def is_traceable_wrapper_subclass(value: Any) -> bool:
    """Whether ``value`` is a tensor subclass that flattens into inner tensors (``__tensor_flatten__``).

    Relies on ``torch.utils._python_dispatch.is_traceable_wrapper_subclass(t)``.
    """
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass as check
    return check(value)


def enable_python_dispatcher() -> Any:
    """A context manager under which Python kernels (decompositions, ``py_kernels``) take part in dispatch.

    Relies on ``torch._dispatch.python.enable_python_dispatcher``.
    """
    from torch._dispatch.python import enable_python_dispatcher as enable
    return enable()
