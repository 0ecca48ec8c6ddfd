"""Turn a matched spec into symbolic fake inputs.

One ``ShapeEnv`` symbol per root ``Dim`` (shared by every dimension that uses
the same Dim), derived dims as expressions of their root (``s0 + 1``), one
fresh symbol per ``Dim.AUTO`` / ``Dim.DYNAMIC`` dimension. Each symbol starts
with exactly the declared range, and sizes 0 and 1 are not specialized: a
dynamic dimension whose example size is 1 stays a symbol over its range (the
guard check reports any code that then needs it to be 1).

Fake tensors are made by ``FakeTensorMode.from_tensor`` with a symbolic
context whose source-to-symbol cache is filled in advance, so the symbols are
ours and the rest (strides, storage, views) is the engine's.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    StatefulSymbolicContext,
    StrictMinMaxConstraint,
    SubclassSymbolicContext,
)

from ..errors import DynamicSpecError
from ..torch_private import shapes
from ..torch_private.dispatch import backend_kernels_off, is_traceable_wrapper_subclass
from ..torch_private.fake import FakeTensorMode
from ..torch_private.shapes import GuardSource, Source, guards
from ..torch_private.symbolic import ValueRanges, int_oo
from ..user_frames import is_user_file
from .dims import INT_MAX, DerivedDim, Dim, DimHint
from .spec import IntSpec, LeafSpec


@dataclasses.dataclass(frozen=True)
class InputSource(Source):
    """Where an input lives, named as torch names export inputs (``L['x']['k']``).

    The name seeds the symbol's number, so graphcap's symbols are numbered as
    torch.export numbers them for the same input.
    """

    path: str

    @property
    def _name_template(self) -> str:
        return self.path

    @property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL

    def is_ephemeral(self) -> bool:
        return False


@dataclass
class DimUse:
    """One input dimension (or Python int, ``dim`` None) marked dynamic: where it is and its spec."""

    leaf: int
    dim: Optional[int]
    path: str  # "*args[0].shape[1]", or "*args[1]" for an int
    spec: Any  # Dim, DerivedDim or DimHint
    size: int
    source: str = ""  # torch's name of the size: "L['x'].size()[1]", or "L['n']" for an int
    arg_path: str = ""  # by argument name: "['x'].shape[1]", or "['n']"

    @property
    def is_int(self) -> bool:
        return self.dim is None


@dataclass
class RootSymbol:
    """A symbol of the program and the spec entry it stands for.

    For a hint (``Dim.AUTO`` / ``Dim.DYNAMIC``) ``declared`` is the user's
    bounds; the symbol is traced over the whole range a size (or int) can
    take, and the range the trace needs is then intersected with the bounds
    (``graphcap.dynamic.hints``), as torch.export does.
    """

    symbol: sympy.Symbol
    name: str  # the Dim's name, or the input path for a hint
    declared: ValueRanges
    uses: list[DimUse] = field(default_factory=list)
    hint: Optional[DimHint] = None  # set for Dim.AUTO / Dim.DYNAMIC
    value: int = 0


@dataclass
class SymbolicInputs:
    """The fake inputs and the bookkeeping the guard check needs."""

    fakes: list[Any]
    roots: list[RootSymbol]
    derived: dict[sympy.Expr, ValueRanges]  # derived size expression -> its declared range
    shape_env: Any = None
    first_program_guard: int = 0  # guards before this index came from making the fake inputs
    # a declared Dim's range narrowed by the bounds of a hint the program equates it with
    # (Dim.AUTO(max=6) on a size the program finds equal to Dim('b', max=10))
    narrowed_by_hints: dict = field(default_factory=dict)
    # user guards excluding size 0 or 1 of a Dim, confirmed on the built program (size_one_checks)
    pending_size_checks: list = field(default_factory=list)

    def by_symbol(self) -> dict[sympy.Symbol, RootSymbol]:
        return {r.symbol: r for r in self.roots}


def _vr(lo: Any, hi: Any) -> ValueRanges:
    return ValueRanges(lo, int_oo if hi >= INT_MAX else hi)


def _range_str(lo: Any, hi: Any) -> str:
    return f"[{lo}, {'int_oo' if hi >= INT_MAX else hi}]"


def _solve_root(d: DerivedDim, size: int, path: str) -> int:
    r = sympy.Symbol("r", integer=True)
    sols = [s for s in sympy.solve(sympy.Eq(sympy.sympify(d.fn(r)), size), r) if s.is_integer]
    if len(sols) != 1:
        raise DynamicSpecError(
            f"Expected shape = {size} of input Tensor to be of the form {d.__name__}, where "
            f"{d.root.__name__} is an integer: the example size {size} at {path} is not {d.__name__} for "
            f"any integer {d.root.__name__}.",
            where=path, fix=f"Change the example input so that its size there has the form {d.__name__}.")
    return int(sols[0])


def _size_name(tensor_name: str, dim: int) -> str:
    """The name the engine gives the source of a tensor's size (the key of its symbol cache)."""
    return f"{tensor_name}.size()[{dim}]"


