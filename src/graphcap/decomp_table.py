"""Decomposition tables: which operators ``run_decompositions`` breaks down, and how.

A table maps an operator overload to a Python function that computes it from
other operators. Two kinds of entries make up the default table:

* the Python decompositions of ``torch._decomp`` that lead to core ATen;
* every functional operator with a ``CompositeImplicitAutograd`` kernel (the
  composites such as ``aten.conv2d`` or ``aten.linear``), decomposed by that
  kernel. There are hundreds of these and custom libraries add more, so they
  are *implied*, not listed: the table only enumerates them when asked to
  (``keys()``, ``items()``, ``materialize()``).

Deleting an entry keeps the operator whole in the graph; setting one installs
the user's function. :meth:`CustomDecompTable.decomposes` answers "is this
operator broken down?" without enumerating anything, and is what the
decomposition pass and the verifier ask.
"""
from __future__ import annotations

import functools
from collections.abc import MutableMapping
from typing import Any, Callable, Iterator, Mapping, Optional

import torch

from .composite_kernels import composite_kernel_of
from .errors import DecompTableError
from .torch_private.decomp import core_aten_decompositions_post_autograd, should_decompose_because_unsafe
from .torch_private.dispatch import DispatchKey, has_kernel, has_kernel_for_dispatch_key, registrations_for_dispatch_key
from .torch_private.ops import OpOverload, OpOverloadPacket, schema_of

_CIA = DispatchKey.CompositeImplicitAutograd

# Composite operators that are part of core ATen and stay whole by default.
_PRESERVED_COMPOSITES = frozenset({
    torch.ops.aten.upsample_bilinear2d.vec,
    torch.ops.aten.upsample_nearest2d.vec,
})

_MISSING = object()


def is_composite(op: Any) -> bool:
    """Has ``op`` a CompositeImplicitAutograd kernel (in C++ or Python)?"""
    if not isinstance(op, OpOverload):
        return False
    return _CIA in op.py_kernels or has_kernel_for_dispatch_key(op.name(), _CIA)


@functools.cache
def _is_functional_schema(op: OpOverload) -> bool:
    schema = schema_of(op)
    return not schema.is_mutable and all(a.alias_info is None for a in schema.arguments) \
        and all(r.alias_info is None for r in schema.returns)


def can_keep_composite(op: Any) -> bool:
    """Can a composite stay whole? Only functional ones: a composite that
    mutates or aliases must be broken down so functionalization sees its parts."""
    return (is_composite(op) and _is_functional_schema(op) and not should_decompose_because_unsafe(op)
            and has_kernel(op.name()))


def _fresh_copy(x: torch.Tensor) -> torch.Tensor:
    """``lift_fresh_copy`` (a tensor literal made in forward) is a plain copy: ``clone``."""
    return torch.ops.aten.clone.default(x)


# recurrent operators taking (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
# batch_first); hx is [h, c] for lstm, one tensor for the others
_RECURRENT = (torch.ops.aten.lstm.input, torch.ops.aten.gru.input, torch.ops.aten.rnn_tanh.input,
              torch.ops.aten.rnn_relu.input)


