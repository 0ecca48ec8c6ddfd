"""Fake values moved to a ShapeEnv of their own: programs derived from one another stay independent.

A program's symbols live in the ShapeEnv of the fake mode its ``meta['val']``
values belong to, and the ShapeEnv is where every later question about them is
answered and remembered: a consumer's pass that asks whether the batch is 2
(ExecuTorch's, AOTInductor's, a user's) makes it *be* 2 there, for every
SymInt of that ShapeEnv. Were a copy of a program, or the program
``run_decompositions`` returns, to share its original's ShapeEnv, one
consumer's work would silently change what the other program accepts and
computes. So ``run_decompositions`` retraces on inputs moved to a copy of the
ShapeEnv, and ``copy.deepcopy(ep)`` moves every value of its graph to one.

:class:`ValueMover` maps values of the old fake mode to equal values of the
new one (same sizes and strides as expressions over the same symbols, dtype,
device, ``requires_grad``), one new value per old one.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import torch
import torch.fx

from .torch_private import pytree
from .torch_private.dispatch import is_traceable_wrapper_subclass
from .torch_private.fake import FakeTensor, FakeTensorMode, fake_with_layout, tracing_fake_mode
from .torch_private.real_values import carry_real_tensor
from .torch_private.shapes import copy_shape_env, example_values, new_shape_env, symbol_ranges
from .tracing_lock import TRACING_LOCK


def fake_mode_of_graph(gm: torch.fx.GraphModule) -> Optional[FakeTensorMode]:
    """The fake mode of the first fake tensor among the graph's (then its subgraphs') values, or None."""
    for sub in gm.modules():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            for v in pytree.tree_leaves(node.meta.get("val")):
                mode = getattr(v, "fake_mode", None)  # a fake tensor's (or a subclass wrapping fakes)
                if isinstance(mode, FakeTensorMode):
                    return mode
    return None


def own_fake_mode(old: Optional[FakeTensorMode]) -> FakeTensorMode:
    """A fake mode over a copy of ``old``'s ShapeEnv (a fresh ShapeEnv when there is none)."""
    env = getattr(old, "shape_env", None)
    new_env = copy_shape_env(env) if env is not None else new_shape_env()
    return tracing_fake_mode(shape_env=new_env, allow_non_fake_inputs=True, export=True)


class ValueMover:
    """Maps values of one fake mode to equal values of ``mode`` (tensors, symbolic scalars, and
    lists, tuples and dicts of them); anything else is kept as it is."""

    def __init__(self, mode: FakeTensorMode, hints: Optional[dict] = None):
        self.mode = mode
        self.env: Any = mode.shape_env
        self._memo: dict[int, Any] = {}
        self._keep: list[Any] = []  # the old values, so that ids in the memo stay theirs
        self._symints: dict[Any, Any] = {}
        # example values given to some symbols instead of their own (general_hints): the values made
        # here carry hints computed from them, and the new ShapeEnv answers with them too
        self._hints = dict(hints or {})
        if self._hints:
            example_values(self.env).update(self._hints)

    def __call__(self, value: Any) -> Any:
        known = self._memo.get(id(value))
        if known is not None:
            return known
        new = self._move(value)
        if new is not value:
            self._memo[id(value)] = new
            self._keep.append(value)
        return new

    def _move(self, value: Any) -> Any:
        if isinstance(value, torch.SymInt):
            expr = value.node.expr
            made = self._symints.get(expr)
            if made is None:  # one SymInt per expression: building one costs symbolic arithmetic
                made = self._symints[expr] = self.env.create_symintnode(expr, hint=self._hint_of(value))
            return made
        if isinstance(value, torch.SymFloat):
            return self.env.create_symfloatnode(value.node.expr, hint=value.node.hint)
        if isinstance(value, torch.SymBool):
            return self.env.create_symboolnode(value.node.expr)
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, tuple):
            moved = [self(v) for v in value]
            if all(a is b for a, b in zip(moved, value)):
                return value
            return type(value)(*moved) if hasattr(value, "_fields") else type(value)(moved)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        if is_traceable_wrapper_subclass(t):
            wrapper: Any = t  # a traceable wrapper subclass: flattened to its inner tensors
            names, context = wrapper.__tensor_flatten__()
            inner = {name: self(getattr(t, name)) for name in names}
            new = type(wrapper).__tensor_unflatten__(inner, context, self._sizes(t.shape), self._sizes(t.stride()))
        elif isinstance(t, FakeTensor):
            new = fake_with_layout(self.mode, self._sizes(t.shape), self._sizes(t.stride()),
                                   self(t.storage_offset()), t.dtype, t.device, t.requires_grad)
            carry_real_tensor(t, new)  # (a draft export's values keep the data they were traced with)
            return new
        else:
            return t  # a real tensor (a constant's value) belongs to no fake mode
        if t.requires_grad and (t.is_floating_point() or t.is_complex()):
            with self.mode:
                new.requires_grad_(True)
        return new

    def _sizes(self, sizes: Any) -> list:
        return [self(s) for s in sizes]

    def _hint_of(self, value: torch.SymInt) -> Any:
        expr = value.node.expr
        if not self._hints or not (expr.free_symbols & self._hints.keys()):
            return value.node.hint
        hinted = expr.xreplace(example_values(self.env))
        return int(hinted) if hinted.is_Integer else value.node.hint


