"""Give every output its own storage: no output may alias an input.

After functionalization a graph can still return an input itself (``return
x``) or a view of one (``return w.t()``), and a mutation output can be its
input unchanged when the write was a no-op. The inference IR promises outputs
that are fresh tensors, so the caller may change them (and ``module()`` may
copy them into buffers) without touching the program's inputs. Such outputs
are replaced by an ``aten.clone`` of themselves.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
import torch.fx

from ..node_facts import aliased_input
from ..signature import call_graph_of
from ..torch_private.fx import extract_tensor_metadata

if TYPE_CHECKING:
    from ..program import ExportedProgram


def unalias_outputs_pass(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    values = list(output_node.args[0])
    names: dict[str, str] = {}
    clones: dict[torch.fx.Node, torch.fx.Node] = {}
    for i, value in enumerate(values):
        if not isinstance(value, torch.fx.Node) or not isinstance(value.meta.get("val"), torch.Tensor):
            continue
        if value in clones:
            values[i] = clones[value]
            continue
        if aliased_input(value) is None:
            continue
        with graph.inserting_before(output_node):
            clone = graph.call_function(torch.ops.aten.clone.default, (value,))
        clone.meta["val"] = value.meta["val"].clone()
        clone.meta["tensor_meta"] = extract_tensor_metadata(clone.meta["val"])
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            clone.meta[key] = value.meta.get(key, None if key == "stack_trace" else {} if key == "nn_module_stack"
                                             else [(clone.name, str(clone.target))])
        for key in ("torch_fn", "custom"):  # the copy belongs to the user's call that made the value
            if value.meta.get(key):
                clone.meta[key] = copy.copy(value.meta[key])
        values[i] = clones[value] = clone
        names[value.name] = clone.name
    if not names:
        return ep
    output_node.args = (tuple(values),)
    ep.graph_module.recompile()
    for spec in ep.graph_signature.output_specs:
        if spec.arg.name in names and not hasattr(spec.arg, "value"):
            spec.arg = type(spec.arg)(names[spec.arg.name])
    root = call_graph_of(ep)[0].signature if call_graph_of(ep) else None
    if root is not None:
        root.outputs = [type(a)(names[a.name]) if a.name in names and not hasattr(a, "value") else a
                        for a in root.outputs]
    return ep