def torch_style_name(arg_path: str) -> str:
    """``['x'][0]`` (the spec walker's path) as torch's source name ``L['x'][0]``."""
    return "L" + arg_path


def _uses(leaves: list[Any], specs: list[LeafSpec], input_paths: list[str], source_names: list[str],
          arg_paths: list[str]) -> list[DimUse]:
    uses: list[DimUse] = []
    for i, (leaf, spec) in enumerate(zip(leaves, specs)):
        if isinstance(spec, IntSpec):
            uses.append(DimUse(i, None, input_paths[i], spec.dim, int(leaf), source_names[i], arg_paths[i]))
            continue
        for dim, d in sorted((spec or {}).items()):
            uses.append(DimUse(i, dim, f"{input_paths[i]}.shape[{dim}]", d, int(leaf.shape[dim]),
                               _size_name(source_names[i], dim), f"{arg_paths[i]}.shape[{dim}]"))
    return uses


def _hint_trace_range(use: DimUse) -> tuple[Any, Any]:
    """The range a hint's symbol is traced over: every size (or every int); the user's bounds
    are applied to what the trace finds."""
    return (-int_oo if use.is_int else 0), INT_MAX


def build(mode: FakeTensorMode, leaves: list[Any], specs: list[LeafSpec], input_paths: list[str],
          source_names: list[str], arg_paths: Optional[list[str]] = None,
          numbered_as: Optional[list[str]] = None, assumptions: Sequence[tuple] = ()) -> SymbolicInputs:
    """Fake inputs for ``leaves`` following ``specs`` (see ``graphcap.dynamic.spec``).

    ``numbered_as`` names, per leaf, the source a symbol's number is taken from where that is not
    the leaf's own name (strict mode: torch numbers by the leaf's flat position); ``assumptions``
    are a ShapesSpec's (``shape_var_specs.assumptions_of``)."""
    env = mode.shape_env
    uses = _uses(leaves, specs, input_paths, source_names, arg_paths or [p[1:] for p in source_names])

    # Root values: from a direct use, else solved from a derived one; all must agree.
    groups: dict[str, list[DimUse]] = {}
    for u in uses:
        if isinstance(u.spec, Dim):
            root = u.spec.root if isinstance(u.spec, DerivedDim) else u.spec
            groups.setdefault(root.__name__, []).append(u)

    exprs: dict[tuple[int, int], sympy.Expr] = {}
    roots: list[RootSymbol] = []
    derived: dict[sympy.Expr, ValueRanges] = {}

    def new_symbol(value: int, use: DimUse, lo: Any, hi: Any) -> sympy.Symbol:
        source = InputSource(use.source)
        # An int input ranges over [0, oo] as in torch.export, unless its example is negative:
        # then it ranges below 0 too (torch cannot export that example at all).
        positive = None if use.is_int and value < 0 else True
        numbering = (shapes.symbols_numbered_as(env, source_names[use.leaf], numbered_as[use.leaf])
                     if numbered_as else contextlib.nullcontext())
        with numbering:
            return env.create_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC,
                                     constraint_dim=StrictMinMaxConstraint(warn_only=False, vr=_vr(lo, hi)),
                                     positive=positive, do_not_specialize_zero_one=True)

    for name, group in groups.items():
        direct = [u for u in group if not isinstance(u.spec, DerivedDim)]
        root_dim = direct[0].spec if direct else group[0].spec.root
        values = []
        for u in group:
            v = _solve_root(u.spec, u.size, u.path) if isinstance(u.spec, DerivedDim) else u.size
            values.append((v, u))
            lo, hi = u.spec.min, u.spec.max
            if not lo <= u.size <= hi:
                raise DynamicSpecError(
                    f"The example input has size {u.size} at {u.path}, but its spec {u.spec!r} allows "
                    f"{_range_str(lo, hi)}: {u.size} not in range {_range_str(lo, hi)}.",
                    where=u.path,
                    fix=f"Change the example input, or widen the range, e.g. {_dim_src(root_dim, u, v)}.")
        first_v, first_u = values[0]
        for v, u in values[1:]:
            if v != first_v:
                raise DynamicSpecError(
                    f"{first_u.path} and {u.path} use the same Dim {name!r}, so their sizes must agree, but "
                    f"the example inputs give {name} = {first_v} and {name} = {v}.",
                    where=u.path,
                    fix=f"Make the example sizes consistent, or give {u.path} its own Dim.")
        if not root_dim.min <= first_v <= root_dim.max:
            raise DynamicSpecError(
                f"The example inputs give {name} = {first_v} (from {first_u.path}), but {root_dim!r} allows "
                f"{_range_str(root_dim.min, root_dim.max)}: {first_v} not in range "
                f"{_range_str(root_dim.min, root_dim.max)}.", where=first_u.path,
                fix="Change the example input or widen the Dim's range.")
        sym = new_symbol(first_v, (direct or group)[0], root_dim.min, root_dim.max)
        roots.append(RootSymbol(sym, name, _vr(root_dim.min, root_dim.max), list(group), value=first_v))
        for u in group:
            if isinstance(u.spec, DerivedDim):
                expr = sympy.expand(sympy.sympify(u.spec.fn(sym)))
                exprs[(u.leaf, u.dim)] = expr
                derived[expr] = _vr(u.spec.min, u.spec.max)
            else:
                exprs[(u.leaf, u.dim)] = sym

    for u in uses:
        if isinstance(u.spec, DimHint):
            lo, hi = _hint_trace_range(u)
            sym = new_symbol(u.size, u, lo, hi)
            user_lo = u.spec.min if u.spec.min is not None else lo
            user_hi = u.spec.max if u.spec.max is not None else hi
            roots.append(RootSymbol(sym, u.path, _vr(user_lo, user_hi), [u], hint=u.spec, value=u.size))
            exprs[(u.leaf, u.dim)] = sym

    unbacked = _unbacked_sizes(env, uses, assumptions)
    exprs.update(unbacked)

    fakes = []
    for i, leaf in enumerate(leaves):
        if isinstance(specs[i], IntSpec):  # a dynamic Python int: a SymInt input
            expr = exprs[(i, None)]
            fakes.append(env.create_symintnode(expr, hint=int(leaf), source=InputSource(source_names[i])))
            continue
        if not isinstance(leaf, torch.Tensor):
            fakes.append(leaf)
            continue
        if not specs[i]:
            fakes.append(mode.from_tensor(leaf, static_shapes=True))
            continue
        source = InputSource(source_names[i])
        ctx = _symbolic_context(leaf, source_names[i], {d: e for (li, d), e in exprs.items() if li == i}, env)
        fakes.append(mode.from_tensor(leaf, source=source, symbolic_context=ctx))
    return SymbolicInputs(fakes, roots, derived, env, first_program_guard=len(guards(env)))


