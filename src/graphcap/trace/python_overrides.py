"""Python constructs that plain Python cannot run on symbolic values, made traceable.

Non-strict capture runs the user's Python as it is. A few everyday constructs
would then need a concrete value where the trace only has a symbol read from
data (an unbacked ``SymInt`` such as ``u0 = y.item()``):

* ``max(n, 128)`` / ``min(...)`` compare their arguments with ``>``/``<``,
  which needs to *decide* the comparison; ``torch.sym_max`` / ``sym_min``
  record it instead. On tensors they become ``torch.maximum`` /
  ``torch.minimum`` (or a ``clamp`` against a number), as a compiler would.
* ``math.pow(p, 10)`` converts its arguments to ``float``; ``sym_float(p) ** 10``
  keeps them symbolic (and the result a float, as ``math.pow`` gives).
* ``t[i, :j]`` with a symbolic ``i``/``j`` (or an integer 0-dim tensor) is
  refused by the tensor indexing code, which accepts only Python ints; the
  same index is spelled with ``select`` / ``slice`` / ``unsqueeze``, which
  take symbolic integers.
* ``torch.tensor([u0])`` with symbolic data is built by torch's reference
  implementation, which records the value instead of reading it.
* the legacy in-place collectives of ``torch.distributed`` are redirected to
  their functional (traceable) forms.
* ``with torch.inference_mode():`` (or ``@torch.inference_mode()`` on forward) switches grad off
  in a way the recorder does not see, so the program's outputs required grad where eager's do
  not, and a ``no_grad`` block inside it, restoring "off" on its way out, took the rest of forward
  into its region. While an export traces, entering inference mode also records a switch of grad
  off, and leaving it a switch back to the mode before it: a grad region, as ``no_grad``'s
  (eager is unchanged: grad is off in inference mode anyway).
* ``t.random_(low, high)`` records ``aten.random_.from``, an overload whose name is
  a Python keyword: no graph holding it can be written as code (torch.export
  fails the same way). It is spelled ``random_(high - low)`` then ``add_(low)``, which
  draws the same numbers from the generator (``low + r % (high - low)``), on an int64
  tensor of ``t``'s layout copied into ``t`` when ``t`` is narrower (``high - low`` may not
  fit an int8).

Everything is active only inside :func:`installed`, on the thread that runs the
export: the replaced builtins delegate to the originals on other threads and
are put back when the last export leaves.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import math
import threading
from typing import Any, Callable, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

from ..torch_private import pytree
from ..torch_private.decomp import tensor_from_symbolic_data
from ..torch_private.dispatch import is_batched_tensor

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

_state = threading.local()
_install_lock = threading.Lock()
_install_count = 0
_BUILTIN_MAX, _BUILTIN_MIN, _MATH_POW = builtins.max, builtins.min, math.pow
_ORIGINAL = {"max": _BUILTIN_MAX, "min": _BUILTIN_MIN, "pow": _MATH_POW}


def _active() -> bool:
    return getattr(_state, "depth", 0) > 0


# -- builtins ---------------------------------------------------------------

def _pairwise(a: Any, b: Any, *, is_max: bool) -> Any:
    """``max(a, b)`` / ``min(a, b)`` without deciding a comparison of symbolic values."""
    a_tensor, b_tensor = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if a_tensor and b_tensor:
        return torch.maximum(a, b) if is_max else torch.minimum(a, b)
    if a_tensor or b_tensor:
        tensor, other = (a, b) if a_tensor else (b, a)
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return torch.clamp(tensor, min=other) if is_max else torch.clamp(tensor, max=other)
    elif isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        if all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in (a, b)):
            return torch.sym_max(a, b) if is_max else torch.sym_min(a, b)
    original = _ORIGINAL["max" if is_max else "min"]
    return original(a, b)


def _min_max(*args: Any, is_max: bool, **kwargs: Any) -> Any:
    original = _ORIGINAL["max" if is_max else "min"]
    # dynamo (capturing a control-flow body) knows the builtins itself; elsewhere only our thread
    if torch.compiler.is_dynamo_compiling() or not _active() or kwargs:
        return original(*args, **kwargs)
    if len(args) == 1:
        (iterable,) = args
        if isinstance(iterable, torch.Tensor):
            return original(iterable)  # iterating a tensor: keep Python's meaning
        try:
            items = list(iterable)
        except TypeError:
            return original(*args)
        if not any(isinstance(v, (torch.Tensor, torch.SymInt)) for v in items):
            return original(items)  # (the iterable is consumed: pass the list)
    else:
        items = list(args)
        if not any(isinstance(v, (torch.Tensor, torch.SymInt)) for v in items):
            return original(*args)
    return functools.reduce(lambda a, b: _pairwise(a, b, is_max=is_max), items)


def _traceable_max(*args: Any, **kwargs: Any) -> Any:
    if torch.compiler.is_dynamo_compiling():
        return _BUILTIN_MAX(*args, **kwargs)
    return _min_max(*args, is_max=True, **kwargs)


def _traceable_min(*args: Any, **kwargs: Any) -> Any:
    if torch.compiler.is_dynamo_compiling():
        return _BUILTIN_MIN(*args, **kwargs)
    return _min_max(*args, is_max=False, **kwargs)


def _traceable_pow(x: Any, y: Any) -> Any:
    if not torch.compiler.is_dynamo_compiling() and _active() and any(isinstance(v, _SYMBOLIC) for v in (x, y)):
        return torch.sym_float(x) ** y  # math.pow gives a float, even of ints
    return _ORIGINAL["pow"](x, y)


_traceable_max.__name__, _traceable_min.__name__, _traceable_pow.__name__ = "max", "min", "pow"


_INFERENCE_ENTER, _INFERENCE_EXIT = torch.inference_mode.__enter__, torch.inference_mode.__exit__


def _inference_mode_enter(self: Any) -> None:
    self._graphcap_grad_before = before = torch.is_grad_enabled()
    _INFERENCE_ENTER(self)
    after = torch.is_grad_enabled()
    if self.mode or after != before:  # inference_mode(False) may switch grad on
        torch.set_grad_enabled(after)  # recorded: the region's start


def _inference_mode_exit(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> None:
    inside = torch.is_grad_enabled()
    _INFERENCE_EXIT(self, exc_type, exc_value, traceback)
    if self.mode or inside != self._graphcap_grad_before:
        torch.set_grad_enabled(self._graphcap_grad_before)  # recorded: the region's end


def _apply_builtins() -> None:
    """Builtins (and inference mode's entry and exit) replaced while some export traces (caller
    holds the lock)."""
    if _install_count > 0:
        builtins.max, builtins.min, math.pow = _traceable_max, _traceable_min, _traceable_pow
        torch.inference_mode.__enter__ = _inference_mode_enter  # type: ignore[method-assign]
        torch.inference_mode.__exit__ = _inference_mode_exit  # type: ignore[method-assign]
    else:
        builtins.max, builtins.min, math.pow = _BUILTIN_MAX, _BUILTIN_MIN, _MATH_POW
        torch.inference_mode.__enter__ = _INFERENCE_ENTER  # type: ignore[method-assign]
        torch.inference_mode.__exit__ = _INFERENCE_EXIT  # type: ignore[method-assign]


@contextlib.contextmanager
def _builtins_replaced() -> Iterator[None]:
    global _install_count
    with _install_lock:
        _install_count += 1
        _apply_builtins()
    try:
        yield
    finally:
        with _install_lock:
            _install_count -= 1
            _apply_builtins()


# -- indexing ---------------------------------------------------------------

def _is_integer_scalar_tensor(item: Any) -> bool:
    return (isinstance(item, torch.Tensor) and item.ndim == 0 and not item.is_floating_point()
            and not item.is_complex() and item.dtype is not torch.bool
            and not is_batched_tensor(item))


def _as_index(item: Any) -> Any:
    return item.item() if _is_integer_scalar_tensor(item) else item


def _needs_rewrite(items: list) -> bool:
    for item in items:
        if isinstance(item, torch.SymInt) or _is_integer_scalar_tensor(item):
            return True
        if isinstance(item, slice) and any(
                isinstance(v, torch.SymInt) or _is_integer_scalar_tensor(v)
                for v in (item.start, item.stop, item.step)):
            return True
    return False


def _index_as_calls(t: torch.Tensor, index: Any) -> Optional[Callable[[], torch.Tensor]]:
    """``t[index]`` as a chain of ``select`` / ``slice`` / ``unsqueeze`` calls, or None to leave it."""
    items = list(index) if isinstance(index, tuple) else [index]
    if not _needs_rewrite(items):
        return None
    if sum(1 for i in items if i is Ellipsis) > 1:
        return None
    if any(i is Ellipsis for i in items):
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (t.ndim - consumed)
    steps: list[Callable[[torch.Tensor], torch.Tensor]] = []
    dim = 0
    for item in items:
        if item is None:
            steps.append(functools.partial(lambda d, x: torch.unsqueeze(x, d), dim))
            dim += 1
        elif isinstance(item, bool):
            return None  # t[True] adds a dimension: leave it to tensor indexing
        elif isinstance(item, (int, torch.SymInt)) or _is_integer_scalar_tensor(item):
            steps.append(functools.partial(lambda d, i, x: torch.select(x, d, _as_index(i)), dim, item))
        elif isinstance(item, slice):
            no_op = item.start is None and item.stop is None and (
                item.step is None or (type(item.step) is int and item.step == 1))
            if not no_op:
                step = 1 if item.step is None else item.step
                steps.append(functools.partial(  # every value bound now: a later slice's step is not this one's
                    lambda d, s, st, x: torch.ops.aten.slice(x, d, _as_index(s.start), _as_index(s.stop),
                                                             _as_index(st)), dim, item, step))
            dim += 1
        else:
            return None  # tensor / list indices: advanced indexing handles them

    def run() -> torch.Tensor:
        out = t
        for step in steps:
            out = step(out)
        return out

    return run


@functools.cache
def _collective_remapper() -> Optional[Callable]:
    """torch.distributed's map from a legacy collective call to its functional form, if available."""
    if not torch.distributed.is_available():
        return None
    from ..torch_private.decomp import traceable_collective_remapper
    return traceable_collective_remapper()


