"""Record reads of a tensor subclass's inner tensors (``two_tensor.a``) as graph nodes.

A wrapper subclass (``TwoTensor``, a quantized tensor type) keeps its data in
plain tensor attributes named by ``__tensor_flatten__``. Reading one is a
Python attribute access, which no dispatcher sees: the tracer would meet the
inner (fake) tensor as a value it never recorded and bake it into the program
as a constant — the trace's fake value, not the data the program computes.

While a trace runs, the subclass types present in its inputs get an attribute
hook: reading an attribute that plain tensors lack and that holds a tensor
records ``export.access_subclass_inner_tensor(t, "a")`` — the operator torch's
own IR uses for this read — and binds the inner tensor to that node. Running
the program, the operator reads the attribute of the real subclass tensor.
The hooks are removed when the trace ends.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterable, Iterator

import torch
from torch.fx.experimental import proxy_tensor

from ..torch_private.dispatch import is_traceable_wrapper_subclass, torch_function_mode_enabled
from ..torch_private.fx import current_make_fx_tracer


def _access_op() -> Any:
    """The IR's inner-tensor read (``export::access_subclass_inner_tensor``), registered by torch."""
    return torch.ops.export.access_subclass_inner_tensor.default


def subclass_types(values: Iterable[Any]) -> dict[type, torch.Tensor]:
    """Each wrapper-subclass type among ``values`` (and inside them), with one instance of it."""
    found: dict[type, torch.Tensor] = {}
    stack = [v for v in values if isinstance(v, torch.Tensor)]
    while stack:
        t = stack.pop()
        if not is_traceable_wrapper_subclass(t):
            continue
        found.setdefault(type(t), t)
        names, _ = t.__tensor_flatten__()
        stack.extend(getattr(t, n) for n in names)
    return found


def _record_read(owner: torch.Tensor, attr: str, inner: torch.Tensor) -> None:
    """Bind ``inner`` to a new graph node that reads ``owner.attr``, if a trace follows ``owner``."""
    tracer_box = current_make_fx_tracer()
    tracer = getattr(tracer_box, "fx_tracer", None) if tracer_box is not None else None
    if tracer is None or not proxy_tensor.has_proxy_slot(owner, tracer):
        return
    owner_proxy = proxy_tensor.get_proxy_slot(owner, tracer).proxy
    proxy = tracer.create_proxy("call_function", _access_op(), (owner_proxy, attr), {})
    # A read made while the tracer wraps the inputs (torch's fake-tensor check flattens the
    # subclass before the user's forward runs, and that node is the one the program then uses)
    # comes before the recorder gives nodes their user line: it is recorded as having none.
    proxy.node.meta.setdefault("stack_trace", None)
    proxy_tensor.track_tensor_tree(inner, proxy, constant=None, tracer=tracer)


def _hooked_getattribute(self: torch.Tensor, attr: str, *, original: Any, inner_names: frozenset) -> Any:
    value = original(self, attr)
    if attr in inner_names and isinstance(value, torch.Tensor) and torch_function_mode_enabled():
        _record_read(self, attr, value)
    return value


@contextlib.contextmanager
def recorded(values: Iterable[Any]) -> Iterator[None]:
    """Within the block, reads of inner tensors of the subclasses in ``values`` are recorded."""
    saved: dict[type, Any] = {}
    try:
        for cls, instance in subclass_types(values).items():
            inner_names = frozenset(set(dir(instance)) - set(dir(torch.Tensor)))
            saved[cls] = cls.__dict__.get("__getattribute__")
            original = cls.__getattribute__
            cls.__getattribute__ = functools.partialmethod(
                _hooked_getattribute, original=original, inner_names=inner_names)
        yield
    finally:
        for cls, own in saved.items():
            if own is None:
                del cls.__getattribute__  # the class inherited it: inherit again
            else:
                cls.__getattribute__ = own