def _unbacked_sizes(env: Any, uses: list[DimUse], assumptions: Sequence[tuple] = ()
                    ) -> dict[tuple[int, Optional[int]], Any]:
    """Sizes a ShapesSpec / ParamsSpec gives (``shape_var_specs.SpecSize``): unbacked symbols.

    One unbacked symbol per ``ShapeVar`` / ``IntVar``, its range asserted in the graph
    (``u0 >= 0`` for a ShapeVar, and its min / max); a size given by an expression of them
    (``B * 2``) is that expression, which ``module()`` checks before computing. Each of the
    ShapesSpec's ``assumptions`` (``B % 2 == 0``) is known to the trace and asserted in the graph."""
    from ..torch_private.user_specs import check as check_condition
    from .shape_var_specs import SpecSize, variable_range
    out: dict[tuple[int, Optional[int]], Any] = {}
    made: dict[int, Any] = {}  # id(IntVar) -> unbacked SymInt
    _example_meets_spec([u for u in uses if isinstance(u.spec, SpecSize)], assumptions)

    def symint_of(var: Any) -> Any:
        if id(var) not in made:
            u = env.create_unbacked_symint()
            lo, hi = variable_range(var)
            if lo is not None:
                check_condition(u >= lo)
            if hi is not None:
                check_condition(u <= hi)
            made[id(var)] = u
        return made[id(var)]

    for u in uses:
        if not isinstance(u.spec, SpecSize):
            continue
        subs = {sym: symint_of(var).node.expr for sym, var in u.spec.variables}
        # a derived size is the expression itself (y: f32[2*u0]): the trace knows the relation,
        # and module() checks the input's size against it before computing
        out[(u.leaf, u.dim)] = sympy.expand(u.spec.expr.xreplace(subs))
    for condition, variables, _ in assumptions:
        subs = {sym: symint_of(var).node.expr for sym, var in variables}
        check_condition(env.create_symboolnode(condition.xreplace(subs)))
    return out