def general_hints(env: Any, ranges: dict, conditions: Iterable[Any] = ()) -> dict:
    """For each symbol of ``ranges`` whose example is 0 or 1 and whose range goes past 1: the
    example value 2, or the range's lowest value above 1.

    A retrace that asks a size question its kernels answer from the example (a reshape deciding
    between a view and a copy, a decomposition's special case for size 1) then takes the path of
    the general size, as it does for a program exported at size 2, instead of one valid only at
    the example's 0 or 1. ``conditions`` (the program's runtime asserts) must hold for the new
    examples as they do for the old: a symbol tied to another (``Eq(x, y - 4)``) keeps its own
    example, as do the others of a condition the new ones would break."""
    import sympy
    values = example_values(env)
    out = {}
    for sym, vr in ranges.items():
        if not getattr(sym, "is_Symbol", False) or sym not in values or int(values[sym]) not in (0, 1):
            continue
        # is_Integer, not is_finite: torch's int_oo (an unbounded Dim.AUTO range) calls itself finite
        lowest = max(2, int(vr.lower)) if vr.lower.is_Integer else 2
        if vr.upper.is_Integer and int(vr.upper) < lowest:
            continue
        out[sym] = sympy.Integer(lowest)
    conditions = [c for c in conditions if isinstance(c, sympy.Basic)]
    while out:
        broken = next((c for c in conditions if c.free_symbols & out.keys()
                       and c.xreplace({**values, **out}) is not sympy.true), None)
        if broken is None:
            break
        for sym in broken.free_symbols:
            out.pop(sym, None)
    return out


def move_graph_values(gm: torch.fx.GraphModule, mover: ValueMover) -> None:
    """Replace, in place, every node's ``val`` and ``tensor_meta`` (the graph's and its subgraphs')
    by the mover's equal values."""
    for sub in gm.modules():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            if "val" in node.meta:
                node.meta["val"] = mover(node.meta["val"])
            meta = node.meta.get("tensor_meta")
            if meta is not None:
                node.meta["tensor_meta"] = mover(meta)


def give_graph_own_shape_env(gm: torch.fx.GraphModule) -> None:
    """Move the values of ``gm`` (a copy of another program's graph, whose node metadata it still
    shares) to a fake mode over a copy of their ShapeEnv.

    Under ``TRACING_LOCK``: making symbolic values consults the tracer torch's ``make_fx`` keeps
    process-wide, so a ``module()`` or deep copy in one thread must not overlap another's export."""
    old = fake_mode_of_graph(gm)
    if old is None or old.shape_env is None or not symbol_ranges(old.shape_env):
        return  # no symbol to settle: nothing a pass on the copy could change for the original
    with TRACING_LOCK:
        move_graph_values(gm, ValueMover(own_fake_mode(old)))
