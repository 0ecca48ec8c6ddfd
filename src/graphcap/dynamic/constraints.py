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
    """The pipeline's guards step: check, insert runtime asserts, return range_constraints."""
    env = mode.shape_env
    if inputs is not None:
        check_guards(mode, inputs, prefer_deferred_asserts)
        dyn_hints.apply_bounds(env, inputs)
        defer_relations(mode, inputs)
    if env is None:
        return {}
    has_symbols = inputs is not None and inputs.roots
    if has_symbols or deferred_asserts(env) or has_unbacked_symbols(env):
        insert_runtime_asserts(gm, env, name)
    return range_constraints(gm, mode, inputs)
