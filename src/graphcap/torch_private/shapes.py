"""torch's symbolic-shape engine, where graphcap reaches past ShapeEnv's public surface.

- Graph-scoped knowledge (see ``graphcap.trace.control_flow.branch_scope``): asking what a
  ShapeEnv knows without adding a guard, adding a replacement or a narrower
  range, and making it forget what it memoized, through private methods and
  version counters. graphcap's own ShapeEnvs (:func:`new_shape_env`) keep
  their memos apart from other ShapeEnvs' so that forgetting stays local.
- Guard source locations: ShapeEnv records where each guard was raised through
  its private ``_get_stack_summary`` / ``_get_sloc``; graphcap wraps the former
  on one ShapeEnv instance (never the class) so a guard also records the
  user's line, and reads the latter when it rebuilds ranges at load.
- ``torch.fx.experimental._config.backed_size_oblivious``: the flag that makes
  size-0/1 questions be answered for the general size (on for a trace, off in a
  branch the example does not take).
- ``torch._guards``: the ``Source`` classes naming where a symbol came from,
  and ``SLoc`` (a guard's location).
- ``torch.utils._traceback.CapturedTraceback``: the stack object a
  ``RuntimeAssert`` carries.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from torch._guards import GuardSource, SLoc, Source
from torch.utils._traceback import CapturedTraceback

RELIES_ON = {
    "torch._guards.Source": None,
    "torch._guards.GuardSource": None,
    "torch._guards.SLoc": ("framework_loc", "maybe_user_loc"),
    "torch.utils._traceback.CapturedTraceback.extract": (),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._get_stack_summary": ("self", "is_debug", "framework_loc"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._get_sloc": ("self", "framework_loc"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._generate_unique_id": ("self", "source_name"),
    "torch.fx.experimental._config.patch": (),
    "torch.fx.experimental._config.backed_size_oblivious": None,
    "torch.fx.experimental.symbolic_shapes.ValueRangesSLoc": ("lower", "upper"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._maybe_evaluate_static": ("self", "expr"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._set_replacement": ("self", "a", "tgt", "msg"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._update_var_to_range": ("self", "symbol", "vr", "vr_sloc"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._maybe_guard_rel": ("self", "expr"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#_version_counter": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#_replacements_version_counter": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._inner_evaluate_expr": None,
    # every size question a ShapeEnv answers passes here (SymNode's bool/int guards, guard_or_false)
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_expr": (
        "self", "orig_expr", "hint", "fx_node", "size_oblivious", "fallback_value"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.guard_or_defer_runtime_assert": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.constrain_symbol_range": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.size_hint": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.guarding_hint_or_throw": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.has_guarding_hint": None,
    # what a ShapeEnv knows, read (and, for branch scopes and loading, written) in its own fields
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#var_to_range": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#var_to_range_sloc": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#replacements": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#replacements_slocs": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#deferred_runtime_asserts": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#unbacked_symint_counter": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#num_deferred_runtime_asserts": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#guards": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#axioms": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.get_implications": ("self", "e"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.simplify": ("self", "expr"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#fake_tensor_cache": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#tracked_fakes": None,
    # data-dependent symbol -> real value under real-tensor propagation; ``unbacked_var_to_val``
    # on torch 2.10 (the same map under its older name)
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#real_tensor_prop_unbacked_vals|unbacked_var_to_val": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#unbacked_symfloat_counter": None,
    # the example value of each backed symbol: ``backed_var_to_val`` from torch 2.11 on (before
    # it, ``var_to_val``); example_values() reads whichever this torch has
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#backed_var_to_val|var_to_val": None,
    # unbacked symbols made since the last node that binds them (graph inputs given by a ShapeVar)
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#pending_fresh_unbacked_symbols": None,
    "torch.fx.experimental.symbolic_shapes.compute_unbacked_bindings": (
        "shape_env", "example_value", "old_example_value", "peek"),
    # what c10's TORCH_GUARD_OR_FALSE calls on a symbolic bool (setitem's shortcut question)
    "torch.fx.experimental.sym_node.SymNode.guard_or_false": ("self", "file", "line"),
    "torch.fx.experimental.sym_node.SymNode#expr": None,
}


def _sample_shape_env() -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return ShapeEnv()


SAMPLES = {"torch.fx.experimental.symbolic_shapes.ShapeEnv": _sample_shape_env}

# Entries that older supported torch lines lack, with the first release that has them; the functions
# here do without them there (the surface test skips them on an older torch, naming the release).
SINCE = {
    # SymNode.expr caches its replaced expression under this counter; before it, it re-reads
    # the replacements every time (nothing to move)
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#_replacements_version_counter": "2.12",
    # two more argument-memoized methods; before them, nothing of theirs to keep apart or clear
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.guarding_hint_or_throw": "2.12",
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.has_guarding_hint": "2.12",
}

__all__ = ["GuardSource", "SLoc", "Source", "CapturedTraceback", "stack_summary", "own_stack_summary",
           "set_stack_summary", "restore_stack_summary", "questions_answered", "guard_location",
           "backed_size_oblivious",
           "new_shape_env", "evaluate_statically", "replace_symbol", "narrow_range", "refine_from_relation",
           "forget_derived_knowledge", "symbol_ranges", "symbol_range_locations", "replacements",
           "replacement_locations", "example_values", "deferred_asserts", "has_unbacked_symbols",
           "count_deferred_assert", "guards", "axioms", "keep_only_facts", "fake_cache", "set_fake_cache",
           "tracked_fakes",
           "real_unbacked_values", "copy_shape_env", "claim_input_bindings",
           "undecided_size_equalities_taken_as_equal"]


# -- what a ShapeEnv knows, in its fields --------------------------------------------------------
# Each returns the ShapeEnv's live dict (not a copy): graphcap's branch scopes and its loader write
# through it, as torch's own methods do.

def symbol_ranges(env: Any) -> dict:
    """Each symbol's value range (``ShapeEnv.var_to_range``: Symbol -> ValueRanges)."""
    return env.var_to_range


