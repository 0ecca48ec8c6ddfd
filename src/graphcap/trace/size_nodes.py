"""A graph node holding a given symbolic size, found or made.

A preserved submodule's call signature names the graph values passed to it;
a size passed to it (``sub(x, x.shape[0] - 1)``) is one. The tracer drops size
computations nothing uses and merges equal ones, so the node that made the
size may be gone by the time the signature is written. This finds a node of
the graph with the same value, or computes it from the program's input sizes
(``sym_size`` reads and ``+``/``*``/``//`` on them) right after the
placeholders, so the signature always names a value the graph defines.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import sympy
import torch


def _is_live(node: torch.fx.Node, graph: torch.fx.Graph) -> bool:
    return node.graph is graph and any(n is node for n in graph.nodes)  # an erased node is in no list


def _expr(value: Any) -> Any:
    return value.node.expr if isinstance(value, torch.SymInt) else None


def size_node(graph: torch.fx.Graph, value: torch.SymInt,
              made: Optional[torch.fx.Node] = None) -> Optional[torch.fx.Node]:
    """A node of ``graph`` whose value is ``value``: ``made`` (the node that computed it) while
    it is in the graph, else one with the same expression, else new nodes computing it from
    the placeholders' sizes; None when the expression is not made of input sizes."""
    if made is not None and _is_live(made, graph):
        return made
    expr = _expr(value)
    if expr is None:
        return None
    for node in graph.nodes:
        if node.op != "output" and _expr(node.meta.get("val")) == expr:
            return node
    dims: dict[Any, tuple[torch.fx.Node, int, torch.SymInt]] = {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for ph in placeholders:
        val = ph.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    dims.setdefault(size.node.expr, (ph, d, size))
        elif isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol):
            dims.setdefault(val.node.expr, (ph, -1, val))
    if not expr.free_symbols <= set(dims):
        return None
    anchor = next((n for n in graph.nodes if n.op != "placeholder"), None)
    with graph.inserting_before(anchor):
        built = _build(graph, expr, dims)
    return built[0] if built is not None and isinstance(built[0], torch.fx.Node) else None


def _new(graph: torch.fx.Graph, target: Any, args: tuple, val: Any) -> torch.fx.Node:
    node = graph.call_function(target, args)
    node.meta.update(val=val, stack_trace=None, nn_module_stack={}, source_fn_stack=[])
    return node


def _build(graph: torch.fx.Graph, expr: Any, dims: dict) -> Optional[tuple[Any, Any]]:
    """(node or int, its value) computing ``expr``, or None for a form not handled."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Symbol:
        ph, d, size = dims[expr]
        if d < 0:
            return ph, size
        return _new(graph, torch.ops.aten.sym_size.int, (ph, d), size), size
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_build(graph, a, dims) for a in expr.args]
        if any(p is None for p in parts):
            return None
        op = operator.add if isinstance(expr, sympy.Add) else operator.mul
        (node, val), rest = parts[0], parts[1:]
        for other, other_val in rest:
            val = op(val, other_val)
            node = _new(graph, op, (node, other), val)
        return node, val
    if type(expr).__name__ == "FloorDiv" and len(expr.args) == 2:
        parts = [_build(graph, a, dims) for a in expr.args]
        if any(p is None for p in parts):
            return None
        val = parts[0][1] // parts[1][1]
        return _new(graph, operator.floordiv, (parts[0][0], parts[1][0]), val), val
    return None


__all__ = ["size_node"]