# what a tensor property read is handled as: the property's ``__get__``, a method-wrapper
_PROPERTY_READ = type(inspect.getattr_static(torch.Tensor, "shape").__get__)


class _TraceableCalls(TorchFunctionMode):
    """Redirects the torch calls listed in the module docstring to traceable equivalents."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if type(func) is _PROPERTY_READ and func.__name__ == "__get__":
            # reading a tensor property (``t.shape``, ``t.dtype``): none of the redirects applies, and
            # torch's tracer reads a dozen of them for every placeholder it tracks
            return func(*args, **kwargs) if kwargs else func(*args)
        seen = getattr(_state, "dtypes_seen", None)
        if seen is not None:  # the default dtype each torch call ran under (default_dtypes_seen)
            seen.add(torch.get_default_dtype())
        kwargs = kwargs or {}
        if torch.compiler.is_dynamo_compiling():  # a control-flow body dynamo captures: it knows these
            return func(*args, **kwargs)
        remap = _collective_remapper()
        if remap is not None:
            remapped = remap(func, args, kwargs)
            if remapped is not None:
                func, args, kwargs = remapped
        if func is _RANDOM_ and len(args) == 3 and args[2] is not None and isinstance(args[0], torch.Tensor):
            return _random_from_to(*args, **kwargs)
        if func is torch.tensor and args and any(
                isinstance(v, _SYMBOLIC) for v in pytree.tree_leaves(args[0])):
            return tensor_from_symbolic_data(*args, **kwargs)
        if getattr(func, "__name__", None) == "__setitem__" and len(args) == 3 and not kwargs \
                and isinstance(args[0], torch.Tensor) and isinstance(args[2], torch.Tensor):
            return _setitem_broadcast_by_copy(func, *args)
        if getattr(func, "__name__", None) == "__getitem__" and len(args) == 2 \
                and isinstance(args[0], torch.Tensor) and not kwargs:
            run = _index_as_calls(args[0], args[1])
            if run is not None:
                return run()
        return func(*args, **kwargs)


_RANDOM_ = torch.Tensor.random_


def _random_from_to(t: torch.Tensor, low: Any, high: Any, **kwargs: Any) -> torch.Tensor:
    """``t.random_(low, high)`` as ``random_(high - low)`` then ``add_(low)``: the same draw, the
    elements in the same order (an int64 stand-in keeps ``t``'s strides)."""
    target = t if t.dtype == torch.int64 else torch.empty_like(t, dtype=torch.int64)
    _RANDOM_(target, high - low, **kwargs)
    if not (isinstance(low, int) and low == 0):
        target.add_(low)
    if target is not t:
        t.copy_(target)
    return t


def _is_basic_index(index: Any) -> bool:
    """Whether ``index`` is made of slices, integers and Ellipsis only (no tensor, None, bool, list)."""
    items = index if isinstance(index, tuple) else (index,)

    def plain_int(v: Any) -> bool:
        return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)

    return all(i is Ellipsis or plain_int(i)
               or (isinstance(i, slice) and all(b is None or plain_int(b) for b in (i.start, i.stop, i.step)))
               for i in items)


