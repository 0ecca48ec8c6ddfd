"""The pipeline's guards step: guards checked against the spec, runtime asserts, ranges.

:func:`run_guards_step` runs after lifting. It checks the guards raised while
tracing against the ``dynamic_shapes`` spec (:mod:`.guard_checks`, which
raises ``ConstraintViolationError`` with suggested fixes), meets hint bounds
(:mod:`.hints`), keeps relations no Dim states as deferred asserts
(:mod:`.ranges`), inserts the deferred runtime asserts into the graph
(:mod:`.runtime_asserts`), and gives every symbol of the graph a range
(``range_constraints``).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..torch_private.shapes import deferred_asserts, has_unbacked_symbols
from ..torch_private.symbolic import ValueRanges
from . import hints as dyn_hints
from .guard_checks import check_guards
from .ranges import defer_relations, range_constraints
from .runtime_asserts import insert_runtime_asserts
from .symbols import SymbolicInputs


def run_guards_step(gm: torch.fx.GraphModule, mode: Any, inputs: Optional[SymbolicInputs], name: str,
                    prefer_deferred_asserts: bool = False) -> dict[Any, ValueRanges]:
    """The pipeline's guards step, its three jobs in order: settle what the trace needed against the
    spec, insert the runtime asserts that leaves, and give every symbol its range."""
    if inputs is not None:
        settle_guards_with_spec(mode, inputs, prefer_deferred_asserts)
    env = mode.shape_env
    if env is None:
        return {}
    insert_asserts_if_any(gm, env, inputs, name)
    return range_constraints(gm, mode, inputs)


def settle_guards_with_spec(mode: Any, inputs: SymbolicInputs, prefer_deferred_asserts: bool = False) -> None:
    """What the trace needed of the spec's dims, settled before any assert is inserted: a declared
    Dim it needed more of raises ``ConstraintViolationError`` (:func:`.guard_checks.check_guards`),
    a ``Dim.AUTO`` / ``Dim.DYNAMIC`` dim's traced range is narrowed to the user's min/max, or
    refused where they conflict (:func:`.hints.apply_bounds`), and relations between automatic
    dims that no range holds become deferred asserts (:func:`.ranges.defer_relations`), which the
    next job inserts."""
    check_guards(mode, inputs, prefer_deferred_asserts)
    dyn_hints.apply_bounds(mode.shape_env, inputs)
    defer_relations(mode, inputs)


def insert_asserts_if_any(gm: torch.fx.GraphModule, env: Any, inputs: Optional[SymbolicInputs], name: str) -> None:
    """Runtime asserts into the graph, when there can be any: dynamic dims, deferred asserts or
    values read from data (unbacked symbols). A static program's graph stays as recorded."""
    has_symbols = inputs is not None and inputs.roots
    if has_symbols or deferred_asserts(env) or has_unbacked_symbols(env):
        insert_runtime_asserts(gm, env, name)
