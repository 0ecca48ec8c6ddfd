"""Which graph inputs does the program write to?

Two sources of evidence, joined:

* version counters: every in-place operator run on a fake tensor (or on a view
  of it: views share the counter) bumps ``_version``; comparing each input's
  counter before and after the trace catches ``x.add_(1)`` and
  ``buf[0:2].mul_(2)`` alike;
* operator schemas: an argument marked as written (``Tensor(a!)``) whose
  storage is an input's, plus the few composite operators that update their
  arguments without saying so in their schema (``batch_norm`` in training mode
  updates the running statistics).
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from ..node_facts import written_arguments
from ..torch_private import pytree
from ..torch_private.ops import schema_of


def base_placeholder(value: object) -> "torch.fx.Node | None":
    """The placeholder whose memory ``value`` is: itself, a view of it, or an in-place result on it."""
    node = value
    while isinstance(node, torch.fx.Node):
        if node.op == "placeholder":
            return node
        if node.op != "call_function" or not node.args:
            return None
        if node.target is operator.getitem:
            node = node.args[0]
            continue
        schema = schema_of(node.target)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None:
            return None  # a fresh tensor
        node = node.args[0]  # a view (Tensor(a)) or the written argument itself (Tensor(a!))
    return None


def _subgraph_operands(node: torch.fx.Node) -> list[tuple[torch.fx.Graph, list[object]]]:
    """For a control-flow or region operator: each subgraph it runs, with the values its inputs get.

    The operands are the arguments after the last subgraph (``cond(pred, t, f, (a, b))``,
    ``wrap_with_set_grad_enabled(False, body, a, b)``), flattened.
    """
    owner = node.graph.owning_module
    if owner is None:
        return []
    subgraphs, last = [], -1
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
            sub = getattr(owner, arg.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                subgraphs.append(sub.graph)
                last = i
    if not subgraphs:
        return []
    operands = pytree.tree_leaves(node.args[last + 1:])
    return [(g, operands) for g in subgraphs]


def written_placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The placeholders the graph writes in place (through views, and inside the subgraphs of
    control-flow and grad-mode regions too), in placeholder order.

    In the training IR this is how a program says what it updates: the
    writes are operators in the graph, not outputs of the signature.
    """
    written: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        values = list(written_arguments(node))
        for sub, operands in _subgraph_operands(node):
            inner = [n for n in sub.nodes if n.op == "placeholder"]
            values.extend(operands[inner.index(p)] for p in written_placeholders(sub)
                          if inner.index(p) < len(operands))
        for value in values:
            base = base_placeholder(value)
            if base is not None:
                written.add(base)
    return [n for n in graph.nodes if n in written]


def first_writer(graph: torch.fx.Graph, placeholder: torch.fx.Node) -> "torch.fx.Node | None":
    """The first node of ``graph`` that writes ``placeholder`` in place (itself or a view of it), or
    None (the write is inside a subgraph)."""
    for node in graph.nodes:
        if node.op == "call_function" and any(base_placeholder(v) is placeholder for v in written_arguments(node)):
            return node
    return None
