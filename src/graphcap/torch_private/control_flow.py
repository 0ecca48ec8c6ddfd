"""Private torch names graphcap's control-flow capture relies on (see ``graphcap.trace.hop_capture``,
``hops``, ``branch_scope`` and ``regions``).

One function per touchpoint; each docstring says what it relies on. ``RELIES_ON``
lists them for the surface test.
"""
from __future__ import annotations

from typing import Any, Callable

RELIES_ON = {
    "torch._ops.HigherOrderOperator": None,
    "torch._higher_order_ops.utils._maybe_run_with_interpreter": ("fn",),
    "torch.utils._python_dispatch.TorchDispatchMode": None,
    "torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER": None,
    "torch.fx.experimental.proxy_tensor._MakefxTracer#fx_tracer": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#tensor_tracker": None,
    "torch.fx.experimental.proxy_tensor._ProxyTensor#proxy": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._maybe_evaluate_static": ("self", "expr"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._set_replacement": ("self", "a", "tgt", "msg"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._update_var_to_range": ("self", "symbol", "vr", "vr_sloc"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._maybe_guard_rel": ("self", "expr"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#_version_counter": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#_replacements_version_counter": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._inner_evaluate_expr": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.guard_or_defer_runtime_assert": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.constrain_symbol_range": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.size_hint": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.guarding_hint_or_throw": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.has_guarding_hint": None,
    "torch.fx.experimental._config.backed_size_oblivious": None,
    "torch.UntypedStorage#_cdata": None,
    "torch._C._set_grad_enabled": (),
    "torch.amp.autocast_mode._enter_autocast": (),
    "torch.amp.autocast_mode._exit_autocast": (),
    "torch.fx.Graph#_graph_namespace": None,
    "torch.fx.graph._Namespace#_used_names": None,
    "torch.fx.Node._rename": ("self", "candidate"),
    "torch.utils._sympy.numbers.int_oo": None,
    "torch.utils._sympy.solve.try_solve": ("expr", "thing"),
    "torch.utils._sympy.value_ranges.ValueRanges": None,
}


def _sample_storage() -> Any:
    import torch
    return torch.UntypedStorage(1)


def _sample_graph() -> Any:
    import torch.fx
    return torch.fx.Graph()


def _sample_namespace() -> Any:
    return _sample_graph()._graph_namespace


def _sample_shape_env() -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return ShapeEnv()


SAMPLES = {
    "torch.UntypedStorage": _sample_storage,
    "torch.fx.Graph": _sample_graph,
    "torch.fx.graph._Namespace": _sample_namespace,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv": _sample_shape_env,
}


def is_higher_order_operator(obj: Any) -> bool:
    """Whether ``obj`` is a higher-order operator (``torch.ops.higher_order.*``).

    Relies on the operators' common base class ``torch._ops.HigherOrderOperator``."""
    import torch._ops
    return isinstance(obj, torch._ops.HigherOrderOperator)


def run_graph_preserving_meta(fn: Callable) -> Callable:
    """``fn``, or for a GraphModule while torch preserves node metadata, a function running it
    node by node (so nodes recorded from it keep the original nodes' source lines).

    Relies on ``torch._higher_order_ops.utils._maybe_run_with_interpreter(fn)``, the helper torch's
    own control-flow tracing uses for the same purpose."""
    from torch._higher_order_ops.utils import _maybe_run_with_interpreter
    return _maybe_run_with_interpreter(fn)


def dispatch_mode_base() -> type:
    """The base class of user dispatch modes.

    Relies on ``torch.utils._python_dispatch.TorchDispatchMode`` (documented, but only under that
    private module path): a subclass that does not ignore compile internals makes ``torch.compile``
    run eagerly while it is active, and with ``supports_higher_order_operators`` it receives
    higher-order operators at the Python dispatch key."""
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


def current_recording() -> Any:
    """(graph, tensor tracker) of the make_fx recording running now (a branch's while one is
    traced), or None: what a control-flow call's closed-over tensors are read from.

    Relies on ``torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER`` (the running
    ``_MakefxTracer``, set for the top-level trace and for each subgraph trace), its ``fx_tracer``
    and that tracer's ``graph`` and ``tensor_tracker`` (a weak map from each tensor the recording
    made or took as input to its ``_ProxyTensor``)."""
    from torch.fx.experimental import proxy_tensor
    tracer = getattr(proxy_tensor, "_CURRENT_MAKE_FX_TRACER", None)
    fx_tracer = getattr(tracer, "fx_tracer", None)
    tracker = getattr(fx_tracer, "tensor_tracker", None)
    if fx_tracer is None or tracker is None:
        return None
    return fx_tracer.graph, tracker


def recorded_node(tracker: Any, tensor: Any) -> Any:
    """The graph node a recording's tensor tracker holds for ``tensor``, or None.

    Relies on the tracker's values being ``_ProxyTensor`` with a ``proxy`` attribute."""
    try:
        slot = tracker.get(tensor)
    except TypeError:
        return None
    proxy = getattr(slot, "proxy", None)
    return getattr(proxy, "node", None)


# -- ShapeEnv: what branch scoping (graphcap.trace.branch_scope) needs ------------------------

def infinity() -> Any:
    """The integer infinity ShapeEnv's ranges use as an open bound (``torch.utils._sympy.numbers.int_oo``)."""
    from torch.utils._sympy.numbers import int_oo
    return int_oo


def value_range(lower: Any, upper: Any) -> Any:
    """A ShapeEnv value range ``[lower, upper]`` (``torch.utils._sympy.value_ranges.ValueRanges``)."""
    from torch.utils._sympy.value_ranges import ValueRanges
    return ValueRanges(lower, upper)


def solve_relation(relation: Any, symbol: Any) -> Any:
    """``relation`` rewritten with ``symbol`` alone on the left, or None
    (``torch.utils._sympy.solve.try_solve(expr, thing)``, which returns (relation, right side))."""
    from torch.utils._sympy.solve import try_solve
    return try_solve(relation, symbol)


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
    env._update_var_to_range(symbol, value_range(lower, upper), ValueRangesSLoc(sloc, sloc))


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
    for name in _ARGUMENT_MEMOIZED:
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
    return _OWN_MEMO_CLASS[0](**options)


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
    env._replacements_version_counter += 1
    for name in _ARGUMENT_MEMOIZED:
        # a ShapeEnv not made by new_shape_env shares torch's class-level memos: clearing them is
        # still sound (other ShapeEnvs recompute), only slower for them
        getattr(type(env), name).cache_clear()


def backed_sizes_by_example() -> Any:
    """A context in which ShapeEnv reasons about backed sizes from their example values, not
    size-obliviously (graphcap's trace turns size-oblivious reasoning on; in a branch the example
    does not take, it would check what a range settles against an example outside that range).
    Relies on the config flag ``torch.fx.experimental._config.backed_size_oblivious``."""
    from torch.fx.experimental import _config
    return _config.patch(backed_size_oblivious=False)


# -- tensors and fx nodes -----------------------------------------------------------------------

def same_storage(a: Any, b: Any) -> bool:
    """Whether two tensors (fake ones included) share one storage.
    Relies on ``UntypedStorage._cdata`` (the storage's identity)."""
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except Exception:  # a tensor without storage (sparse, nested, ...): not an alias we can tell
        return False


def grad_mode_switch() -> Callable:
    """The function the pre-dispatch recorder writes for a grad-mode switch
    (``torch._C._set_grad_enabled``)."""
    import torch
    return torch._C._set_grad_enabled


def autocast_markers() -> tuple[Callable, Callable]:
    """The functions the pre-dispatch recorder writes at the start and end of an autocast block
    (``torch.amp.autocast_mode._enter_autocast`` / ``_exit_autocast``)."""
    from torch.amp.autocast_mode import _enter_autocast, _exit_autocast
    return _enter_autocast, _exit_autocast


def rename_node(node: Any, name: str) -> None:
    """Rename an fx node (to ``name`` if free in its graph, else a numbered variant).
    Relies on ``torch.fx.Node._rename(candidate)``."""
    node._rename(name)


def rename_node_reusing(graph: Any, node: Any, name: str) -> None:
    """Rename ``node`` to ``name``, which an erased node of ``graph`` held (fx never frees
    names by itself). Relies on ``Graph._graph_namespace._used_names`` and ``Node._rename``."""
    graph._graph_namespace._used_names.discard(name)
    node._rename(name)
