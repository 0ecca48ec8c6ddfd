"""Real-tensor propagation in torch's fake tensors (what ``graphcap.draft_export`` drives).

With the functorch config flag ``fake_tensor_propagate_real_tensors`` on when a
``FakeTensorMode`` is made, the mode keeps a real copy beside every fake
tensor and runs each operator on both. A question tracing cannot decide on
data (``if n > 2`` with ``n = y.item()``) is then decided with the real value
and turned into a deferred runtime assert, whose message starts with
``propagate_real_tensors``; a custom operator without a fake kernel gets its
output metadata from the real call. These are torch behaviours without a
public name; graphcap reaches them here only.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

from .thread_scoped import ThreadScopedPatch

RELIES_ON = {
    "torch._functorch.config.patch": (),
    "torch._functorch.config.fake_tensor_propagate_real_tensors": None,
    "torch._library.utils.has_fake_kernel": ("op",),
    "torch._library.utils.is_builtin": ("op",),
    "torch._subclasses.fake_tensor.FakeTensor#real_tensor": None,
    # ShapeEnv.guard_or_defer_runtime_assert (wrapped below) is declared by the ``shapes`` module
    # the setter of a data-dependent symbol's real value (named set_unbacked_var_to_val on torch 2.10),
    # wrapped on one instance by keep_real_truth_values_boolean
    "torch.fx.experimental.symbolic_shapes.ShapeEnv#set_real_tensor_prop_unbacked_vals|set_unbacked_var_to_val":
        None,
    "torch._functorch.config.generate_fake_kernels_from_real_mismatches": None,
    "torch._subclasses.fake_tensor.FakeTensorMode._maybe_infer_fake_kernel_from_pytree_out":
        ("self", "func", "fake_in", "real_in", "fake_out", "real_out"),
    # the fake-tensor engine's own comparisons of a fake output with the real one; their
    # MetadataMismatchError's reason says what a wrong fake kernel got wrong
    "torch._subclasses.fake_utils._check_alias_info": ("context", "real_out", "real_in", "fake_out", "fake_in"),
    # asked again, with inference off, for the reason of an output it replaced
    "torch._subclasses.fake_tensor.FakeTensorMode._maybe_infer_fake": ("self", "func", "path", "fake", "real"),
    "torch._subclasses.fake_tensor.MetadataMismatchError": None,
    # torch's record of a custom operator's input and output metadata, which
    # torch._library.fake_profile.unsafe_generate_fake_kernels turns into fake kernels
    "torch._library.fake_profile.OpProfile": None,
    "torch._library.fake_profile.TensorMetadata.maybe_from_tensor": ("t",),
    # called with (question, answer) whenever any ShapeEnv (dynamo's included) answers a question
    # with a real value; wrapped per thread by real_value_decisions_logged
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._log_real_tensor_propagation":
        ("self", "orig_expr", "unsound_result"),
}


def _sample_fake_tensor() -> Any:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode().from_tensor(torch.ones(2))


SAMPLES = {"torch._subclasses.fake_tensor.FakeTensor": _sample_fake_tensor}

# The message prefix torch gives the runtime assert of a guard decided with a real value.
REAL_VALUE_ASSERT_PREFIX = "propagate_real_tensors"

__all__ = ["real_tensor_propagation", "real_value_decisions_logged", "infer_kernels_from_real_mismatches",
           "cross_check_custom_operators_only",
           "op_profile",
           "watch_real_value_decisions", "keep_real_truth_values_boolean", "has_fake_kernel", "is_builtin_operator",
           "real_tensor_of", "carry_real_tensor", "REAL_VALUE_ASSERT_PREFIX"]


@contextlib.contextmanager
def real_tensor_propagation() -> Iterator[None]:
    """Fake modes made inside the block carry real tensors beside the fake ones.

    Relies on ``torch._functorch.config.fake_tensor_propagate_real_tensors``
    (read when a ``FakeTensorMode`` is constructed) and that config's ``patch``.
    """
    import torch._functorch.config as config
    with config.patch(fake_tensor_propagate_real_tensors=True):
        yield


_DECISION_WATCHERS = threading.local()  # .stack: the callbacks of this thread's open watches


def _install_decision_log() -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    inner = ShapeEnv._log_real_tensor_propagation

    def log_real_tensor_propagation(self: Any, orig_expr: Any, unsound_result: Any) -> Any:
        watchers = getattr(_DECISION_WATCHERS, "stack", None)
        if _DECISION_LOG.in_scope() and watchers:
            import sympy
            watchers[-1](orig_expr if bool(unsound_result) else sympy.Not(orig_expr))
        return inner(self, orig_expr, unsound_result)

    ShapeEnv._log_real_tensor_propagation = log_real_tensor_propagation  # type: ignore[method-assign]
    return inner


def _restore_decision_log(saved: Any) -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    ShapeEnv._log_real_tensor_propagation = saved  # type: ignore[method-assign]


_DECISION_LOG = ThreadScopedPatch(_install_decision_log, _restore_decision_log)


@contextlib.contextmanager
def real_value_decisions_logged(on_decision: Callable[[Any], None]) -> Iterator[None]:
    """Call ``on_decision(condition)`` for every question a ShapeEnv answers with a real value inside
    the block, whichever ShapeEnv it is: one graphcap cannot reach (dynamo's, made inside its
    capture) included. The condition is the sympy boolean that held on the example.

    Relies on every such answer passing through ``ShapeEnv._log_real_tensor_propagation(orig_expr,
    unsound_result)`` (torch's record of it), which is wrapped for the calling thread only while
    the block runs (:class:`ThreadScopedPatch`), whatever the logging configuration.
    """
    stack = getattr(_DECISION_WATCHERS, "stack", None)
    if stack is None:
        stack = _DECISION_WATCHERS.stack = []
    stack.append(on_decision)
    try:
        with _DECISION_LOG.active():
            yield
    finally:
        stack.pop()


@contextlib.contextmanager
def infer_kernels_from_real_mismatches() -> Iterator[None]:
    """While tracing: an operator whose fake output disagrees with its real output gets a fake
    output inferred from the real one (instead of an error).

    Relies on ``torch._functorch.config.generate_fake_kernels_from_real_mismatches`` (read
    at each operator call).
    """
    import torch._functorch.config as config
    with config.patch(generate_fake_kernels_from_real_mismatches=True):
        yield


def cross_check_custom_operators_only(mode: Any, on_mismatch: Callable[[Any, list[str]], None],
                                      on_custom_call: Callable[[Any], None] | None = None) -> None:
    """Compare fake and real outputs only for custom operators; call ``on_mismatch(op, reasons)``
    when a custom operator's fake kernel disagreed with its real kernel (its outputs were
    inferred), with one reason per disagreeing output (or one for the aliasing of them all), and
    ``on_custom_call(op)`` for every custom operator call met, in the order of the program.

    With real tensors propagated, torch compares every operator's fake output with its
    real one. torch's own meta kernels are trusted (the comparison costs a check per
    operator, and a few of torch's internal references disagree on a dtype that never
    reaches the graph: ``prims.signbit`` inside integer floor division); a user's fake
    kernel is what may be wrong. Wraps the private
    ``FakeTensorMode._maybe_infer_fake_kernel_from_pytree_out`` on this one instance.
    """
    inner = mode._maybe_infer_fake_kernel_from_pytree_out

    def cross_check(func: Any, fake_in: Any, real_in: Any, fake_out: Any, real_out: Any) -> Any:
        if is_builtin_operator(func):
            return fake_out
        if on_custom_call is not None:
            on_custom_call(func)
        out = inner(func, fake_in, real_in, fake_out, real_out)
        from .pytree import tree_leaves
        replaced = [i for i, (a, b) in enumerate(zip(tree_leaves(out), tree_leaves(fake_out))) if a is not b]
        if replaced:
            on_mismatch(func, _mismatch_reasons(mode, func, fake_in, real_in, fake_out, real_out, replaced))
        return out

    mode._maybe_infer_fake_kernel_from_pytree_out = cross_check


def _metadata_mismatch(check: Callable[[], Any]) -> str | None:
    """The reason torch's fake-tensor engine gives for a mismatch ``check()`` finds, or None."""
    from torch._subclasses.fake_tensor import MetadataMismatchError
    try:
        check()
    except MetadataMismatchError as exc:
        return exc.reason
    return None


