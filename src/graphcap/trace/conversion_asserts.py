"""Pin the input metadata that a ``Tensor.to`` call was traced with.

``x.to(dtype)`` / ``x.to(device)`` is a no-op that returns ``x`` itself when
``x`` already has that dtype and device, and a copy otherwise; the training
IR records the call whole (``aten.to.dtype``), but what it means — alias or
copy — was decided by the example's metadata. torch.export puts an
``aten._assert_tensor_metadata(x, dtype=, device=, layout=)`` right before
each such call so the program refuses, at run time, a tensor that would
change that meaning. graphcap records the same assertion, so programs read
and run alike (and ``run_decompositions`` keeps it: it has a side effect).
"""
from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten
_CONVERSIONS = (aten.to.device, aten.to.dtype, aten.to.dtype_layout)


def _already_pinned(node: torch.fx.Node) -> bool:
    prev = node.prev
    return prev.op == "call_function" and prev.target is aten._assert_tensor_metadata.default \
        and prev.args[:1] == node.args[:1]


def insert_conversion_asserts(gm: torch.fx.GraphModule) -> None:
    """Before every ``aten.to`` call of ``gm``'s graph, assert its input's dtype, device and layout."""
    graph = gm.graph
    inserted = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _CONVERSIONS or _already_pinned(node):
            continue
        source = node.args[0]
        val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            continue
        with graph.inserting_before(node):
            check = graph.call_function(aten._assert_tensor_metadata.default, (source,),
                                        {"dtype": val.dtype, "device": val.device, "layout": val.layout})
        check.meta["val"] = None
        inserted = True
        for key in ("stack_trace", "nn_module_stack"):
            # as the conversion's own: a None stack trace too (recorded without a user frame:
            # a forward that is a lambda or a function of another name), which the verifier accepts
            if key in node.meta:
                check.meta[key] = node.meta[key]
    if inserted:  # the code of an unchanged graph is current: regenerating it costs a warm export 5%
        gm.recompile()