def symbol_range_locations(env: Any) -> dict:
    """Where each symbol's range bounds were set (``ShapeEnv.var_to_range_sloc``: Symbol -> ValueRangesSLoc)."""
    return env.var_to_range_sloc


def replacements(env: Any) -> dict:
    """The symbols ``env`` rewrites to an expression (``ShapeEnv.replacements``)."""
    return env.replacements


def replacement_locations(env: Any) -> dict:
    """Where each replacement was made (``ShapeEnv.replacements_slocs``: Symbol -> SLoc)."""
    return env.replacements_slocs


def example_values(env: Any) -> dict:
    """The example (hint) value of each backed symbol: ``ShapeEnv.backed_var_to_val`` (torch 2.11
    and later), ``ShapeEnv.var_to_val`` before it (the same map under its older name)."""
    values = getattr(env, "backed_var_to_val", None)
    return env.var_to_val if values is None else values


def deferred_asserts(env: Any) -> dict:
    """The runtime asserts ``env`` deferred, keyed by the unbacked symbol they wait for, or None
    (``ShapeEnv.deferred_runtime_asserts``: key -> list of RuntimeAssert)."""
    return env.deferred_runtime_asserts


def has_unbacked_symbols(env: Any) -> bool:
    """Whether ``env`` ever made an unbacked SymInt or SymFloat (its counters
    ``unbacked_symint_counter`` / ``unbacked_symfloat_counter`` moved)."""
    return bool(env.unbacked_symfloat_counter or env.unbacked_symint_counter)


def reserve_unbacked_names(env: Any, names: Any) -> None:
    """Move ``env``'s unbacked-symbol counters past every unbacked symbol among ``names``
    (``u3`` -> the next one made is ``u4``; ``zuf1`` for floats), so a later trace over a loaded
    program's symbols makes new ones instead of reusing a name the program already binds.

    Relies on ``ShapeEnv.unbacked_symint_counter`` / ``unbacked_symfloat_counter`` and on
    torch's names for unbacked symbols (``u<n>``, ``zuf<n>``)."""
    for name in names:
        for prefix, counter in (("zuf", "unbacked_symfloat_counter"), ("u", "unbacked_symint_counter")):
            rest = name[len(prefix):] if name.startswith(prefix) else ""
            if rest.isdigit():
                setattr(env, counter, max(getattr(env, counter), int(rest) + 1))
                break


