"""Shape guards raised inside one branch of a ``cond`` hold only under its predicate.

When ``torch.cond(x.shape[0] > 4, t, f, ...)`` is captured, both branches are
traced with the same symbolic operands. A guard that the false branch raises
(``if x.shape[0] <= 4`` re-checked inside it, or ``x[:4]`` asking whether the
size reaches 4) is only needed for the sizes that take the false branch.
Recorded as it is, it would constrain the whole program as if both branches
ran: a dynamic dim would be narrowed, or refused with a constraint violation,
for no reason.

:func:`scoped` makes a ``ShapeEnv`` reason under the branch's predicate: the
predicate's symbol gets the narrower range while the branch is traced (so
``x[:4]`` under ``s > 4`` needs no guard at all), and what the branch added
(guards, replacements, narrowed ranges) is taken back at the end and raised
again as the implication ``not predicate or guard`` (:func:`raise_guard`).
An implication on one symbol becomes that symbol's range: the largest
interval around the example's value on which it holds (solved by
:mod:`.symbol_intervals`). One over several
symbols stays a guard, checked against the spec or asserted at run time.

What cannot be scoped (a tensor predicate, a predicate over several symbols
that is not an interval of one) is left as torch records it: sound, maybe
narrower than needed.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import sympy
from torch.fx.experimental.symbolic_shapes import ShapeGuard

from ...torch_private import shapes
from ...torch_private.shapes import (
    example_values,
    replacement_locations,
    replacements,
    symbol_range_locations,
    symbol_ranges,
)
from ...torch_private.symbolic import ValueRanges, int_oo
from .symbol_intervals import interval_around, solve_for

# -- raising a guard in a ShapeEnv ------------------------------------------

def _bump(env: Any) -> None:
    """Invalidate the ShapeEnv's caches after its ranges, replacements or values were edited."""
    shapes.forget_derived_knowledge(env)


def raise_guard(env: Any, guard: Any, sloc: Any, unless: Any = None) -> None:
    """Require ``guard`` of every input the program accepts, or only of those where
    ``unless`` is false (the guard of a branch that runs when ``not unless``).

    An implication over one symbol becomes that symbol's range (the piece around
    its value). One over several symbols is kept as a guard: the constraint check
    tests it against a declared spec, and over ``Dim.AUTO`` dims it becomes a
    runtime assert (``dynamic.ranges.defer_relations``).
    """
    expr = env.simplify(guard if unless is None else sympy.Or(unless, guard))
    if expr is sympy.true:
        return
    static = shapes.evaluate_statically(env, expr)
    if static is not None and bool(static):
        return
    syms = expr.free_symbols
    sym = next(iter(syms)) if len(syms) == 1 else None
    if sym is not None and sym in symbol_ranges(env) and sym in example_values(env):
        vr, example = symbol_ranges(env)[sym], example_values(env)[sym]
        value = min(max(example, vr.lower), vr.upper)  # in a branch the example skips: the nearest value
        pieces = solve_for(expr, sym, vr.lower, vr.upper)
        piece = interval_around(pieces, value) if pieces is not None else None
        if piece is not None and piece[0] <= value <= piece[1]:
            lo, hi = piece
            if lo == hi == example:  # a specialization (elsewhere a range of one value: the
                # example's own sizes would contradict a constant)
                shapes.replace_symbol(env, sym, sympy.Integer(lo), "graphcap: guard of a cond branch")
                replacement_locations(env)[sym] = sloc
            elif (lo, hi) != (vr.lower, vr.upper):
                shapes.narrow_range(env, sym, lo, hi, sloc)
            else:
                return  # the range already says it
            _bump(env)
            return
        if unless is not None:  # no piece holds the example's value: require the guard itself
            raise_guard(env, guard, sloc)
            return
    shapes.refine_from_relation(env, expr)
    shapes.guards(env).append(ShapeGuard(expr, sloc, size_oblivious=False))
    _bump(env)


# -- a scope ----------------------------------------------------------------