def _mismatch_reasons(mode: Any, func: Any, fake_in: Any, real_in: Any, fake_out: Any, real_out: Any,
                      replaced: list[int]) -> list[str]:
    """Why a custom operator's fake outputs were replaced by ones inferred from the real call, as
    the fake-tensor engine words it: an aliasing disagreement (the fake kernel returns an input,
    or a view of one, where the real one does not, or the reverse) for the whole output, else per
    replaced output the engine's finding (dtype, layout, device, a size), read from the error
    its own comparison raises when it may not infer a kernel."""
    import torch._functorch.config as config
    from torch._subclasses.fake_tensor import MetadataMismatchError
    from torch._subclasses.fake_utils import _check_alias_info

    from .pytree import tree_flatten_with_path, tree_leaves
    aliasing = _metadata_mismatch(lambda: _check_alias_info("", real_out, real_in, fake_out, fake_in))
    if aliasing is not None:
        return [f"Mismatched aliasing spec between fake kernel and real kernel: {aliasing.strip()}"]
    reasons = []
    paths, reals = tree_flatten_with_path(fake_out)[0], tree_leaves(real_out)
    for i in replaced:
        if i >= len(paths) or i >= len(reals):
            continue
        path, fake = paths[i]
        try:
            with config.patch(generate_fake_kernels_from_real_mismatches=False):
                mode._maybe_infer_fake(func, path, fake, reals[i])
        except MetadataMismatchError as exc:
            cause = exc.__cause__
            reasons.append(cause.reason if isinstance(cause, MetadataMismatchError) else exc.reason)
    return reasons