def _recurrent_with_dropout_between_layers(op: OpOverload) -> Callable[..., Any]:
    """``op`` broken down by its own composite kernel, one layer at a time when it drops out between
    layers (a multi-layer RNN, ``dropout > 0``, in train mode).

    torch's composite kernels of these operators (torch 2.10 to 2.15) zero the dropout before the
    first layer, so the decomposed program of a training RNN computed it without dropout; eager's
    kernel applies ``dropout`` to every layer's output but the last, which is what this does, the
    layers themselves still run through the composite kernel (one layer, no dropout)."""
    kernel = composite_kernel_of(op)

    def run(input: Any, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
            train: bool, bidirectional: bool, batch_first: bool) -> Any:
        if not (train and dropout > 0 and num_layers > 1):
            return kernel(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        directions = 2 if bidirectional else 1
        per_layer = len(params) // num_layers
        states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        finals: list[list[torch.Tensor]] = [[] for _ in states]
        for layer in range(num_layers):
            rows = slice(layer * directions, (layer + 1) * directions)
            layer_hx = [s[rows] for s in states]
            out = kernel(input, layer_hx if isinstance(hx, (list, tuple)) else layer_hx[0],
                         list(params[layer * per_layer:(layer + 1) * per_layer]), has_biases, 1, 0.0, train,
                         bidirectional, batch_first)
            input = out[0]
            for acc, state in zip(finals, out[1:]):
                acc.append(state)
            if layer < num_layers - 1:
                input = torch.dropout(input, dropout, True)
        return (input, *(torch.cat(acc, 0) for acc in finals))
    return run


@functools.lru_cache(maxsize=1)
def _core_python_decompositions() -> dict:
    table = dict(core_aten_decompositions_post_autograd())
    table.setdefault(torch.ops.aten.lift_fresh_copy.default, _fresh_copy)
    for op in _RECURRENT:
        table[op] = _recurrent_with_dropout_between_layers(op)
    return table


def _all_composites() -> list[OpOverload]:
    """Every operator overload registered with a CompositeImplicitAutograd kernel."""
    found = []
    for qualified in registrations_for_dispatch_key("CompositeImplicitAutograd"):
        namespace, _, rest = qualified.partition("::")
        name, _, overload = rest.partition(".")
        try:
            op = getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if isinstance(op, OpOverload):
            found.append(op)
    return found


def _decompose_composite(op: OpOverload) -> Callable[..., Any]:
    """The entry standing for "decompose ``op`` by its own composite kernel": the kernel itself, so
    the entry still works copied into a plain dict (``materialize()``) or handed to torch's
    ``run_decompositions``, which install it as the operator's composite kernel."""
    return composite_kernel_of(op)


def _default_composite(op: Any) -> bool:
    return op not in _PRESERVED_COMPOSITES and can_keep_composite(op)


class CustomDecompTable(MutableMapping):
    """The lazy, dict-like decomposition table of :func:`default_decompositions`.

    ``del table[aten.conv2d.default]`` keeps ``conv2d`` in the graph;
    ``table[aten.conv2d.default] = fn`` makes ``run_decompositions`` call
    ``fn`` (which may call other ATen operators) wherever ``conv2d`` was.

    Args:
        (none) it starts as the core-ATen table.

    Raises:
        KeyError: ``del`` or lookup of an operator the table does not hold.

    Example:
        >>> table = graphcap.CustomDecompTable()
        >>> table[torch.ops.aten.relu.default] = lambda x: torch.clamp_min(x, 0)
        >>> ep2 = ep.run_decompositions(table)
    """

    def __init__(self) -> None:
        self._explicit: dict[Any, Callable[..., Any]] = dict(_core_python_decompositions())
        self._deleted: set[Any] = set()

    # -- the question the passes ask -----------------------------------------
    def decomposes(self, op: Any) -> bool:
        if op in self._explicit:
            return True
        if op in self._deleted:
            return False
        return _default_composite(op)

    def user_entries(self) -> dict[Any, Callable[..., Any]]:
        """Entries whose function is not the operator's own composite kernel."""
        return dict(self._explicit)

    def kept(self) -> set[Any]:
        """Operators the user removed from the table."""
        return set(self._deleted)

    # -- mapping protocol ----------------------------------------------------
    def __getitem__(self, op: Any) -> Callable[..., Any]:
        if op in self._explicit:
            return self._explicit[op]
        if op not in self._deleted and _default_composite(op):
            return _decompose_composite(op)
        raise KeyError(op)

    def __setitem__(self, op: Any, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"a decomposition must be callable, got {type(fn).__name__} for {op}")
        self._explicit[op] = fn
        self._deleted.discard(op)

    def __delitem__(self, op: Any) -> None:
        if op in self._explicit:
            del self._explicit[op]
            self._deleted.add(op)
        elif op not in self._deleted and _default_composite(op):
            self._deleted.add(op)
        else:
            raise KeyError(op)

    def __contains__(self, op: object) -> bool:
        return self.decomposes(op)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.materialize())

    def __len__(self) -> int:
        return len(self.materialize())

    def pop(self, op: Any, default: Any = _MISSING) -> Any:
        try:
            fn = self[op]
        except KeyError:
            if default is _MISSING:
                raise
            return default
        del self[op]
        return fn

    def update(self, other: Any = (), **kwargs: Any) -> None:
        items = other.items() if isinstance(other, Mapping) else other
        for op, fn in items:
            self[op] = fn
        for op, fn in kwargs.items():
            self[op] = fn

    def copy(self) -> "CustomDecompTable":
        new = CustomDecompTable.__new__(CustomDecompTable)
        new._explicit = dict(self._explicit)
        new._deleted = set(self._deleted)
        return new

    def materialize(self) -> dict[Any, Callable[..., Any]]:
        """The table as a plain dict, every implied composite listed."""
        table = {op: _decompose_composite(op) for op in _all_composites()
                 if op not in self._deleted and _default_composite(op)}
        table.update(self._explicit)
        return table

    def __repr__(self) -> str:
        return (f"CustomDecompTable({len(self._explicit)} explicit entries, every functional composite "
                f"implied, {len(self._deleted)} kept)")


def default_decompositions() -> CustomDecompTable:
    """The table that lowers every operator to core ATen (``torch.Tag.core``).

    Returns:
        A fresh :class:`CustomDecompTable`, to edit and pass to
        ``ExportedProgram.run_decompositions``.

    Raises:
        Nothing.

    Example:
        >>> table = graphcap.default_decompositions()
        >>> del table[torch.ops.aten.conv2d.default]  # keep conv2d
        >>> core = ep.run_decompositions(table)
    """
    return CustomDecompTable()