def claim_input_bindings(env: Any, flat_inputs: list[Any]) -> dict[int, dict]:
    """The unbacked symbols the graph inputs bind (a size given by a ``ShapeVar``), per input
    index: ``{i: {u0: path into input i}}``, taken off ``env``'s pending list.

    make_fx binds the symbols still pending when it makes its placeholders: torch 2.14 routes each
    to its input's placeholder, torch 2.13 refuses (``Expected Proxy``: it binds only a single
    output). graphcap claims them before tracing on every line and writes the placeholders'
    ``unbacked_bindings`` itself (the same paths torch 2.14 writes). Symbols no input holds stay
    pending. Relies on ``ShapeEnv.pending_fresh_unbacked_symbols`` and
    ``compute_unbacked_bindings(..., peek=True)`` (which reads without clearing)."""
    from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings

    from .pytree import SequenceKey
    if env is None or not env.pending_fresh_unbacked_symbols:
        return {}
    found = compute_unbacked_bindings(env, tuple(flat_inputs), peek=True) or {}
    per_input: dict[int, dict] = {}
    for sym, path in found.items():
        head, rest = path[0], tuple(path[1:])
        if not isinstance(head, SequenceKey):
            continue
        per_input.setdefault(head.idx, {})[sym] = rest
    claimed = {sym for bindings in per_input.values() for sym in bindings}
    env.pending_fresh_unbacked_symbols[:] = [s for s in env.pending_fresh_unbacked_symbols if s not in claimed]
    return per_input


def stack_summary(env: Any) -> Callable[..., Any]:
    """The (bound) function ``env`` calls to locate a guard: ``(is_debug, framework_loc) -> (SLoc, str)``.

    Relies on ``ShapeEnv._get_stack_summary(self, is_debug=False, framework_loc=None)``.
    """
    return env._get_stack_summary


def own_stack_summary(env: Any) -> Any:
    """The locator set on this instance by :func:`set_stack_summary`, or None (the class's is in use)."""
    return env.__dict__.get("_get_stack_summary")


def set_stack_summary(env: Any, summary: Callable[..., Any]) -> None:
    """Make this one ShapeEnv locate guards with ``summary`` (an instance attribute; the class is untouched)."""
    env._get_stack_summary = summary


@contextlib.contextmanager
def symbols_numbered_as(env: Any, own: str, numbered_as: str) -> Iterator[None]:
    """Inside the block, a symbol this one ShapeEnv makes for a source named ``own...`` takes the
    number the engine would give a source named ``numbered_as...`` (the engine numbers a new symbol
    from its source's name); the source keeps its own name, and so do guards and messages."""
    numbered = type(env)._generate_unique_id

    def number(source_name: str) -> int:
        if source_name.startswith(own):
            source_name = numbered_as + source_name[len(own):]
        return numbered(env, source_name)

    env._generate_unique_id = number
    try:
        yield
    finally:
        env.__dict__.pop("_generate_unique_id", None)


def restore_stack_summary(env: Any, saved: Any) -> None:
    """Undo :func:`set_stack_summary`: ``saved`` is what :func:`own_stack_summary` returned before."""
    if saved is None:
        env.__dict__.pop("_get_stack_summary", None)
    else:
        env._get_stack_summary = saved


@contextlib.contextmanager
def questions_answered(env: Any, record: Callable[[Any, Any], None]) -> Iterator[None]:
    """Within the block, ``record(expr, answer)`` is told every size question this one ShapeEnv
    answers, also one it answers from a guard it already holds (which adds no guard: a second
    operator asking a question the first one raised leaves no trace in ``guards``), and every
    question it settles from what it knows without guarding (``statically_known_true``,
    ``guard_or_false`` under size-oblivious rules), where the answer is a truth value.

    Relies on ``ShapeEnv.evaluate_expr(orig_expr, hint, fx_node, size_oblivious, fallback_value,
    *, forcing_spec)`` being where a symbolic bool or int is decided, and on
    ``ShapeEnv._maybe_evaluate_static(expr, ...)`` being where a question is settled without a
    guard; both wrapped on the instance (the class is untouched) and unwrapped on leaving."""
    import sympy
    answer, settle = type(env).evaluate_expr, type(env)._maybe_evaluate_static

    def asked(orig_expr: Any, *args: Any, **kwargs: Any) -> Any:
        result = answer(env, orig_expr, *args, **kwargs)
        record(orig_expr, result)
        return result

    def settled(expr: Any, *args: Any, **kwargs: Any) -> Any:
        result = settle(env, expr, *args, **kwargs)
        if result is sympy.true or result is sympy.false:
            record(expr, result)
        return result

    for attr in ("cache_clear", "cache_info"):  # the engine clears that memo through the instance
        if hasattr(settle, attr):
            setattr(settled, attr, getattr(settle, attr))
    saved = {name: env.__dict__.get(name) for name in ("evaluate_expr", "_maybe_evaluate_static")}
    env.evaluate_expr, env._maybe_evaluate_static = asked, settled
    try:
        yield
    finally:
        for name, method in saved.items():
            if method is None:
                env.__dict__.pop(name, None)
            else:
                setattr(env, name, method)