@dataclass
class _Snapshot:
    """What tracing a branch may change in a ShapeEnv, to take it back."""

    env: Any
    symbols: set = field(init=False)
    guards: int = field(init=False)
    var_to_range: dict = field(init=False)
    var_to_range_sloc: dict = field(init=False)
    replacements: dict = field(init=False)
    replacements_slocs: dict = field(init=False)
    axioms: dict = field(init=False)
    cache: dict = field(init=False)
    assumed: dict = field(init=False)

    def __post_init__(self) -> None:
        env = self.env
        self.symbols = set(symbol_ranges(env))
        self.guards = len(shapes.guards(env))
        self.var_to_range = dict(symbol_ranges(env))
        self.var_to_range_sloc = {k: copy.copy(v) for k, v in symbol_range_locations(env).items()}
        self.replacements = dict(replacements(env))
        self.replacements_slocs = dict(replacement_locations(env))
        self.axioms = dict(shapes.axioms(env))
        self.cache = shapes.fake_cache(env)
        self.assumed = self.var_to_range

    def changes(self) -> list[tuple[Any, Any]]:
        """(guard expression, source location) for everything learned about older symbols."""
        env, out = self.env, []
        for g in shapes.guards(env)[self.guards:]:
            if g.expr.free_symbols & self.symbols:
                out.append((g.expr, g.sloc))
        for s in self.symbols:
            new = replacements(env).get(s)
            if new is not None and new != self.replacements.get(s):
                out.append((sympy.Eq(s, new), replacement_locations(env).get(s)))
            old, now = self.assumed[s], symbol_ranges(env).get(s, self.assumed[s])
            slocs = symbol_range_locations(env).get(s)
            if now.lower != old.lower:
                out.append((sympy.Ge(s, now.lower), slocs.lower if slocs else None))
            if now.upper != old.upper and now.upper != int_oo:
                out.append((sympy.Le(s, now.upper), slocs.upper if slocs else None))
        return out

    def restore(self) -> None:
        """Forget what the branch learned about older symbols; keep what it made (its own symbols)."""
        env = self.env
        shapes.guards(env)[self.guards:] = [g for g in shapes.guards(env)[self.guards:]
                                            if not g.expr.free_symbols & self.symbols]
        for saved, current in ((self.var_to_range, symbol_ranges(env)),
                               (self.var_to_range_sloc, symbol_range_locations(env)),
                               (self.replacements, replacements(env)),
                               (self.replacements_slocs, replacement_locations(env))):
            for s in [s for s in current if s in self.symbols and s not in saved]:
                del current[s]
            current.update(saved)
        shapes.axioms(env).clear()
        shapes.axioms(env).update(self.axioms)
        shapes.set_fake_cache(env, self.cache)
        _bump(env)


def _assume(env: Any, cond: Any) -> Optional[tuple[Any, Any]]:
    """Narrow the range of the condition's symbol to where it holds, for the scope's duration.

    Returns (symbol, a value in the narrowed range) when the example's own value lies outside
    it (the example takes the other branch), else None."""
    syms = cond.free_symbols
    if len(syms) != 1:
        return None
    (sym,) = syms
    vr = symbol_ranges(env).get(sym)
    if vr is None or sym not in example_values(env):
        return None
    pieces = solve_for(cond, sym, vr.lower, vr.upper)
    if not pieces or len(pieces) != 1 or pieces[0] == (vr.lower, vr.upper):
        return None
    lo, hi = pieces[0]
    symbol_ranges(env)[sym] = ValueRanges(lo, hi)
    example = example_values(env)[sym]
    if lo <= example <= hi:
        return None
    return sym, (lo if example < lo else hi)


@contextlib.contextmanager
def _example_elsewhere(env: Any, sym: Any, stand_in: Any) -> Iterator[None]:
    """Reason about a branch the example does not take.

    The example's tensors keep their sizes (each symbolic size carries its
    example value), so Python decisions in the branch that its range does not
    settle follow the example, and are guarded. What the ShapeEnv derives from
    the example value of the predicate's symbol (a narrowed range must hold
    it, a range of one value must be it) is derived, for the branch, from the
    value of the branch's range nearest to it instead, and not size-obliviously
    (which checks what a range settles against the example value).
    """
    example = example_values(env)[sym]
    example_values(env)[sym] = sympy.Integer(stand_in)
    _bump(env)
    try:
        with shapes.backed_size_oblivious(False):
            yield
    finally:
        example_values(env)[sym] = example
        _bump(env)


@contextlib.contextmanager
def scoped(env: Any, cond: Any, on_exit: Optional[Callable[[Any, list], None]] = None) -> Iterator[None]:
    """Trace under ``cond``; afterwards raise ``not cond or g`` for each guard ``g`` learned.

    ``on_exit(cond, [(g, sloc), ...])`` receives what was learned instead of it being
    raised in ``env`` (a ShapeEnv that is not the program's own hands it on to the program's).
    """
    snapshot = _Snapshot(env)
    shapes.set_fake_cache(env, {})
    elsewhere = _assume(env, cond)
    snapshot.assumed = dict(symbol_ranges(env))  # what the branch learns is measured from here
    _bump(env)
    settings = _example_elsewhere(env, *elsewhere) if elsewhere else contextlib.nullcontext()
    try:
        with settings:
            yield
    except BaseException:
        snapshot.restore()  # the capture failed: its error is what matters, not what it learned
        raise
    else:
        learned = snapshot.changes()
        snapshot.restore()
        if on_exit is not None:
            on_exit(cond, learned)
        else:
            for guard, sloc in learned:
                raise_guard(env, guard, sloc, unless=sympy.Not(cond))


def branch_condition(pred: Any, branch: bool) -> Optional[Any]:
    """The sympy condition under which ``branch`` of a cond on ``pred`` runs, if ``pred`` is symbolic."""
    node = getattr(pred, "node", None)
    expr = getattr(node, "expr", None)
    if expr is None or getattr(node, "shape_env", None) is None:
        return None
    expr = node.shape_env.simplify(expr)
    if not isinstance(expr, sympy.logic.boolalg.Boolean) or expr in (sympy.true, sympy.false):
        return None
    return expr if branch else sympy.Not(expr)
