"""The printed form of a program, laid out as torch.export prints it.

``ExportedProgram:`` then the readable ``forward`` (tensor annotations such as
``"f32[10, 10]"`` and ``# File: ...`` source comments come from torch.fx's own
code generator), then ``Graph signature:`` and ``Range constraints:``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .program import ExportedProgram


def graph_to_str(gm) -> str:
    return gm.print_readable(print_output=False, include_stride=False, include_device=False,
                             colored=False).replace("\r", "")


def range_constraints_str(constraints: dict[Any, Any]) -> str:
    items = ", ".join(f"{k}: VR[{v.lower}, {v.upper}]" for k, v in constraints.items())
    return "{" + items + "}"


def program_to_str(ep: "ExportedProgram") -> str:
    # every line indented, blank ones too, and no space after "Graph signature:"
    # (the signature starts on a new line): what torch prints, byte for byte
    graph = "    " + graph_to_str(ep.graph_module).replace("\n", "\n    ")
    signature = str(ep.graph_signature).replace("\n", "\n    ")
    return (f"ExportedProgram:\n{graph}\nGraph signature:{signature}\n"
            f"Range constraints: {range_constraints_str(ep.range_constraints)}\n")


def signature_to_str(sig) -> str:
    """``# inputs`` then ``# outputs``, one spec a line, as torch prints a graph signature."""
    inputs = "\n".join(map(str, sig.input_specs))
    outputs = "\n".join(map(str, sig.output_specs))
    return f"\n# inputs\n{inputs}\n\n# outputs\n{outputs}\n"