def _setitem_broadcast_by_copy(setitem: Callable, t: torch.Tensor, index: Any, value: torch.Tensor) -> Any:
    """``t[index] = value`` where sizes are symbolic, recorded as eager computes it: ``copy_`` of
    ``value`` into the indexed view.

    torch's setitem copies ``value`` into the view directly when it can tell their sizes are
    equal, and otherwise first expands it; the expansion of a size that may be 1 records the
    assumption that it is not broadcast, so ``mask[..., :n] = v`` (the view's size ``Min(m, n)``)
    would refuse a size-1 ``v`` where eager broadcasts it. ``copy_`` broadcasts (and converts the
    dtype) itself, with exactly eager's condition, so a basic index (slices, integers, Ellipsis)
    is spelled as the view and its ``copy_``, whatever way this torch's setitem asks about the
    sizes. Eager setitem first drops the value's leading dims of size 1 beyond the view's rank;
    those are dropped here when they are static 1s, and anything else (advanced indexing,
    symbolic leading dims) as well as all-static sizes keep torch's own setitem."""
    if not any(isinstance(d, torch.SymInt) for d in (*t.shape, *value.shape)) or not _is_basic_index(index) \
            or is_batched_tensor(t) or is_batched_tensor(value):
        return setitem(t, index, value)
    run = _index_as_calls(t, index)
    view = run() if run is not None else t[index]
    extra = value.dim() - view.dim()
    if extra > 0:
        leading = value.shape[:extra]
        if not all(type(d) is int and d == 1 for d in leading):
            return setitem(t, index, value)
        value = value.view(value.shape[extra:])
    view.copy_(value)
    return None


@contextlib.contextmanager
def default_dtypes_seen() -> Iterator[set]:
    """The default dtypes (``torch.get_default_dtype()``) the torch calls of the trace run inside
    were made under, on this thread: more than the starting one when forward switched it
    (:mod:`graphcap.trace.default_dtype`)."""
    outer = getattr(_state, "dtypes_seen", None)
    seen: set = {torch.get_default_dtype()}
    _state.dtypes_seen = seen
    try:
        yield seen
    finally:
        _state.dtypes_seen = outer
        if outer is not None:
            outer |= seen


def reentered() -> contextlib.AbstractContextManager:
    """The traceable calls again, inside a block where torch turned function modes off (the
    branches of a control-flow operator), when they are installed in this thread."""
    return _TraceableCalls() if getattr(_state, "depth", 0) > 0 else contextlib.nullcontext()


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Make the constructs of the module docstring traceable for the trace run inside."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        with _builtins_replaced(), _TraceableCalls():
            yield
    finally:
        _state.depth -= 1