def guard_location(env: Any) -> SLoc:
    """Where the engine is now, as a guard location (what ShapeEnv stores beside a range).

    Relies on ``ShapeEnv._get_sloc(self, framework_loc=None)``.
    """
    return env._get_sloc()


@contextlib.contextmanager
def backed_size_oblivious(enabled: bool = True) -> Iterator[None]:
    """Within the block, size-0/1 questions about backed sizes are answered for the general size
    (``enabled=False``: from the sizes' example values, as outside a trace; in a branch the example
    does not take, size-oblivious reasoning would check what a range settles against an example
    outside that range).

    Relies on the config flag ``torch.fx.experimental._config.backed_size_oblivious``
    and that config module's ``patch``.
    """
    import torch.fx.experimental._config as config
    with config.patch(backed_size_oblivious=enabled):
        yield


# -- knowledge scoped to a branch (what graphcap.trace.control_flow.branch_scope needs) --------

def evaluate_statically(env: Any, expr: Any) -> Any:
    """What ``env`` knows ``expr`` to be from ranges and replacements alone (no guard added), or None.
    Relies on ``ShapeEnv._maybe_evaluate_static(expr)``."""
    return env._maybe_evaluate_static(expr)


def replace_symbol(env: Any, symbol: Any, value: Any, reason: str) -> None:
    """Make ``env`` treat ``symbol`` as ``value`` from now on.
    Relies on ``ShapeEnv._set_replacement(a, tgt, msg)``."""
    env._set_replacement(symbol, value, reason)


def narrow_range(env: Any, symbol: Any, lower: Any, upper: Any, sloc: Any) -> None:
    """Intersect ``symbol``'s range in ``env`` with ``[lower, upper]``, located at ``sloc``.
    Relies on ``ShapeEnv._update_var_to_range(symbol, vr, vr_sloc)``."""
    from torch.fx.experimental.symbolic_shapes import ValueRangesSLoc

    from .symbolic import ValueRanges
    env._update_var_to_range(symbol, ValueRanges(lower, upper), ValueRangesSLoc(sloc, sloc))


def refine_from_relation(env: Any, expr: Any) -> None:
    """Let ``env`` narrow ranges / add replacements implied by the relation ``expr`` (as it does
    for a guard it raises itself). Relies on ``ShapeEnv._maybe_guard_rel(expr)``; called past its
    memo (``__wrapped__``), which would skip a relation seen before a branch scope took it back."""
    method = type(env)._maybe_guard_rel
    getattr(method, "__wrapped__", method)(env, expr)


# ShapeEnv methods memoized with a plain functools.lru_cache keyed on their arguments: sound while
# what a ShapeEnv knows only grows, stale once a branch scope narrows a range or takes knowledge back
_ARGUMENT_MEMOIZED = ("_inner_evaluate_expr", "_maybe_guard_rel", "guard_or_defer_runtime_assert",
                      "size_hint", "guarding_hint_or_throw", "has_guarding_hint", "constrain_symbol_range")


def _memoized_here() -> tuple[str, ...]:
    """The methods of ``_ARGUMENT_MEMOIZED`` this torch has (an older line lacks some, see SINCE)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return tuple(name for name in _ARGUMENT_MEMOIZED if hasattr(ShapeEnv, name))


def _with_own_memos() -> type:
    """A ShapeEnv class whose argument-memoized methods (``_ARGUMENT_MEMOIZED``) keep their own caches.

    torch memoizes them with ``functools.lru_cache`` on the class, so one cache
    holds the entries of every ShapeEnv in the process, and clearing it (as a
    branch scope must, see ``forget_derived_knowledge``) would drop a user's or
    torch.compile's entries too. graphcap's ShapeEnvs are of this subclass: the
    same methods (the function under torch's ``lru_cache``, reached through
    ``__wrapped__``) under caches of their own, shared by graphcap's ShapeEnvs only.
    """
    from functools import lru_cache

    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    memos = {}
    for name in _memoized_here():
        cached = getattr(ShapeEnv, name)
        size = cached.cache_parameters()["maxsize"]
        memos[name] = lru_cache(size)(cached.__wrapped__)
    return type("GraphcapShapeEnv", (ShapeEnv,), {
        **memos, "__module__": __name__,
        "__doc__": "A ShapeEnv whose memoized answers are kept apart from other ShapeEnvs' (see _with_own_memos)."})


_OWN_MEMO_CLASS: list = []


def new_shape_env(**options: Any) -> Any:
    """A ShapeEnv for graphcap's own use (``ShapeEnv(**options)``), whose memos graphcap may clear."""
    if not _OWN_MEMO_CLASS:
        _OWN_MEMO_CLASS.append(_with_own_memos())
    env = _OWN_MEMO_CLASS[0](**options)
    # real values of data-dependent bools kept as truth values (torch 2.10 / 2.11 lose the runtime
    # assert otherwise, whenever real tensors are propagated: draft_export, or the user's config)
    from .real_values import keep_real_truth_values_boolean
    keep_real_truth_values_boolean(env)
    return env