def as_table(decomp_table: Optional[Mapping]) -> "TableView":
    """A uniform view of what ``run_decompositions`` was given.

    ``None`` means the default table. A plain mapping is taken as it is: only
    its entries are broken down, and every functional composite it does not
    list stays whole (as torch.export does with a plain dict).
    """
    if decomp_table is None:
        decomp_table = default_decompositions()
    return TableView(decomp_table)


def _overload_spelled(key: Any) -> Optional[str]:
    """``torch.ops.ns.name.overload`` for a packet or a name that means one operator (``'aten.linear'``,
    ``'aten::linear'``, ``torch.ops.aten.linear``): its one overload, else its ``default``."""
    if isinstance(key, OpOverloadPacket):
        packet = key
    elif isinstance(key, str):
        ns, _, rest = key.replace("::", ".").partition(".")
        name, _, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, ns, None), name, None) if ns and name else None
        if not isinstance(packet, OpOverloadPacket):
            return None
        if overload:
            return f"torch.ops.{ns}.{name}.{overload}" if overload in packet.overloads() else None
    else:
        return None
    overloads = [o for o in packet.overloads() if "out" not in o.split("_")]  # not the out= variants
    if len(overloads) == 1:
        return f"torch.ops.{packet}.{overloads[0]}"  # a packet prints as ns.name
    return f"torch.ops.{packet}.<overload>" if overloads else None


def _checked_entries(table: Any) -> dict:
    """``table`` as a dict of operator overload -> function, refusing what torch would take without
    decomposing anything (a packet or a name as a key) and what is no table at all."""
    try:
        entries = dict(table)
    except (TypeError, ValueError):
        raise DecompTableError(
            f"run_decompositions takes a mapping of operator -> decomposition function, got "
            f"{type(table).__name__}.",
            where="ep.run_decompositions(decomp_table)",
            fix="Pass a dict keyed by operator overloads, e.g. "
                "ep.run_decompositions({torch.ops.aten.linear.default: my_linear}), or start from "
                "graphcap.default_decompositions() and edit it.") from None
    for key, value in entries.items():
        if isinstance(key, (OpOverloadPacket, str)):
            spelled = _overload_spelled(key)
            shown = spelled or "torch.ops.<namespace>.<name>.<overload>"
            packet = shown[:-len(".<overload>")] if shown.endswith(".<overload>") else None
            choices = (f" ({packet}.overloads() lists them; the printed program names the one it "
                       f"calls, as aten.add.Tensor)" if packet else "")
            kind = "a name" if isinstance(key, str) else "an operator packet"
            raise DecompTableError(
                f"The decomposition table has the key {key!r}, {kind}; the table is looked up by "
                f"operator overload, so this entry would never be used.",
                where=f"ep.run_decompositions({{{key!r}: ...}})",
                fix=f"Key it by the overload: {{{shown}: {getattr(value, '__name__', 'fn')}}}{choices}.")
        if value is not None and not callable(value):
            op = f"torch.ops.{key}" if isinstance(key, OpOverload) else repr(key)
            raise DecompTableError(
                f"The decomposition table maps {op} to {value!r:.60}, which is not a function.",
                where=f"ep.run_decompositions({{{op}: ...}})",
                fix=f"Map the operator to the function that computes it from other operators, "
                    f"e.g. {{{op}: my_decomposition}}; to keep {op} whole, leave it out of the table.")
    return entries


class TableView:
    """What the decomposition pass needs from a table, whatever its kind."""

    def __init__(self, table: Mapping) -> None:
        self._table = table
        if isinstance(table, CustomDecompTable):
            self.entries = table.user_entries()
            self.deleted = table.kept()
        else:
            self.entries = _checked_entries(table)
            self.deleted = set()
        # a plain mapping with functions of the user's: those may call composites it keeps whole
        self.calls_user_functions = bool(self.entries) and not isinstance(table, CustomDecompTable)

    def decomposes(self, op: Any) -> bool:
        if isinstance(self._table, CustomDecompTable):
            return self._table.decomposes(op)
        if op in self.entries:
            return True
        # Composites that mutate or alias are always broken down: functionalization needs their parts.
        return is_composite(op) and not can_keep_composite(op)

    def composites_kept(self) -> set[OpOverload]:
        """Every registered composite this table keeps whole."""
        return {op for op in _all_composites() if self.keeps_composite(op)}

    def keeps_composite(self, op: Any) -> bool:
        """A composite the table keeps whole (it must be protected from autograd's decomposition)."""
        return can_keep_composite(op) and not self.decomposes(op)
