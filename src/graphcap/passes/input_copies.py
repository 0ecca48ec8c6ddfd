"""Drop the functional ``copy`` that stands for "this input now holds that value".

Functionalizing ``buf.copy_(new)`` — which is how the training IR records a
buffer forward reassigned (``self.buf = self.buf + 1``), and how users write
a buffer update — leaves ``copy(buf, new)`` as the buffer's new value. When
``new`` already has the input's shape, dtype and device, that copy computes
exactly ``new``: the new value is ``new`` itself, as torch.export's inference
IR shows it (``add: BUFFER_MUTATION target='buf'``). A copy into a tensor the
graph made (``torch.empty(3).copy_(x)``) stays, as it does in torch.
"""
from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def _same_layout(a: object, b: object) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


def drop_input_copies(gm: torch.fx.GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy.default or len(node.args) < 2:
            continue
        dst, src = node.args[0], node.args[1]
        if not (isinstance(dst, torch.fx.Node) and dst.op == "placeholder" and isinstance(src, torch.fx.Node)):
            continue
        if node.kwargs.get("non_blocking") or not _same_layout(dst.meta.get("val"), src.meta.get("val")):
            continue
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