def forget_derived_knowledge(env: Any) -> None:
    """Make ``env`` recompute what it derived from its ranges and replacements, after a branch
    scope narrowed or restored them.

    Relies on the ``_version_counter`` field (the version-keyed memos drop their entries when it
    moves; torch's own ``_update_version_counter`` moves it only when the count of replacements or
    divisibility facts changes, not for a narrowed range), the ``_replacements_version_counter``
    field (SymNode expressions re-read replacements when it moves) and, for the methods memoized
    on their arguments alone (``_ARGUMENT_MEMOIZED``), on their ``cache_clear``. ``env`` comes from
    ``new_shape_env``, so those caches are graphcap's own: other ShapeEnvs keep their entries."""
    env._version_counter += 1
    if hasattr(env, "_replacements_version_counter"):  # torch 2.12 on (SINCE)
        env._replacements_version_counter += 1
    for name in _memoized_here():
        # a ShapeEnv not made by new_shape_env shares torch's class-level memos: clearing them is
        # still sound (other ShapeEnvs recompute), only slower for them
        getattr(type(env), name).cache_clear()





def keep_only_facts(env: Any, keep: Callable[[Any], bool]) -> None:
    """Make ``env`` forget each guard and deferred assert whose condition ``keep`` refuses, and
    what it derived from them.

    A ShapeEnv answers a question from its guards without asking again (the guards' implications
    are its ``axioms``); a guard recorded while tracing something that is gone (the fake kernel of
    an operator the program keeps whole) would otherwise answer a retrace's question with no trace
    in the result. Relies on the fields ``guards``, ``deferred_runtime_asserts`` and ``axioms``
    and on ``ShapeEnv.get_implications`` and ``ShapeEnv.simplify``."""
    env.guards[:] = [g for g in env.guards if keep(g.expr)]
    for key in list(env.deferred_runtime_asserts):
        env.deferred_runtime_asserts[key] = [r for r in env.deferred_runtime_asserts[key] if keep(r.expr)]
    env.axioms.clear()
    for expr in [g.expr for g in env.guards] + [r.expr for rs in env.deferred_runtime_asserts.values() for r in rs]:
        env.axioms.update(dict(env.get_implications(env.simplify(expr))))
    forget_derived_knowledge(env)


def count_deferred_assert(env: Any) -> None:
    """Count one more deferred runtime assert (``ShapeEnv.num_deferred_runtime_asserts``), after
    appending it to :func:`deferred_asserts` (the count versions what the ShapeEnv memoized)."""
    env.num_deferred_runtime_asserts += 1


def guards(env: Any) -> list:
    """The guards ``env`` raised, in order (``ShapeEnv.guards``: a list of ShapeGuard)."""
    return env.guards


def axioms(env: Any) -> dict:
    """What ``env`` holds true from its guards and asserts (``ShapeEnv.axioms``)."""
    return env.axioms


def fake_cache(env: Any) -> dict:
    """The fake-tensor dispatch cache kept on ``env`` (``ShapeEnv.fake_tensor_cache``)."""
    return env.fake_tensor_cache


def set_fake_cache(env: Any, cache: dict) -> None:
    """Give ``env`` another fake-tensor dispatch cache (a branch scope's own, or the one it saved)."""
    env.fake_tensor_cache = cache


def tracked_fakes(env: Any) -> list:
    """The input fake tensors ``env`` keeps a record of (``ShapeEnv.tracked_fakes``: TrackedFake
    records, or None when it tracks none); an empty list for no ShapeEnv or none tracked."""
    return (getattr(env, "tracked_fakes", None) or []) if env is not None else []


