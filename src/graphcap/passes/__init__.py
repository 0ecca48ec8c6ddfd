"""Passes over exported programs, one per module, run by :mod:`.manager`.

``run_decompositions`` is the pipeline ``ExportedProgram.run_decompositions``
delegates to: decompose (retrace with the table, functionalize, unalias the
outputs), then drop dead code — the IR verified after each.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

from . import dce, decompose
from .manager import Pass, run_passes
from .move_to_device import move_to_device_pass

if TYPE_CHECKING:
    from ..program import ExportedProgram


def run_decompositions(ep: ExportedProgram, decomp_table: Optional[Mapping] = None, *,
                       decompose_custom_triton_ops: bool = False) -> ExportedProgram:
    return run_passes(ep, [
        Pass("decompose", lambda p: decompose.decompose(
            p, decomp_table, decompose_custom_triton_ops=decompose_custom_triton_ops)),
        Pass("dce", dce.dce_pass),
    ])


__all__ = ["run_decompositions", "move_to_device_pass", "run_passes", "Pass"]