def _example_meets_spec(uses: list[DimUse], assumptions: Sequence[tuple]) -> None:
    """Refuse a ShapesSpec / ParamsSpec the example inputs break: a size outside its ShapeVar's
    ``min`` / ``max``, a size that differs from the expression the spec gives it, an assumption
    the example sizes make false. The program asserts each of these, so it would refuse the very
    inputs it was exported with (torch exports such a program)."""
    from .shape_var_specs import variable_range
    values: dict[Any, int] = {}
    for u in uses:
        if isinstance(u.spec.expr, sympy.Symbol):
            var = u.spec.variables[0][1]
            lo, hi = variable_range(var)
            if (lo is not None and u.size < lo) or (hi is not None and u.size > hi):
                raise DynamicSpecError(
                    f"The example input has size {u.size} at {u.path}, but its spec {u.spec.text} allows "
                    f"{_range_str(lo if lo is not None else -int_oo, hi if hi is not None else int_oo)}.",
                    where=u.path, fix=f"Change the example input, or widen {u.spec.text}'s min / max.")
            values.setdefault(u.spec.expr, u.size)
    for u in uses:
        if not u.spec.expr.free_symbols <= set(values):
            continue
        expected = u.spec.expr.xreplace(values)
        if expected != u.size:
            raise DynamicSpecError(
                f"The example input has size {u.size} at {u.path}, but the spec gives it {u.spec.text} = "
                f"{expected} for these examples.", where=u.path,
                fix="Make the example sizes satisfy the spec's expressions, or give the size its own ShapeVar.")
    for condition, _, text in assumptions:
        if condition.free_symbols <= set(values) and condition.xreplace(values) is sympy.false:
            sizes = ", ".join(f"{u.spec.text} = {u.size}" for u in uses if isinstance(u.spec.expr, sympy.Symbol))
            raise DynamicSpecError(
                f"The example inputs break the ShapesSpec assumption {text} ({sizes}).",
                where="ShapesSpec.assumptions", fix="Change the example inputs so the assumption holds for them.")