def real_unbacked_values(env: Any) -> dict:
    """Data-dependent symbol -> the value the real tensors gave it, when the fake mode propagated
    real tensors (``ShapeEnv.real_tensor_prop_unbacked_vals``; ``unbacked_var_to_val`` on torch 2.10);
    a copy, empty without a ShapeEnv."""
    if env is None:
        return {}
    values = getattr(env, "real_tensor_prop_unbacked_vals", None)
    return dict((getattr(env, "unbacked_var_to_val", None) if values is None else values) or {})


def copy_shape_env(env: Any) -> Any:
    """An independent copy of ``env``: the same symbols, ranges, replacements, example values,
    guards and deferred asserts, in objects of its own, so that what one program's consumer
    learns or assumes there (a narrowed range, a symbol replaced by a number) leaves ``env`` as
    it was. The copy starts with an empty fake-tensor cache and no tracked input fakes (both
    hold fake tensors of ``env``'s fake mode), and with its class's methods where ``env`` had one
    replaced on the instance (a closure over ``env``).

    Relies on every field of a ShapeEnv being deep-copyable (``copy.deepcopy``), and on the
    fields ``fake_tensor_cache`` and ``tracked_fakes``."""
    import copy
    cache, fakes = env.fake_tensor_cache, getattr(env, "tracked_fakes", None)
    env.fake_tensor_cache, env.tracked_fakes = {}, None
    try:
        new = copy.deepcopy(env)
    finally:
        env.fake_tensor_cache, env.tracked_fakes = cache, fakes
    new.tracked_fakes = [] if fakes is not None else None
    for name, value in list(vars(new).items()):
        # a method replaced on the original instance (graphcap's guard locator, draft export's
        # watch on real-value decisions) is a closure over the original: the copy uses its class's
        if callable(value) and not isinstance(value, type) and hasattr(type(new), name):
            del new.__dict__[name]
    return new


# -- setitem's shortcut question -------------------------------------------------------------------

def _install_equal_answer() -> Any:
    from torch.fx.experimental.sym_node import SymNode
    saved = SymNode.guard_or_false
    SymNode.guard_or_false = _guard_or_false_taking_equal  # type: ignore[method-assign]
    return saved


def _restore_equal_answer(saved: Any) -> None:
    from torch.fx.experimental.sym_node import SymNode
    SymNode.guard_or_false = saved  # type: ignore[method-assign]


def _guard_or_false_taking_equal(node: Any, file: str, line: int) -> bool:
    """``SymNode.guard_or_false``, but inside :func:`undecided_size_equalities_taken_as_equal` on
    this thread an equality of two symbolic sizes the engine cannot decide answers True."""
    original = _EQUAL_ANSWER.saved
    if _EQUAL_ANSWER.in_scope():
        import sympy
        expr = node.expr
        if isinstance(expr, sympy.Eq) and not expr.lhs.is_number and not expr.rhs.is_number \
                and node.shape_env is not None and evaluate_statically(node.shape_env, expr) is None:
            return True
    return original(node, file, line)


from .thread_scoped import ThreadScopedPatch  # noqa: E402

_EQUAL_ANSWER = ThreadScopedPatch(_install_equal_answer, _restore_equal_answer)


@contextlib.contextmanager
def undecided_size_equalities_taken_as_equal() -> Iterator[None]:
    """Within the block, on this thread, C++ code that asks ``guard_or_false(a == b)`` of two
    symbolic sizes the engine cannot decide (neither a number) gets True, without a guard.

    graphcap opens it around dynamo's read of a strict program, for the setitem dynamo runs on
    its own fake tensors (non-strict records a setitem as the view's ``copy_`` without asking):
    tensor setitem (``t[..., :n] = v``) asks whether the slice and the value have equal sizes
    only to skip reshaping the value before its ``copy_`` (``copy_`` broadcasts the value
    itself: the same result and the same refusal for every size); the questions it asks about
    one size against a number (contiguity) are left to the engine. Every other thread, and
    every other question, keeps torch's answer.

    Relies on ``SymNode.guard_or_false(self, file, line)`` being what c10's
    ``TORCH_GUARD_OR_FALSE`` calls for a symbolic bool (looked up on the class at each call),
    and ``SymNode.expr`` / ``shape_env``.
    """
    with _EQUAL_ANSWER.active():
        yield