def op_profile(node: Any) -> Any:
    """torch's ``OpProfile`` of a custom operator call node: the metadata (rank, dtype, device,
    layout) of its tensor arguments and outputs, read from the nodes' ``val``."""
    import torch
    from torch._library.fake_profile import OpProfile, TensorMetadata

    def meta(value: Any) -> Any:
        return TensorMetadata.maybe_from_tensor(value)

    args = tuple(meta(a.meta.get("val")) if isinstance(a, torch.fx.Node) else None
                 for a in (*node.args, *node.kwargs.values()))
    val = node.meta.get("val")
    out = meta(val) if isinstance(val, torch.Tensor) else tuple(meta(v) for v in (val or ()))
    return OpProfile(args, out)


def keep_real_truth_values_boolean(env: Any) -> None:
    """Record the real value of a data-dependent bool as a truth value, not as the integer 1 or 0.

    torch makes the bool of ``t.item()`` (``if x.sum() > 0:``) the expression ``Eq(u0, 1)`` and
    stores its real value under that whole expression. torch 2.10 and 2.11 store ``int(value)``:
    a guard on the bool then substitutes ``1`` for the expression, compares ``Eq(Eq(u0, 1), 1)``,
    which sympy decides structurally as false, and the runtime assert it defers is a constant
    ``False`` that is dropped, while the branch the example took is recorded: the program takes
    that branch for every input (unsound). From 2.12 on torch stores the bool itself. This wraps
    the instance's setter (``set_real_tensor_prop_unbacked_vals``; ``set_unbacked_var_to_val`` on
    2.10) so that a value stored under a boolean expression is always ``sympy.true`` /
    ``sympy.false``; the guard then becomes the runtime assert ``Eq(u0, 1)`` on every line.
    """
    import sympy
    name = next(n for n in ("set_real_tensor_prop_unbacked_vals", "set_unbacked_var_to_val") if hasattr(env, n))
    inner = getattr(env, name)

    def set_real_value(key: Any, value: Any) -> Any:
        # a relation or a boolean function of symbols (a Symbol is a sympy Boolean too: not it)
        is_condition = isinstance(key, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction))
        if is_condition and isinstance(value, (bool, int, sympy.Integer)):
            value = sympy.true if bool(value) else sympy.false
        return inner(key, value)

    setattr(env, name, set_real_value)


def watch_real_value_decisions(env: Any, on_decision: Callable[[Any], None]) -> None:
    """Call ``on_decision(condition)`` whenever ``env`` settles a data-dependent question
    with a real value (the condition is the sympy boolean that became a runtime assert).

    Wraps ``ShapeEnv.guard_or_defer_runtime_assert`` on this one instance (the
    class is untouched); relies on torch naming those asserts with the
    ``propagate_real_tensors`` prefix.
    """
    inner = env.guard_or_defer_runtime_assert

    def guard_or_defer_runtime_assert(orig_expr: Any, msg: str, *args: Any, **kwargs: Any) -> Any:
        if isinstance(msg, str) and msg.startswith(REAL_VALUE_ASSERT_PREFIX):
            on_decision(orig_expr)
        return inner(orig_expr, msg, *args, **kwargs)

    env.guard_or_defer_runtime_assert = guard_or_defer_runtime_assert


def has_fake_kernel(op: Any) -> bool:
    """Whether operator ``op`` has a fake (meta) kernel; relies on ``torch._library.utils.has_fake_kernel``."""
    from torch._library.utils import has_fake_kernel as _has
    try:
        return bool(_has(op))
    except Exception:  # an operator torch cannot look up: treat as having one
        return True


def is_builtin_operator(op: Any) -> bool:
    """Whether ``op`` is one of torch's own (aten, prims, ...); relies on ``torch._library.utils.is_builtin``."""
    from torch._library.utils import is_builtin
    try:
        return bool(is_builtin(op))
    except Exception:
        return True


def real_tensor_of(fake: Any) -> Optional[Any]:
    """The real tensor propagated beside a fake one, or None."""
    return getattr(fake, "real_tensor", None)


def carry_real_tensor(source: Any, copy: Any) -> None:
    """Give ``copy`` (a fake tensor equal to ``source``, in another fake mode) the real tensor
    propagated beside ``source``, if any: a draft export's values keep their real data."""
    real = getattr(source, "real_tensor", None)
    if real is not None:
        copy.real_tensor = real