def _symbolic_context(t: torch.Tensor, name: str, dim_exprs: dict[int, Any], env: Any) -> Any:
    """The engine's symbolic context for one input tensor: its dynamic dims get our symbols.

    A traceable wrapper subclass (``__tensor_flatten__``, e.g. a tensor holding two tensors)
    needs a subclass context with one context per inner tensor: an inner tensor of the outer
    shape shares the outer dims' symbols (its sizes are the same sizes); others stay static."""
    source = InputSource(name)
    common = dict(
        dynamic_sizes=[DimDynamic.DYNAMIC if d in dim_exprs else DimDynamic.STATIC for d in range(t.dim())],
        constraint_sizes=[None] * t.dim(), tensor_source=source,
        shape_env_to_source_to_symbol_cache={id(env): {_size_name(name, d): e for d, e in dim_exprs.items()}})
    if not is_traceable_wrapper_subclass(t):
        return StatefulSymbolicContext(**common)
    attrs, _ = type(t).__tensor_flatten__(t)
    inner = {}
    for attr in attrs:
        value = getattr(t, attr)
        if isinstance(value, torch.Tensor):
            shared = dim_exprs if tuple(value.shape) == tuple(t.shape) else {}
            inner[attr] = _symbolic_context(value, f"{name}.{attr}", shared, env)
    return SubclassSymbolicContext(**common, inner_contexts=inner)


def _dim_src(root: Dim, use: DimUse, value: int) -> str:
    lo = min(root.min, value)
    hi = max(root.max, value) if root.max < INT_MAX else None
    bounds = f"min={lo}" + (f", max={hi}" if hi is not None else "")
    return f"{root.__name__} = Dim({root.__name__!r}, {bounds})"


def prepare(forward: Any, args: tuple, kwargs: dict, dynamic_shapes: Any, mode: FakeTensorMode,
            leaves: list[Any], input_paths: list[str], strict: bool = False) -> SymbolicInputs:
    """Match ``dynamic_shapes`` to the inputs and build their symbolic fakes (the pipeline's step).

    Symbols are numbered as torch.export numbers them: from the argument's name
    (``L['x'].size()[0]`` gives s77), and in strict mode from the input's flat position
    (``L['flat_args'][0].size()[0]`` gives s6), so a program prints the symbols torch's
    program of the same mode prints. Guards and messages name the argument either way."""
    from .shape_var_specs import assumptions_of
    from .spec import match_spec
    specs, arg_paths = match_spec(forward, args, kwargs, dynamic_shapes)
    assumptions = assumptions_of(dynamic_shapes)
    env = mode.shape_env
    saved_summary = shapes.own_stack_summary(env)
    # the engine locates each new symbol's frame itself by asking torch's uninteresting_files(),
    # which imports torch.export's own tracing module and AOTAutograd on first use: locate it here instead
    shapes.set_stack_summary(env, _with_engine_frame(shapes.stack_summary(env)))
    try:
        numbered_as = [f"L['flat_args'][{i}]" for i in range(len(leaves))] if strict else None
        return build(mode, leaves, specs, input_paths, [torch_style_name(p) for p in arg_paths], arg_paths,
                     numbered_as, assumptions)
    finally:
        shapes.restore_stack_summary(env, saved_summary)


