"""Sizes the program records below 0 where a Dim takes 0 or 1.

graphcap keeps sizes 0 and 1 symbolic, and torch's shape formulas answer
some of their questions for the general size (size-oblivious: as if every
size were 2 or more). Most answers hold at 0 and 1 too; some do not. A slice
``x[1:1 + n]`` clamps its start to the size only when ``1 <= m`` could fail,
so the size it records is ``Min(m, n + 1) - 1``: -1 at ``m = 0``, where
eager's is 0. ``module()`` runs real kernels and is right there, but a
consumer that sizes its buffers from the program's symbolic sizes
(AOTInductor, ExecuTorch's memory planning) would be given -1.

So, once the program is built, every symbolic size of its nodes is checked
to be 0 or more over the program's ranges. A size below 0 only where one Dim
takes 0 or 1 (and 0 or more from 2 up) takes those sizes out of the program:
a ``Dim.AUTO`` / ``Dim.DYNAMIC`` range is cut (``module()`` then refuses them
before computing, as for any size outside the range); a declared ``Dim`` is a
constraint violation whose suggested fix raises its ``min``. Sizes below 0
elsewhere in the range are not of this kind and are left alone.
"""
from __future__ import annotations

import linecache
import logging
from typing import Any, Iterator, Optional

import sympy
import torch

from ..torch_private import pytree
from ..torch_private.symbolic import ValueRanges, bound_sympy
from .assert_messages import innermost_frame
from .guard_words import DimNamer, constraint_violation, dim_fix, finite_int, range_words
from .range_decide import holds_over_ranges
from .size_one_checks import cut_off
from .symbols import RootSymbol, SymbolicInputs

log = logging.getLogger("graphcap.dynamic")


def check(ep: Any, inputs: Optional[SymbolicInputs]) -> None:
    """Cut hints' sizes 0/1 where the program's sizes go below 0; raise for a declared Dim."""
    if inputs is None or not inputs.roots:
        return
    ranges = dict(ep.range_constraints)
    roots = _roots_by_program_symbol(inputs, ranges)
    if not any(ranges[s].lower <= 1 for s in roots):
        return
    lowest_kept: dict[Any, int] = {}  # symbol -> the smallest size the program's sizes allow
    first_seen: dict[Any, tuple[torch.fx.Node, Any, int]] = {}
    for node, expr in _symbolic_sizes(ep.graph_module):
        for sym, value in _small_sizes_below_zero(expr, ranges, roots):
            lowest_kept[sym] = max(lowest_kept.get(sym, 0), value + 1)
            first_seen.setdefault(sym, (node, expr, value))
    problems, fixes = [], []
    named = DimNamer(list(roots.values()))
    for sym, lowest in lowest_kept.items():
        root, (node, expr, value) = roots[sym], first_seen[sym]
        if root.hint is not None:
            log.info("graphcap: %s below %d is left out of the program's range: node %s's size %s is "
                     "negative at %d", root.name, lowest, node.name, expr, value)
            cut_off(ep, sym, lowest - 1)
            continue
        problems.append(
            f"Not all values of {root.name} in the specified range {range_words(root.name, ranges[sym])} give "
            f"the program sizes of 0 or more: node {node.name} ({node.target}){_user_line(node)} has size "
            f"{named(expr)}, which is {expr.xreplace({sym: value})} at {root.name} = {value} (torch's shape "
            f"formula answered for the general size there; eager's size is never negative).")
        fixes.append(dim_fix(root.name, lowest, finite_int(ranges[sym].upper)))
    if problems:
        names = [roots[s].name for s in lowest_kept if roots[s].hint is None]
        raise constraint_violation(names, problems, fixes, ".")


def _roots_by_program_symbol(inputs: SymbolicInputs, ranges: dict) -> dict[Any, RootSymbol]:
    """Each symbol of the program's ranges that stands for a Dim of the spec, with that Dim."""
    env = inputs.shape_env
    out: dict[Any, RootSymbol] = {}
    for r in inputs.roots:
        sym = env.replace(r.symbol) if env is not None else r.symbol
        if isinstance(sym, sympy.Symbol) and sym in ranges:
            if sym not in out or (out[sym].hint is not None and r.hint is None):
                out[sym] = r  # a declared Dim speaks for a symbol a hint shares with it
    return out


def _symbolic_sizes(gm: torch.fx.GraphModule) -> Iterator[tuple[torch.fx.Node, Any]]:
    """Each distinct symbolic size expression of the tensors the graphs (subgraphs too) compute,
    with the first node that has it; sizes that are one symbol cannot be negative in range."""
    seen: set[Any] = set()
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            for value in pytree.tree_leaves(node.meta.get("val")):
                if not isinstance(value, torch.Tensor):
                    continue
                for size in value.shape:
                    if not isinstance(size, torch.SymInt):
                        continue
                    expr = size.node.expr
                    if expr in seen or isinstance(expr, sympy.Symbol) or expr.is_number:
                        continue
                    seen.add(expr)
                    yield node, expr


def _small_sizes_below_zero(expr: Any, ranges: dict, roots: dict) -> list[tuple[Any, int]]:
    """``(symbol, value)`` pairs, value 0 or 1, at which ``expr`` goes below 0 while it is 0 or
    more wherever the Dims it depends on are 2 or more; empty when it is never below 0 or also
    below 0 from 2 up (not a general-size answer, whatever it is)."""
    if not expr.free_symbols <= set(ranges):
        return []
    box = {s: ranges[s] for s in expr.free_symbols}
    try:
        if bound_sympy(expr, box).lower >= 0:
            return []
    except Exception:  # an expression the range analysis cannot bound: nothing to say of it
        return []
    small = [s for s in box if s in roots and box[s].lower <= 1 and box[s].upper >= 2]
    if not small:
        return []
    # size symbols are sympy-positive, which would let sympy "prove" Min(m, n + 1) - 1 >= 0 on its
    # own: decide over plain integers, the ranges saying what each can be
    plain = {s: sympy.Symbol(s.name, integer=True) for s in box}
    non_negative = sympy.Ge(expr.xreplace(plain), 0)
    from_two = {plain[s]: ValueRanges(2, vr.upper) if s in small else vr for s, vr in box.items()}
    if not holds_over_ranges(non_negative, from_two):
        return []
    found = []
    for s in small:
        for value in range(int(box[s].lower), 2):
            if not holds_over_ranges(non_negative, {**from_two, plain[s]: ValueRanges(value, value)}):
                found.append((s, value))
    return found


def _user_line(node: torch.fx.Node) -> str:
    """`` at file:line: code`` of the innermost frame of the node's stack trace, or ''."""
    frame = innermost_frame(node.meta.get("stack_trace"))
    if frame is None:
        return ""
    file, line, _ = frame
    return f" at {file}:{line}: {linecache.getline(file, line).strip()}"
