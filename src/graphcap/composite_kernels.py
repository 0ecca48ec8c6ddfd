"""Swap composite operators' dispatcher kernels for one retrace: keep them whole or replace them.

Not a pass: a context manager the decomposition pass (``passes.decompose``)
enters while it retraces, steered by the decomposition table's choices.

Composite operators (those with a ``CompositeImplicitAutograd`` kernel, such as
``aten.conv2d``) are broken down by the dispatcher at the autograd level, long
before any tracing mode sees them. Two table decisions need that changed, and
only for the duration of one retrace (everything is put back afterwards):

* **keep** — the table leaves the operator whole: at the autograd keys it is
  sent on below autograd, so functionalization and the recorder see it as
  one call; its composite kernel answers "not decomposable", so neither of
  them breaks it down; the backend keys (reached when fake tensors compute
  output metadata) still run the original composite kernel.
* **replace** — the table gives the user's function: it becomes the
  operator's composite kernel, so it runs wherever the operator is called,
  including inside other decompositions.

These are Python-dispatcher kernels (``OpOverload.py_kernels``): the pass
enables the Python dispatcher while it traces.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Mapping

from .torch_private.dispatch import DispatchKey, auto_dispatch_below_autograd
from .torch_private.ops import OpOverload, clear_dispatch_cache, run_kernel_for_key

_CIA = DispatchKey.CompositeImplicitAutograd
_AUTOGRAD = DispatchKey.Autograd
_AUTOGRAD_KEYS = [getattr(DispatchKey, name) for name in (
    "AutogradCPU", "AutogradCUDA", "AutogradMeta", "AutogradXPU", "AutogradMPS", "AutogradHPU",
    "AutogradXLA", "AutogradLazy", "AutogradIPU", "AutogradPrivateUse1") if hasattr(DispatchKey, name)]
_BACKEND_KEYS = [getattr(DispatchKey, name) for name in (
    "CPU", "CUDA", "Meta", "XPU", "MPS", "HPU", "XLA", "Lazy", "IPU", "PrivateUse1")
    if hasattr(DispatchKey, name)]


def composite_kernel_of(op: OpOverload) -> Callable[..., Any]:
    """``op``'s own composite kernel as a plain function: its Python kernel, or its C++ one run
    directly. Not ``op.decompose``, which looks the kernel up in ``py_kernels`` when called:
    installed as that very kernel (here, or by torch's ``run_decompositions`` given a graphcap
    table), it would call itself forever."""
    python_kernel = op.py_kernels.get(_CIA)
    if python_kernel is not None and not isinstance(python_kernel, DispatchKey):
        return python_kernel

    def run_composite(*args: Any, **kwargs: Any) -> Any:
        return run_kernel_for_key(op, _CIA, *args, **kwargs)
    return run_composite


def _below_autograd(op: OpOverload) -> Callable[..., Any]:
    def send_below(*args: Any, **kwargs: Any) -> Any:
        with auto_dispatch_below_autograd():
            return op(*args, **kwargs)
    return send_below


def _not_decomposable(*args: Any, **kwargs: Any) -> Any:
    return NotImplemented


def _install(op: OpOverload, key: DispatchKey, fn: Callable[..., Any]) -> None:
    op.py_kernels[key] = fn


@contextlib.contextmanager
def steer_composites(keep: Iterable[OpOverload],
                     replace: Mapping[OpOverload, Callable[..., Any]]) -> Iterator[None]:
    """Within the block, ``keep`` composites stay whole and ``replace`` ones run the given function."""
    saved: dict[OpOverload, dict] = {}
    try:
        for op in keep:
            saved.setdefault(op, dict(op.py_kernels))
            original = composite_kernel_of(op)
            for key in _AUTOGRAD_KEYS:
                if key not in op.py_kernels:
                    _install(op, key, _below_autograd(op))
            for key in _BACKEND_KEYS:
                if key not in op.py_kernels:
                    _install(op, key, original)
            _install(op, _CIA, _not_decomposable)
            clear_dispatch_cache(op)
        for op, fn in replace.items():
            if op in saved:
                continue
            saved[op] = dict(op.py_kernels)
            original = composite_kernel_of(op)
            for key in _BACKEND_KEYS:
                if key not in op.py_kernels:
                    _install(op, key, original)
            _install(op, _CIA, fn)
            if _AUTOGRAD in op.py_kernels:
                # torch registers some decompositions (dropout, lstm, gru, ...) at the Autograd key
                # too, which the dispatcher reaches first: the table's function must stand there
                _install(op, _AUTOGRAD, fn)
            clear_dispatch_cache(op)
        yield
    finally:
        for op, kernels in saved.items():
            op.py_kernels.clear()
            op.py_kernels.update(kernels)
            clear_dispatch_cache(op)