def _with_engine_frame(summary: Any) -> Any:
    """Wrap ``ShapeEnv._get_stack_summary``: when no frame is given, pass the innermost one outside
    the engine (the frame the engine would find itself, from graphcap's list of its files)."""
    def wrapped(is_debug: bool = False, framework_loc: Any = None):
        if framework_loc is None:
            framework_loc = _first_frame_outside_engine()
        return summary(is_debug, framework_loc)

    return wrapped


def _first_frame_outside_engine() -> Any:
    """The innermost frame outside the shape engine's files (and this module), as a FrameSummary, or None."""
    import sys
    import traceback

    from ..torch_private.engine_files import engine_files

    skip = engine_files()
    frame = sys._getframe(2)
    try:
        while frame is not None and (frame.f_code.co_filename in skip or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        if frame is None:
            return None
        return traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    finally:
        del frame


@contextlib.contextmanager
def tracing(inputs: Optional[SymbolicInputs], general_sizes: bool = True):
    """The engine setting the trace of symbolic inputs runs under.

    Framework code (broadcasting, contiguity, kernel choice) asks "is this
    size 1?" with ``guard_or_false`` and friends; with backed size-oblivious
    reasoning those questions are answered for the general size instead of
    the example's, so they neither specialize a dim whose example is 1 nor
    cut 1 out of a declared range. Questions the user's own code asks
    (``if x.shape[0] == 1``) still become guards and are checked.

    The oneDNN, cuDNN and NNPACK backends are switched off while tracing: their
    kernel choice depends on the batch size (``batch < 16``) and would guard
    on it, although the recorded operator is the same either way.
    """
    if inputs is None or not inputs.roots:
        yield
        return
    env = inputs.shape_env
    saved_summary = shapes.own_stack_summary(env)
    shapes.set_stack_summary(env, _with_user_line(shapes.stack_summary(env)))
    try:
        with backend_kernels_off(), shapes.backed_size_oblivious(general_sizes):
            yield
    finally:
        shapes.restore_stack_summary(env, saved_summary)


def example_breaks_engine_facts(env: Any) -> bool:
    """Whether a size the engine set equal to an expression (a replacement), or a runtime assert on
    sizes alone, is false at the example's sizes: a size-0/1 question answered for the general size
    where the example takes the special one (a size-1 example broadcast against another size, with
    ``prefer_deferred_runtime_asserts_over_guards``: the non-broadcast assumption is asserted, not
    checked against the example)."""
    hints = {s: sympy.Integer(v) for s, v in shapes.example_values(env).items()}

    def false_at_example(fact: Any) -> bool:
        if not fact.free_symbols <= hints.keys():
            return False
        try:
            return fact.xreplace(hints) == sympy.false
        except (TypeError, ZeroDivisionError):
            return False

    for sym, expr in shapes.replacements(env).items():
        if sym in hints and false_at_example(sympy.Eq(sym, expr, evaluate=False)):
            return True
    return any(false_at_example(a.expr) for a in shapes.deferred_asserts(env).get(None, []))


def _with_user_line(summary: Any) -> Any:
    """Wrap ``ShapeEnv._get_stack_summary`` so every guard also records the user's line.

    The engine records the innermost frame that raised a guard, which is a
    torch function when the guard comes from an operator (broadcasting in
    ``x + y``); the user's line that called it is what a message should show.
    """
    import linecache
    import sys

    from ..torch_private.shapes import SLoc

    def wrapped(is_debug: bool = False, framework_loc: Any = None):
        if framework_loc is None:  # the innermost frame outside the shape engine (and this wrapper)
            framework_loc = _first_frame_outside_engine()
        sloc, extra = summary(is_debug, framework_loc)
        if sloc.maybe_user_loc is None:
            frame = sys._getframe(1)
            while frame is not None and not is_user_file(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is not None:
                code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                sloc = SLoc(sloc.framework_loc,
                            f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}: {code}")
            del frame
        return sloc, extra

    return wrapped


from .symbol_names import dim_names  # noqa: E402,F401  (the name the report and inspect call: symbol -> the user's Dim name)
