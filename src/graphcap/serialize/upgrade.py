"""Bring a file written by an older graphcap to today's form, at two levels.

**The file's format** (``to_current_format``): program.json of format version
N is rewritten, step by step, into version N+1's by ``FORMAT_UPGRADERS[N]``,
until it is today's ``FORMAT_VERSION``; only then is it checked against the
declared schema (``schema.PROGRAM``) and decoded. A format bump that changes
what program.json holds adds its step here, so every version in
``schema.READABLE_VERSIONS`` keeps loading (its golden file proves it).
Version 1 → 2 is the identity (version 2 only allows weights without data),
2 → 3 adds optional fields and clears the root call-graph entry's value lists,
3 → 4 is the identity (version 4 only allows tensor-subclass state and annotations),
4 → 5 adds an empty 'opset_version' (the file recorded no operator-set versions), and
5 → 6 is the identity (version 6 only allows enum members and dataclasses in a subclass's context).

**The program's form** (``writes_into_graph``), for files whose format did not
change but whose program an older graphcap built differently. Until 2026-11-23
graphcap's training IR listed every buffer or user input the program updates
as a ``BUFFER_MUTATION`` / ``USER_INPUT_MUTATION`` output: the
placeholder itself for an in-place write (the write was already an operator
of the graph), the new tensor for a buffer forward reassigned. torch's
training IR — and graphcap's since — keeps the writes in the graph and lists
no such outputs; torch's own tools (its ``unflatten``) read a
program that way. The file format did not change (the outputs are ordinary
outputs with ordinary specs), so old files are upgraded as they load:

* an output that is its target placeholder is dropped (the write is in the
  graph already);
* an output with a computed value becomes ``copy_(placeholder, value)`` at
  the end of the graph, then is dropped.

Programs in the inference IR keep their mutation outputs: that is how the
inference IR says what it updates.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..graph_arguments import OutputKind
from ..signature import ExportGraphSignature
from . import schema
from .values import bad


# version N -> the function turning version N's program.json into version N+1's (returns the new dict).
def _v1_to_v2(program: dict[str, Any]) -> dict[str, Any]:
    """Version 2 only allows more (weights described without data): a version-1 program.json is one."""
    return program


def _v2_to_v3(program: dict[str, Any]) -> dict[str, Any]:
    """Version 3 adds optional fields (checksums, assumptions, Dim names, the 'flattened' marker) and
    lists no graph values in the program's own (root) call-graph entry, as torch.export's programs
    do: ExecuTorch's passes rename graph values and then find a root list naming values that no
    longer exist. Nothing in graphcap reads the root's lists (the whole program's inputs and outputs
    are the graph's placeholders and output), so they are cleared."""
    for entry in program.get("module_call_graph", ()):
        if entry.get("fqn") == "" and entry.get("signature") is not None:
            entry["signature"]["inputs"], entry["signature"]["outputs"] = [], []
    return program


def _v3_to_v4(program: dict[str, Any]) -> dict[str, Any]:
    """Version 4 only allows more (tensor-subclass state and values, annotations): a version-3 program.json
    is one."""
    return program


def _v4_to_v5(program: dict[str, Any]) -> dict[str, Any]:
    """Version 5 records the operator-set versions ('opset_version'); a version-4 file recorded none, and
    an empty map says so: it makes no claim an ``expected_opset_version`` could contradict."""
    program["opset_version"] = {}
    return program


def _v5_to_v6(program: dict[str, Any]) -> dict[str, Any]:
    """Version 6 only allows more (enum members and dataclasses in a tensor subclass's flatten
    context): a version-5 program.json is one."""
    return program


FORMAT_UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3,
                                                                           3: _v3_to_v4, 4: _v4_to_v5,
                                                                           5: _v5_to_v6}


def to_current_format(program: dict[str, Any], version: int) -> dict[str, Any]:
    """program.json of format ``version``, rewritten into today's format by the upgraders in order."""
    if version not in schema.READABLE_VERSIONS:
        raise bad(f"Format version {version} is not one this graphcap reads.")
    while version < schema.FORMAT_VERSION:
        step = FORMAT_UPGRADERS.get(version)
        if step is None:
            raise bad(f"No upgrader from format version {version} to {version + 1}; this graphcap lists "
                      f"version {version} as readable but cannot read it (a graphcap bug).")
        program = step(program)
        version += 1
        program["format_version"] = version
    return program

aten = torch.ops.aten
_UPGRADED_KINDS = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)


def writes_into_graph(gm: torch.fx.GraphModule, signature: ExportGraphSignature) -> None:
    """Turn the mutation outputs of an older training-IR program into in-graph writes, in place."""
    if (gm.meta.get("graphcap_ir") or {}).get("level") == "inference":
        return
    if not any(s.kind in _UPGRADED_KINDS for s in signature.output_specs):
        return
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    written = signature.written_input_positions()
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    values = list(output.args[0])
    kept_values, kept_specs = [], []
    for value, spec in zip(values, signature.output_specs):
        position = written.get((spec.kind, spec.target)) \
            if spec.kind in _UPGRADED_KINDS and spec.target is not None else None
        if position is None or position >= len(placeholders):
            kept_values.append(value)
            kept_specs.append(spec)
            continue
        dest = placeholders[position]
        if value is not dest and isinstance(value, torch.fx.Node):
            with graph.inserting_before(output):
                write = graph.create_node("call_function", aten.copy_.default, (dest, value), name="copy__default")
            write.meta.update({k: v for k, v in value.meta.items()
                               if k in ("nn_module_stack", "stack_trace", "source_fn_stack", "torch_fn")})
            write.meta["val"] = dest.meta.get("val")
    output.args = (tuple(kept_values),)
    signature.output_specs[:] = kept_specs
    gm.recompile()
