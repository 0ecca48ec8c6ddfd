"""Fake tensors for tracing: no data, no compute, only metadata.

One ``FakeTensorMode`` with its own ``ShapeEnv`` per export. Parameters,
buffers and constants are always static; user inputs are static unless the
dynamic-shape layer asks for symbols (it passes a per-tensor policy).
"""
from __future__ import annotations

import functools
from collections import Counter
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Optional

import torch

from ..torch_private.fake import FakeTensor, FakeTensorMode, fake_of_plain_leaf, storage_key, tracing_fake_mode
from ..torch_private.shapes import new_shape_env

# Set by graphcap.capture.draft while it runs: builds each export's fake mode
# (real tensors propagated beside the fake ones) from the plain constructor below.
MODE_BUILDER: ContextVar[Optional[Callable[[Callable[[], FakeTensorMode]], FakeTensorMode]]] = \
    ContextVar("graphcap_fake_mode_builder", default=None)


def new_fake_mode(prefer_deferred_asserts: bool = False) -> FakeTensorMode:
    """A fake mode for one export.

    Real tensors met while tracing (a constant made in ``forward``) are allowed
    and become graph constants, which the lifting step turns into inputs.
    ``prefer_deferred_asserts`` is export's ``prefer_deferred_runtime_asserts_over_guards``,
    given to the shape engine: a size the program fixes to a constant stays a symbol whose
    range is that constant, checked when the program runs (as torch.export keeps it).
    """
    plain = functools.partial(_plain_fake_mode, prefer_deferred_asserts)
    builder = MODE_BUILDER.get()
    return builder(plain) if builder is not None else plain()


def _plain_fake_mode(prefer_deferred_asserts: bool = False) -> FakeTensorMode:
    # trace_asserts: a Python `assert` on a value read from data becomes a runtime assert, as in torch.export
    shape_env = new_shape_env(assume_static_by_default=True, tracked_fakes=[], trace_asserts=True,
                              prefer_deferred_runtime_asserts_over_guards=prefer_deferred_asserts)
    return tracing_fake_mode(shape_env=shape_env, allow_non_fake_inputs=True, export=True)


def fake_static(mode: FakeTensorMode, t: torch.Tensor) -> FakeTensor:
    """A fake copy of ``t`` with every dimension fixed to its current size."""
    if isinstance(t, FakeTensor) and t.fake_mode is mode:
        return t
    return mode.from_tensor(t, static_shapes=True)


def fakify_leaf(mode: FakeTensorMode, leaf: Any, symbolic_context: Optional[Any] = None) -> Any:
    """Fake tensors for tensor leaves; other leaves pass through unchanged."""
    if not isinstance(leaf, torch.Tensor):
        return leaf
    if symbolic_context is None:
        return fake_static(mode, leaf)
    return mode.from_tensor(leaf, symbolic_context=symbolic_context)


def distinct_leaves(leaves: list[Any]) -> list[Any]:
    """The user inputs with a tensor passed again (``f(x, x)``) replaced by an alias of it (same
    storage, no copy), so that the fake converter, which keeps one fake tensor per real one, gives
    each input its own fake tensor, with the sizes its own ``dynamic_shapes`` entry gives. With one
    fake object for two inputs, the recorder read every use from the last placeholder holding it:
    a program that ignored the first input, wrong for any call passing two different tensors."""
    seen: set[int] = set()
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and id(leaf) in seen:
            leaf = torch.ops.aten.alias.default(leaf)
        if isinstance(leaf, torch.Tensor):
            seen.add(id(leaf))
        out.append(leaf)
    return out


def fake_state(mode: FakeTensorMode, state: Iterable[torch.Tensor],
               others: Iterable[Any] = ()) -> dict[int, FakeTensor]:
    """Static fake copies of a module's parameters and buffers, keyed by ``id`` of the real tensor.

    A tensor held under two names (tied weights) gets one fake copy. Plain
    leaves (the usual parameter or buffer: a dense strided tensor alone on its
    storage) take :func:`fake_of_plain_leaf`'s short path; any other (a view, a
    subclass, a tensor sharing its storage with another state tensor, a
    tensor attribute or an input in ``others``) goes through ``from_tensor``,
    which keeps views and shared storages aliased among the fake copies.
    """
    tensors = {id(t): t for t in state}
    storages = {id(t): storage_key(t) for t in others if isinstance(t, torch.Tensor)}
    storages.update((key, storage_key(t)) for key, t in tensors.items())
    shared = Counter(storages.values())
    fakes: dict[int, FakeTensor] = {}
    for key, t in tensors.items():
        fake = fake_of_plain_leaf(mode, t) if shared[storages[key]] == 1 else None
        fakes[key] = fake if fake is not None else fake_static(mode, t)
    return fakes

