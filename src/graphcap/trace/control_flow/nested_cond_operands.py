"""``torch.cond`` with operands nested in dicts, lists and tuples, captured as torch captures it.

torch's documented ``torch.cond`` takes "a tuple of possibly nested
dict/list/tuple of tensors"; the ``cond`` operator itself takes a flat tuple.
torch.export bridges the two by flattening the operands before the operator
and rebuilding the structure for the branches, so the recorded ``cond`` has
one operand per tensor and each branch graph one input per tensor. graphcap
does the same, at the ``torch.cond`` entry (see
:mod:`graphcap.torch_private.cond_entry` for why there and what it costs):

    torch.cond(p, t, f, ({"a": x, "b": [y, z]},))
    # recorded as
    cond(p, t', f', (x, y, z))   with   t'(x, y, z) = t({"a": x, "b": [y, z]})

Outputs need nothing here: :mod:`.hop_capture` already flattens what branches
return and rebuilds it for the caller.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch

from ...torch_private import pytree
from ...torch_private.cond_entry import swap_public_cond
from ...torch_private.higher_order import run_graph_preserving_meta

_state = threading.local()
_FLAT_OPERAND = (torch.Tensor, int, torch.SymInt)


def _recording() -> bool:
    return getattr(_state, "depth", 0) > 0


def _needs_flattening(pred: Any, operands: Any) -> bool:
    """Operands torch's ``cond`` accepts but its operator does not: a tuple/list holding
    containers whose leaves are all tensors (anything else gets torch's own message)."""
    if isinstance(pred, (bool, int, float)) or not isinstance(operands, (tuple, list)):
        return False  # a Python predicate runs one branch directly: torch handles any operands
    if all(isinstance(op, _FLAT_OPERAND) for op in operands):
        return False
    return all(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(operands))


def _on_leaves(fn: Callable, spec: Any) -> Callable:
    """``fn`` as a branch of the flat operands: the structure is rebuilt before ``fn`` runs."""
    run = run_graph_preserving_meta(fn)

    def branch(*leaves):
        return run(*pytree.tree_unflatten(list(leaves), spec))

    branch.__name__ = getattr(fn, "__name__", "branch")
    branch.__qualname__ = getattr(fn, "__qualname__", branch.__name__)
    return branch


def _make_flattening_cond(torch_cond: Callable) -> Callable:
    def cond(pred, true_fn, false_fn, operands=()):
        if torch.compiler.is_dynamo_compiling() or not _recording() or not _needs_flattening(pred, operands):
            return torch_cond(pred, true_fn, false_fn, operands)
        leaves, spec = pytree.tree_flatten(tuple(operands))
        return torch_cond(pred, _on_leaves(true_fn, spec), _on_leaves(false_fn, spec), tuple(leaves))

    cond.__name__, cond.__qualname__, cond.__doc__ = "cond", "cond", torch_cond.__doc__
    return cond


@contextlib.contextmanager
def flattened() -> Iterator[None]:
    """While the block records on this thread, ``torch.cond`` flattens nested operands."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        with swap_public_cond(_make_flattening_cond):
            yield
    finally:
        _state.depth -= 1
