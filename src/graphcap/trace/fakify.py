"""Fake tensors for tracing: no data, no compute, only metadata.

One ``FakeTensorMode`` with its own ``ShapeEnv`` per export. Parameters,
buffers and constants are always static; user inputs are static unless the
dynamic-shape layer asks for symbols (it passes a per-tensor policy).
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable, Optional

import torch
from ..torch_private.fake import FakeTensor, FakeTensorMode
from ..torch_private.shapes import new_shape_env


# Set by graphcap.capture.draft while it runs: builds each export's fake mode
# (real tensors propagated beside the fake ones) from the plain constructor below.
MODE_BUILDER: ContextVar[Optional[Callable[[Callable[[], FakeTensorMode]], FakeTensorMode]]] = \
    ContextVar("graphcap_fake_mode_builder", default=None)


def new_fake_mode() -> FakeTensorMode:
    """A fake mode for one export.

    Real tensors met while tracing (a constant made in ``forward``) are allowed
    and become graph constants, which the lifting step turns into inputs.
    """
    builder = MODE_BUILDER.get()
    return builder(_plain_fake_mode) if builder is not None else _plain_fake_mode()


def _plain_fake_mode() -> FakeTensorMode:
    # trace_asserts: a Python `assert` on a value read from data becomes a runtime assert, as in torch.export
    shape_env = new_shape_env(assume_static_by_default=True, tracked_fakes=[], trace_asserts=True)
    return FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True, export=True)


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
