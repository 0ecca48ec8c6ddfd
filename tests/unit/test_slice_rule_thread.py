"""graphcap's slice fake rule (torch 2.10, 2.11) acts on the exporting thread only.

Before torch 2.12 the slice fake kernel gives ``x[:n]`` an unbacked size where it cannot
order ``n`` against the size; while graphcap records, its own rule gives ``Min(n, size)``
there (``torch_private.fake.slice_ends_clamped_symbolically``). Another thread slicing at the
same time gets exactly what torch alone gives, and torch's kernel is back after the export.
"""
from __future__ import annotations

import threading

import torch
from torch._subclasses import fake_impls
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

from graphcap.torch_private import fake


def _slice_kind(env, mode):
    """How torch sizes ``x[:n]`` with ``x`` of unbacked size ``u0`` and ``n = u1 >= 0``: whether the
    length is a new symbol (not built from u0, u1)."""
    with mode:
        size, n = env.create_unbacked_symint(), env.create_unbacked_symint()
        torch._check(size >= 0)
        torch._check(n >= 0)
        length = torch.empty(size)[:n].shape[0]
    return bool(free_unbacked_symbols(length) - free_unbacked_symbols(size) - free_unbacked_symbols(n))


def _fresh():
    env = ShapeEnv()
    return env, fake.FakeTensorMode(shape_env=env, allow_non_fake_inputs=False)


def test_other_threads_slice_as_torch_does_while_a_recording_holds_the_rule():
    slice_op = torch.ops.aten.slice.Tensor
    kernel = fake_impls.op_implementations_dict[slice_op]
    alone = _slice_kind(*_fresh())
    other: dict[str, bool] = {}
    with fake.slice_ends_clamped_symbolically():
        here = _slice_kind(*_fresh())
        thread = threading.Thread(target=lambda: other.setdefault("new_symbol", _slice_kind(*_fresh())))
        thread.start()
        thread.join()
    assert other["new_symbol"] == alone
    assert here is False  # the exporting thread: Min(n, size), no new symbol, on every line
    assert fake_impls.op_implementations_dict[slice_op] is kernel
