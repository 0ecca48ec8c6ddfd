"""torch's fake tensors (``torch._subclasses.fake_tensor``).

graphcap runs the user's program on fake tensors: tensors with shapes, dtypes
and devices but no data, whose sizes may be ShapeEnv symbols. The classes live
in a private package; they are re-exported unchanged. Whether two tensors
(fake ones included) share a storage is read from the storage's private
identity.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from .dispatch import backend_kernels_off
from .ops import schema_of
from .thread_scoped import ThreadScopedPatch

RELIES_ON = {
    "torch._subclasses.fake_tensor.FakeTensor": None,
    "torch._subclasses.fake_tensor.FakeTensorMode": None,
    "torch._subclasses.fake_tensor.FakeTensor#fake_mode": None,
    "torch._subclasses.fake_tensor.FakeTensor#constant": None,
    "torch._subclasses.fake_tensor.UnsupportedOperatorException": None,
    "torch.UntypedStorage#_cdata": None,
    "torch._subclasses.fake_tensor.FakeTensorConverter.from_meta_and_device": ("self", "fake_mode", "t", "device"),
    "torch._subclasses.fake_tensor.FakeTensorMode#fake_tensor_converter": None,
    "torch._subclasses.fake_tensor.FakeTensorConverter#meta_converter": None,
    "torch._subclasses.meta_utils.MetaConverter#tensor_memo": None,
    "torch._subclasses.fake_tensor.FakeTensorMode#propagate_real_tensors": None,
    "torch._subclasses.fake_tensor.FakeTensorConverter.set_tensor_memo": ("self", "t", "v"),
    "torch._subclasses.fake_tensor.FakeTensorMode._cached_dispatch_impl": ("self", "func", "types", "args", "kwargs"),
    "torch._subclasses.fake_tensor.FakeTensorMode._dispatch_impl": ("self", "func", "types", "args", "kwargs"),
    "torch._ops.OpOverload#is_view": None,
    "torch.Tensor._is_view": None,
    # the fake kernels by operator (read at each call) and the slice kernel's bound clamp
    "torch._subclasses.fake_impls.op_implementations_dict": None,
    "torch._subclasses.fake_impls._compute_slice_index": ("size", "index"),
    # the overlap question of copy_'s and the scatters' meta kernels, asked without a guard
    "torch._debug_has_internal_overlap": None,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.suppress_guards": ("self",),
    # what __torch_dispatch__ calls, wrapped per instance by tracing_fake_mode
    "torch._subclasses.fake_tensor.FakeTensorMode.dispatch": ("self", "func", "types", "args", "kwargs"),
    "torch._subclasses.fake_tensor.FakeTensorConverter.from_real_tensor": None,
    # the Python decompositions fake tensors run for operators without a meta kernel
    "torch._decomp.decomposition_table": None,
    # the fake convolution asks the backend choice (oneDNN, NNPACK) of the input's sizes
    "torch._C._select_conv_backend": None,
}

SAMPLES = {
    "torch._subclasses.fake_tensor.FakeTensor": lambda: FakeTensorMode().from_tensor(torch.ones(2)),
    "torch.UntypedStorage": lambda: torch.UntypedStorage(1),
}

__all__ = ["FakeTensor", "FakeTensorMode", "tracing_fake_mode", "unsupported_operator_error", "same_storage",
           "storage_key", "fake_from_meta", "fake_of_plain_leaf", "slice_ends_clamped_symbolically",
           "one_argument_where_decomposed", "copies_check_broadcast_only", "holds_constant",
           "EMBEDDING_OF_META_WEIGHTS_SINCE", "embedding_takes_meta_weights"]


def tracing_fake_mode(**options: Any) -> FakeTensorMode:
    """The fake mode graphcap traces with: torch's (``options`` go to its constructor), but views
    of symbolically sized tensors skip the operator cache, and an operator never writes a real
    tensor (:func:`_fakes_for_written_real_tensors`: export must not change the user's tensors).

    The fake mode caches each operator's output metadata by its arguments;
    outputs with symbolic sizes are cached in the export's own shape
    environment, so they are reused only within one export. Rebuilding a
    cached view from its entry (a new tensor, then ``set_`` onto the base's
    storage, both with symbolic sizes and strides) costs more symbolic
    arithmetic than the view's kernel does: with dynamic shapes, skipping the
    cache for those views alone makes exports 12-27% faster (resnet18,
    MobileNetV3, ViT, BERT, GPT-2; ``bench/RESULTS.md``). The results are the
    same either way: a cache hit is checked to equal what the kernel gives.
    Every other operator, and every view of a static tensor, uses the cache.

    The mode stays of torch's class (higher-order operators find their fake
    rules by the mode's exact type); the choice is this instance's
    ``_cached_dispatch_impl``.

    Convolutions run their fake kernel with the oneDNN, cuDNN and NNPACK backends off
    (:data:`_BACKEND_CHOOSING_OPERATORS`), in every call through this mode: at export, in
    ``run_decompositions``, and in a consumer's passes over the program (ExecuTorch's
    ``to_edge`` re-runs each operator in the program's fake mode, with the backends on). The
    kernel asks the backend choice ``batch >= 16`` of a symbolic batch, which becomes a guard
    that narrows the program's batch range to one side of 16 (``docs/consumers.md``,
    "Convolutions and a dynamic batch"). The recorded operator and the layout the program
    carries are the ones the trace computed with the backends off.

    Relies on ``FakeTensorMode._cached_dispatch_impl`` and ``_dispatch_impl``
    (called with the same arguments) and ``OpOverload.is_view``.
    """
    mode = FakeTensorMode(**options)
    cached, uncached = mode._cached_dispatch_impl, mode._dispatch_impl

    def dispatch(func, types, args, kwargs):
        if getattr(func, "is_view", False) and _symbolic_tensor_among(args):
            return uncached(func, types, args, kwargs)
        if func in _BACKEND_CHOOSING_OPERATORS:
            with backend_kernels_off():
                return cached(func, types, args, kwargs)
        return cached(func, types, args, kwargs)
    mode._cached_dispatch_impl = dispatch

    plain = mode.dispatch

    def dispatch_writing_fakes(func, types, args, kwargs):
        if _written_arguments(func):
            args, kwargs = _fakes_for_written_real_tensors(mode, func, args, kwargs)
        return plain(func, types, args, kwargs)
    mode.dispatch = dispatch_writing_fakes  # type: ignore[method-assign, assignment]
    return mode


# Operators whose fake kernel (torch's ``fake_impls.conv``) calls ``torch._C._select_conv_backend``
# on the input's sizes when they have hints: with oneDNN or NNPACK on, the choice compares the batch
# with 16 and guards a symbolic batch; with them off it asks nothing of the sizes.
_BACKEND_CHOOSING_OPERATORS = frozenset({
    torch.ops.aten.convolution.default,
    torch.ops.aten._convolution.default,
    torch.ops.aten._convolution.deprecated,
    torch.ops.aten.convolution_backward.default,
})

_WRITTEN_ARGUMENTS: dict[Any, tuple] = {}


def _written_arguments(func: Any) -> tuple:
    """(position, name) of each argument the operator writes, from its schema; cached by operator."""
    known = _WRITTEN_ARGUMENTS.get(func)
    if known is None:
        schema = schema_of(func)
        known = tuple((i, a.name) for i, a in enumerate(schema.arguments)
                      if a.alias_info is not None and a.alias_info.is_write) if schema is not None else ()
        _WRITTEN_ARGUMENTS[func] = known
    return known


def _fakes_for_written_real_tensors(mode: FakeTensorMode, func: Any, args: tuple, kwargs: dict) -> tuple:
    """``(args, kwargs)`` with every real tensor the operator writes replaced by the mode's fake of it.

    The fake mode runs an operator whose tensor arguments are all real on the real tensors (its
    constant propagation, for ``add_``, ``mul_`` and the like): a traced ``self.holder.t.add_(1)``
    would write the user's tensor. Converted first, the write goes to a fake: the state's fake when
    the tensor is a parameter or buffer reached through another object (the mode's memo maps it
    there), otherwise a constant's fake, whose write the lifting step refuses
    (``graphcap.trace.constant_writes``).
    Relies on ``FakeTensorMode.dispatch`` being what its ``__torch_dispatch__`` calls (looked up on
    the instance) and ``FakeTensorConverter.from_real_tensor`` (the schema: :func:`.ops.schema_of`)."""
    new_args, new_kwargs = list(args), dict(kwargs)
    for i, name in _written_arguments(func):
        in_args = i < len(new_args)
        value = new_args[i] if in_args else new_kwargs.get(name)
        if isinstance(value, (list, tuple)):
            new = type(value)(_fake_of_real(mode, v) for v in value)
        else:
            new = _fake_of_real(mode, value)
        if new is value:
            continue
        if in_args:
            new_args[i] = new
        else:
            new_kwargs[name] = new
    return tuple(new_args), new_kwargs


def _fake_of_real(mode: FakeTensorMode, value: Any) -> Any:
    if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor) \
            and type(value) in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
        return mode.fake_tensor_converter.from_real_tensor(mode, value)
    return value


def _symbolic_tensor_among(args) -> bool:
    """Whether a tensor in ``args`` (a view's operands: tensors, ints, lists of ints) has a symbolic
    size, or an argument is a symbolic int."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if any(isinstance(d, torch.SymInt) for d in a.shape):
                return True
        elif isinstance(a, torch.SymInt):
            return True
        elif isinstance(a, (list, tuple)) and any(isinstance(d, torch.SymInt) for d in a):
            return True
    return False


def holds_constant(t: FakeTensor) -> bool:
    """Whether the fake tensor carries a real value beside its layout (a small constant the fake
    mode propagates through operators). Relies on ``FakeTensor.constant``."""
    return t.constant is not None


def fake_from_meta(fake_mode: FakeTensorMode, meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A fake tensor of ``fake_mode`` over ``meta`` (a fresh meta tensor, sizes possibly symbolic) on ``device``.

    What the mode does itself once a meta kernel has run; building a tensor
    this way skips the operator dispatch (and its cache), which dominates
    loading a program of thousands of nodes.

    Relies on ``FakeTensorMode.fake_tensor_converter.from_meta_and_device``.
    """
    return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, device)


def storage_extent(shape: Any, stride: Any, offset: Any = 0) -> Any:
    """The elements a storage needs for a tensor of this layout: ``offset + 1 + sum((size - 1) *
    stride)``, and at offset 0 none when a size is 0, as c10 counts it for ``empty_strided`` (a
    symbolic size is taken as nonzero there too). Symbolic when the layout is.

    None at offset 0 when the shape engine cannot tell without a guard that a symbolic extent is
    not negative (a size that may be 0 or 1, an unbacked size): ``torch.empty`` of it would check
    that, adding a guard or a runtime assert the program does not have, so such a layout is
    built by ``empty_strided`` (:func:`meta_with_layout`), whose storage size needs no check."""
    if isinstance(offset, int) and offset == 0 and any(isinstance(s, int) and s == 0 for s in shape):
        return 0
    extent = offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1
    if isinstance(offset, int) and offset == 0 and isinstance(extent, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import statically_known_true
        if not statically_known_true(extent >= 0):
            return None
    return extent


_NOT_GIVEN: Any = object()


def meta_with_layout(shape: Any, stride: Any, offset: Any, dtype: torch.dtype,
                     extent: Any = _NOT_GIVEN) -> torch.Tensor:
    """A meta tensor of this layout over a storage of its own, of ``extent`` elements
    (:func:`storage_extent`'s; worked out here when not given, at a nonzero offset).

    A static layout at offset 0, or a symbolic one without a given extent, is ``empty_strided``'s.
    Otherwise it is a one-dimensional tensor of the extent viewed with the layout: with symbolic
    sizes ``empty_strided`` has c10 work out the storage size and contiguity through Python
    symbol arithmetic (20 operations, ~150 us a tensor), the view takes 8, and a caller that
    makes many tensors of one layout (a program's repeated layers) works the extent out once
    and passes it. Sizes, strides, offset and the storage's size come out the same either way."""
    at_zero = isinstance(offset, int) and offset == 0
    symbolic = any(isinstance(d, torch.SymInt) for d in (*shape, *stride))
    if at_zero and (not symbolic or extent is _NOT_GIVEN or extent is None):
        # static, or no extent worked out once by the caller (working it out and checking it for one
        # tensor costs what empty_strided does), or one not known to be nonnegative (storage_extent)
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if extent is _NOT_GIVEN:
        extent = storage_extent(shape, stride, offset)
    return torch.empty((extent,), dtype=dtype, device="meta").as_strided(shape, stride, offset)


def fake_with_layout(fake_mode: FakeTensorMode, shape: Any, stride: Any, offset: Any, dtype: torch.dtype,
                     device: torch.device, requires_grad: bool, extent: Any = _NOT_GIVEN) -> torch.Tensor:
    """A fake tensor of ``fake_mode`` with the given layout (sizes, strides and offset possibly
    symbolic), built on the meta device (:func:`meta_with_layout`, ``extent`` as there) and
    wrapped (:func:`fake_from_meta`). ``requires_grad`` is set only where a tensor may hold it
    (floating point, complex)."""
    meta = meta_with_layout(shape, stride, offset, dtype, extent)
    fake = fake_from_meta(fake_mode, meta, device)
    if requires_grad and (dtype.is_floating_point or dtype.is_complex):
        with fake_mode:
            fake.requires_grad_(True)
    return fake


def fake_of_plain_leaf(fake_mode: FakeTensorMode, t: torch.Tensor) -> Optional[torch.Tensor]:
    """The fake copy ``fake_mode.from_tensor(t, static_shapes=True)`` gives, built directly; None
    when ``fake_mode`` propagates real tensors beside the fake ones (draft export), which only
    ``from_tensor`` sets up.

    Also None when ``t`` is not a plain leaf (:func:`_plain_leaf`). The caller
    checks that ``t`` shares its storage with no other tensor of the trace: a
    parameter or buffer as modules hold them. ``from_tensor`` describes every
    tensor in full (views, subclasses, storage aliasing) before building it, a
    tenth of a warm export of resnet18; this builds the meta tensor, wraps it,
    and records it in the converter's memo, so that meeting ``t`` again gives
    this fake tensor.

    Relies on ``FakeTensorMode.propagate_real_tensors``,
    ``FakeTensorConverter.from_meta_and_device``, ``set_tensor_memo``,
    ``Tensor._is_view`` and the ``_is_buffer`` marker of ``nn.Buffer``.
    """
    if fake_mode.propagate_real_tensors or not _plain_leaf(t):
        return None
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    fake = fake_from_meta(fake_mode, meta, t.device)
    if t.requires_grad:
        fake.requires_grad_(True)
    if type(t) is torch.nn.Parameter:
        fake._is_param = True  # isinstance(fake, nn.Parameter) holds, as for from_tensor's copy
    fake_mode.fake_tensor_converter.set_tensor_memo(t, fake)
    return fake


def _plain_leaf(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dense strided tensor that owns its storage from offset 0, with nothing
    ``from_tensor`` would treat specially (subclass, view, autograd history, conjugate or
    negative bit, a storage resized to nothing, an ``nn.Buffer`` marker)."""
    return (type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout is torch.strided
            and t.is_leaf and not t._is_view() and t.storage_offset() == 0
            and not (t.is_quantized or t.is_mkldnn or t.is_conj() or t.is_neg() or t.is_nested)
            and t.device.type not in ("lazy", "xla")
            and storage_key(t) is not None
            and (t.untyped_storage().nbytes() > 0 or t.numel() == 0)
            and not hasattr(t, "_is_buffer"))


def unsupported_operator_error() -> type:
    """The exception a fake tensor raises for an operator it has no fake kernel for (``.func`` is the operator).

    Relies on ``torch._subclasses.fake_tensor.UnsupportedOperatorException``.
    """
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    return UnsupportedOperatorException


def storage_key(t: torch.Tensor) -> Optional[int]:
    """The identity of ``t``'s storage (fake and meta tensors included); None without one.

    Relies on ``UntypedStorage._cdata``.
    """
    try:
        return t.untyped_storage()._cdata
    except Exception:  # a tensor without storage (sparse, nested, ...): not an alias we can tell
        return None


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors (fake ones included) share one storage."""
    key = storage_key(a)
    return key is not None and key == storage_key(b)


def converter_memo(fake_mode: Any) -> Any:
    """The memo through which ``fake_mode`` keeps each fake tensor it converted from a real one
    (``FakeTensorMode.fake_tensor_converter.meta_converter.tensor_memo``), or None."""
    converter = getattr(fake_mode, "fake_tensor_converter", None)
    return getattr(getattr(converter, "meta_converter", None), "tensor_memo", None)


def _sample_converter() -> Any:
    return FakeTensorMode().fake_tensor_converter


SAMPLES.update({
    "torch._subclasses.fake_tensor.FakeTensorConverter": _sample_converter,
    "torch._subclasses.meta_utils.MetaConverter": lambda: _sample_converter().meta_converter,
})


# --- slice bounds the shape engine cannot order (torch 2.10, 2.11) ------------------------------

def _install_symbolic_slice() -> dict[str, Any]:
    from torch._subclasses import fake_impls
    saved = {"index": fake_impls._compute_slice_index,
             "slice": fake_impls.op_implementations_dict[torch.ops.aten.slice.Tensor]}
    fake_impls.op_implementations_dict[torch.ops.aten.slice.Tensor] = _symbolic_slice
    return saved


def _restore_slice(saved: dict[str, Any]) -> None:
    from torch._subclasses import fake_impls
    fake_impls.op_implementations_dict[torch.ops.aten.slice.Tensor] = saved["slice"]


_SYMBOLIC_SLICE = ThreadScopedPatch(_install_symbolic_slice, _restore_slice)


def _slice_keeps_undecided_sizes_symbolic() -> bool:
    """Whether this torch's slice fake kernel already gives a slice whose bounds it cannot order a
    symbolic size (``Min(n, size)``, ``Max(0, end - start)``), from torch 2.12 on; before, it gives
    such a slice a new unbacked size."""
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 12)


def _slice_bound(size: Any, index: Any) -> Any:
    """A slice bound clamped into ``[0, size]``: torch's own clamp where it decides, else the clamp
    as a symbolic expression (None where even the sign of ``index`` is unknown)."""
    found = _SYMBOLIC_SLICE.saved["index"](size, index)
    if found is not None:
        return found
    from torch.fx.experimental.symbolic_shapes import guard_or_false
    if guard_or_false(index >= 0):
        return torch.sym_min(index, size)
    if guard_or_false(index < 0):
        return torch.sym_max(index + size, 0)
    return None


def _symbolic_slice(fake_mode: Any, func: Any, self: Any, dim: int = 0, start: Any = None, end: Any = None,
                    step: int = 1) -> Any:
    """``aten.slice.Tensor`` on fake tensors, on the exporting thread: bounds clamped into the size
    (symbolically where the shape engine cannot decide), and the view's length ``Max(0, end -
    start)`` where it cannot order them, instead of a new unbacked size. torch's own kernel does the
    rest (other threads, 0-dim and quantized tensors, bad steps, a bound of unknown sign)."""
    original = _SYMBOLIC_SLICE.saved["slice"]
    if not _SYMBOLIC_SLICE.in_scope() or self.dim() == 0 or step <= 0 or self.is_quantized:
        return original(fake_mode, func, self, dim, start, end, step)
    import sys

    from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true
    dim = dim % self.dim()
    sizes, strides = list(self.size()), list(self.stride())
    first = 0 if start is None else _slice_bound(sizes[dim], start)
    stop = sizes[dim] if end is None or statically_known_true(end == sys.maxsize) else _slice_bound(sizes[dim], end)
    if first is None or stop is None:
        return original(fake_mode, func, self, dim, start, end, step)  # a bound of unknown sign: torch's answer
    if guard_or_false(stop >= first):
        length = (stop - first + step - 1) // step
    elif guard_or_false(first >= stop):
        length = 0
    else:
        length = (torch.sym_max(stop - first, 0) + step - 1) // step
    offset = self.storage_offset() + first * strides[dim]
    sizes[dim], strides[dim] = length, strides[dim] * step
    return self.as_strided(sizes, strides, offset)


@contextlib.contextmanager
def slice_ends_clamped_symbolically() -> Iterator[None]:
    """While tracing on this thread, ``t[..., :n]`` / ``t[k:]`` whose bounds the shape engine cannot
    order against the size (or each other) get a symbolic length (``Min(n, size)``,
    ``Max(0, size - Min(k, size))``), as from torch 2.12 on.

    Before 2.12 the slice fake kernel gave such a slice a new unbacked size:
    the copy into it (``mask[..., :n] = v``, the causal-mask update of decoder
    models) failed on a data-dependent guard eager never meets, and ``x + y[4:]``
    lost its relation between the dims of ``x`` and ``y``. While a recording
    runs on an older torch, the fake kernel registered for ``aten.slice.Tensor``
    and its bound clamp are graphcap's for the exporting thread and torch's own
    for every other thread (set by the first recording, restored by the last).
    A no-op from torch 2.12 on.

    Relies on ``torch._subclasses.fake_impls.op_implementations_dict`` (the fake
    kernels by operator, read at each call) and ``_compute_slice_index(size,
    index)`` (None for a bound it cannot decide).
    """
    if _slice_keeps_undecided_sizes_symbolic():
        yield
        return
    with _SYMBOLIC_SLICE.active():
        yield


# --- copy_ checks the broadcast it performs, not a stride assumption -----------------------------

_COPY_OPS = ("copy_", "copy")


def _install_copy_rules() -> dict[Any, Any]:
    from torch._subclasses import fake_impls
    table = fake_impls.op_implementations_dict
    saved = {}
    for name in _COPY_OPS:
        op = getattr(torch.ops.aten, name).default
        saved[op] = table[op]
        table[op] = _copy_checking_broadcast
    return saved


def _restore_copy_rules(saved: dict[Any, Any]) -> None:
    from torch._subclasses import fake_impls
    fake_impls.op_implementations_dict.update(saved)


_COPY_RULES = ThreadScopedPatch(_install_copy_rules, _restore_copy_rules)


def _has_symbolic_size(*tensors: Any) -> bool:
    return any(isinstance(d, torch.SymInt) for t in tensors for d in (*t.shape, *t.stride()))


def _copy_checking_broadcast(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``aten.copy_`` / ``aten.copy`` on fake tensors, on the exporting thread: the source must
    broadcast to the destination (each size 1 or equal, checked as eager checks it), and nothing
    more; the rest (the written tensor's own overlap, asked without a guard where it cannot
    overlap at any size, and the dtype and device conversion) is torch's kernel's, run on a
    stand-in source of the destination's sizes.

    torch's kernel checks the broadcast by expanding the source, and the expansion's stride rule
    adds, for a size that may be 1 but is not known to be, the assumption that it is not
    broadcast (``Eq(n, target)``): a program that copies a size-1 value into a slice of another
    length would refuse it, where eager broadcasts. The expanded tensor is discarded (a copy's
    result is its destination), so only the broadcast condition belongs in the program.
    Other threads, and copies between tensors of static layout, keep torch's kernel."""
    original = _COPY_RULES.saved[func]
    names = ("self", "src", "non_blocking")
    bound = dict(zip(names, args), **kwargs)
    self, src = bound.get("self"), bound.get("src")
    if not _COPY_RULES.in_scope() or not isinstance(self, torch.Tensor) or not isinstance(src, torch.Tensor) \
            or not _has_symbolic_size(self, src):
        return original(fake_mode, func, *args, **kwargs)
    from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_or
    target, given = list(self.shape), list(src.shape)
    torch._check(len(given) <= len(target), lambda: (
        f"copy_: the source of shape {tuple(given)} has more dimensions than the destination of "
        f"shape {tuple(target)}"))
    for size, want in zip(reversed(given), reversed(target)):
        if statically_known_true(size == want) or statically_known_true(size == 1):
            continue
        torch._check(sym_or(size == 1, size == want), lambda size=size, want=want: (
            f"copy_: the source's size {size} must be 1 or the destination's size {want}"))
    with fake_mode:
        stand_in = torch.empty_strided(target, self.stride(), dtype=src.dtype, device=src.device)
    bound["src"] = stand_in
    # what is left to ask is the destination's own overlap (``aten.copy``'s C++ kernel asks it too)
    with _layout_questions_unguarded(self):
        return original(fake_mode, func, *(bound[n] for n in names if n in bound))


def _install_overlap_rule() -> Any:
    saved = torch._debug_has_internal_overlap
    torch._debug_has_internal_overlap = _overlap_asked_without_guards
    return saved


def _restore_overlap_rule(saved: Any) -> None:
    torch._debug_has_internal_overlap = saved


_OVERLAP_RULE = ThreadScopedPatch(_install_overlap_rule, _restore_overlap_rule)


def _overlap_asked_without_guards(t: Any) -> Any:
    """Whether ``t`` writes one element twice (torch's answer), asked by a copy's or a scatter's
    fake kernel. Its answer is "yes" only along a dim of stride 0; a symbolically sized tensor with
    none cannot overlap at any size, so the sizes the check reads (is one 1, ``batch >= 2``) are
    read at their examples without recording a guard, which would otherwise narrow a range such as
    [1, 2] to one value and pin the size."""
    with _layout_questions_unguarded(t) if _OVERLAP_RULE.in_scope() else contextlib.nullcontext():
        return _OVERLAP_RULE.saved(t)


def _layout_questions_unguarded(t: Any) -> Any:
    """A context in which the size questions of an overlap check of ``t`` record no guard, when
    ``t`` is symbolically sized and has no dim of stride 0 (so cannot overlap at any size)."""
    if not isinstance(t, torch.Tensor) or not _has_symbolic_size(t) \
            or any(not isinstance(st, torch.SymInt) and st == 0 for st in t.stride()):
        return contextlib.nullcontext()
    return next(d.node.shape_env for d in (*t.shape, *t.stride()) if isinstance(d, torch.SymInt)).suppress_guards()


@contextlib.contextmanager
def copies_check_broadcast_only() -> Iterator[None]:
    """While tracing on this thread, a copy between symbolically sized tensors
    (``dst.copy_(src)``, ``t[..., :n] = v``) records only the condition eager checks: every size
    of the source is 1 or the destination's (:func:`_copy_checking_broadcast`); and a copy's or a
    scatter's question whether the destination overlaps itself records no guard where it cannot
    at any size (:func:`_overlap_asked_without_guards`). Every other thread keeps torch's.

    Relies on ``torch._subclasses.fake_impls.op_implementations_dict`` (fake kernels by
    operator, read at each call; ``aten.copy_`` and ``aten.copy`` have an entry there) and on
    ``torch._debug_has_internal_overlap`` (looked up at each call by the meta kernels of
    ``copy_`` and of the scatters).
    """
    with _COPY_RULES.active(), _OVERLAP_RULE.active():
        yield


# --- the one-argument aten.where kept whole (torch 2.10, 2.11) -------------------------------------

def _install_where_rule() -> None:
    from torch._subclasses import fake_impls
    fake_impls.op_implementations_dict[torch.ops.aten.where.default] = _where_of_one_argument


def _remove_where_rule(_saved: None) -> None:
    from torch._subclasses import fake_impls
    fake_impls.op_implementations_dict.pop(torch.ops.aten.where.default, None)


_WHERE_RULE = ThreadScopedPatch(_install_where_rule, _remove_where_rule)


def _where_of_one_argument(fake_mode: Any, func: Any, condition: Any) -> Any:
    """``aten.where.default(condition)`` on fake tensors: the indices of the true elements, one
    tensor per dim, each of a new data-dependent length (what ``torch.nonzero(as_tuple=True)``
    gives). Torch's own path on every thread but a retracing one."""
    if not _WHERE_RULE.in_scope():
        return NotImplemented
    with fake_mode:
        return tuple(torch.nonzero(condition, as_tuple=True))


@contextlib.contextmanager
def one_argument_where_decomposed() -> Iterator[None]:
    """While a decomposition retrace runs on this thread, fake tensors compute the metadata of
    ``aten.where.default(condition)`` kept whole (its outputs' sizes come from the data).

    From torch 2.12 on, torch's decomposition table has an entry for it, which fake tensors run.
    Before, the fake tensor falls through to the composite kernel under the meta device, where
    ``nonzero`` refuses ("data-dependent output"), and ``run_decompositions`` of a program that
    calls ``torch.where(mask)`` failed. On those lines graphcap registers its own fake rule for
    the operator (the same result as torch's later entry) for the retracing thread only; every
    other thread keeps torch's behaviour; the first entry registers, the last exit removes it.

    Relies on ``torch._decomp.decomposition_table`` (whether torch has the entry) and
    ``torch._subclasses.fake_impls.op_implementations_dict`` (fake rules by operator, read at each
    call).
    """
    from torch._decomp import decomposition_table
    where = torch.ops.aten.where.default
    from torch._subclasses import fake_impls
    if where in decomposition_table or fake_impls.op_implementations_dict.get(where, _where_of_one_argument) \
            is not _where_of_one_argument:  # torch has its own rule
        yield
        return
    with _WHERE_RULE.active():
        yield


# --- aten.item's fake rule, where torch.export's run_decompositions removed it ---------------------

@contextlib.contextmanager
def item_rule_present() -> Iterator[None]:
    """Within the block, fake tensors compute ``aten.item`` kept whole (a table that decomposes
    nothing) as torch registers it at import: a new data-dependent value, the rule of
    ``aten._local_scalar_dense``.

    torch.export's ``run_decompositions`` (2.14) patches the fake rules of the composites it keeps
    and, when done, removes the rule of each of them, ``aten.item``'s own included: after any
    torch.export decomposition in the process, graphcap's ``run_decompositions({})`` of a program
    calling ``.item()`` failed ("DataDependentOutputException: aten.item.default"). Where the rule
    is missing it is put back for the block and removed after (the process is left as found).

    Relies on ``torch._subclasses.fake_impls.op_implementations_dict`` (fake rules by operator,
    read at each call).
    """
    from torch._subclasses import fake_impls
    table = fake_impls.op_implementations_dict
    item, scalar = torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default
    if item in table or scalar not in table:
        yield
        return
    table[item] = table[scalar]
    try:
        yield
    finally:
        if table.get(item) is table.get(scalar):
            table.pop(item, None)


# --- aten.embedding with meta weights and real indices (torch 2.13 on) ----------------------------

# the first torch release whose fake tensors run aten.embedding on weights on the meta device and
# indices on another device (the meta kernel's output, on meta), as eager does
EMBEDDING_OF_META_WEIGHTS_SINCE = "2.13"


def embedding_takes_meta_weights() -> bool:
    """Whether this torch's fake tensors accept ``aten.embedding`` over meta weights and indices on
    another device: what exporting a model built on the meta device with real example inputs needs
    (a Llama's first operator). Before it, the fake tensor refuses the two devices."""
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= tuple(int(p) for p in EMBEDDING_OF_META_WEIGHTS_SINCE.split("."))
