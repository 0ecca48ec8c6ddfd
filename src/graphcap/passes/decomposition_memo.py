"""An operator call of the retrace copied from an identical earlier call's recording.

A deep model calls the same operators on the same layouts once per layer
(``aten.matmul`` on ``(1, 32, 256)`` by ``(256, 256)``, the attention kernel on
the same shapes), and ``run_decompositions`` used to run each of those calls
through make_fx: the table's Python decomposition, a fake-tensor dispatch and
make_fx's bookkeeping per recorded operator — about half a millisecond per node.
What a call records depends only on the operator, its non-tensor arguments and
its tensors' layouts (shape, strides, offset, dtype, device, which share a
storage), so the first call with a given key is recorded as it runs, and a later
call with the same key gets copies of the recorded nodes: the tracer makes each
node (its name, ``stack_trace``, ``nn_module_stack`` and the rest of the current
node's metadata, as for any operator), ``original_aten`` is the recording's, and
each value is a fresh fake tensor of the recorded layout on the storage it
shares (an input's, an earlier value's of the call, or one of its own), made as
the fake-tensor cache makes a cached result. The call's outputs are tracked as
the copied nodes.

Only static programs, and in them only static calls, are copied: a symbolic input, a tensor that is not a
plain fake tensor, a value make_fx tracks as a constant, an operator that
writes, or a recording that reads a node made outside the call (a constant, a
size) makes the call run as usual. The programs are the same either way
(``tests/unit/test_decomposition_memo.py`` compares them node by node); the switch that turns
export's reuse of repeated blocks off turns this off too (:func:`memo_for_retrace`).
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Optional

import torch
import torch.fx

from ..torch_private import pytree
from ..torch_private.block_replay import outside_tracing, track_tensor_as
from ..torch_private.fake import FakeTensor, FakeTensorMode, fake_from_meta, holds_constant, storage_key
from ..torch_private.fx import (
    current_fx_tracer,
    current_recording,
    operator_node_name,
    recorded_node,
    tracked_as_constant,
)
from ..torch_private.ops import OpOverload, schema_of
from ..trace.block_reuse import reuse_enabled

LAST_STATS: dict[str, int] = {}
"""Of the last retrace: ``copied`` calls (for the tests and the bench probes)."""

_SCALARS = (int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
# what a copied node gets beside what the tracer gives every node it makes
_MADE_HERE = {"val", "tensor_meta", "original_aten"}


def memo_for_retrace(fake_mode: FakeTensorMode, inputs: list, has_symbols: bool,
                     table: Mapping[Any, Callable]) -> Optional[DecompositionMemo]:
    """A retrace's memo, or None when repeated calls are not copied: the switch of export's reuse of
    repeated blocks turns both off (``graphcap.trace.block_reuse.reuse_repeated_blocks(False)`` or
    ``GRAPHCAP_REUSE_BLOCKS=0``), and a program with a symbol (a symbolic input, a data-dependent
    size: ``has_symbols``) is retraced call by call, as is one decomposed with a function of the
    user's in ``table`` (its Python runs for every call, whatever it does besides recording).

    (In a symbolic program, the order in which make_fx materializes the nodes of size expressions
    depends on what the operators before ran; a static call copied beside symbolic ones moved that
    order, and with it the numbering of later size nodes.)"""
    LAST_STATS["copied"] = 0
    if not reuse_enabled() or has_symbols or any(_symbolic_input(value) for value in inputs) \
            or any(not _torch_or_graphcap_function(fn) for fn in table.values()):
        return None
    return DecompositionMemo(fake_mode)


def _torch_or_graphcap_function(fn: Any) -> bool:
    """Whether a table entry is one of torch's decompositions (or graphcap's own), not the user's."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "graphcap")


def _symbolic_input(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return _symbolic_layout(value)
    return isinstance(value, _SYMBOLIC)


class _Recording:
    """The nodes one call made: for each, how to make its values; and where the outputs are."""

    __slots__ = ("nodes", "inputs", "plans", "outputs", "out_spec", "checked")

    def __init__(self) -> None:
        self.nodes: list[torch.fx.Node] = []
        self.inputs: dict[torch.fx.Node, int] = {}  # input node -> position among the flat arguments
        self.plans: dict[torch.fx.Node, tuple] = {}  # node -> (is a sequence, its type, layouts)
        self.outputs: list[tuple] = []  # per output leaf: ("node", node) / ("input", i) / ("literal", v)
        self.out_spec: Any = None
        self.checked = False  # the first copy's metadata was compared with the recording's


def _symbolic(values: Any) -> bool:
    return any(isinstance(d, _SYMBOLIC) for d in values)


def _symbolic_layout(t: torch.Tensor) -> bool:
    """Whether a size, stride or the offset of ``t`` is a symbol (such a call is never copied)."""
    return _symbolic(t.shape) or _symbolic(t.stride()) or isinstance(t.storage_offset(), _SYMBOLIC)


def _key(target: Any, leaves: list, spec: Any, tracker: Any) -> Optional[tuple]:
    """What a call's recording depends on, or None when the call is not copied: the operator, the
    arguments' structure, each scalar, each tensor's layout, and which tensors share a storage and
    which are read as the same node."""
    parts: list[Any] = [target, spec]
    storages: dict[Any, int] = {}
    nodes: dict[Any, int] = {}
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if type(leaf) is not FakeTensor or holds_constant(leaf):
                return None
            if _symbolic_layout(leaf):
                return None
            shape, stride, offset = tuple(leaf.shape), leaf.stride(), leaf.storage_offset()
            storage = storages.setdefault(storage_key(leaf), len(storages))
            node = nodes.setdefault(recorded_node(tracker, leaf), len(nodes))
            parts.append((shape, stride, offset, leaf.dtype, leaf.device, leaf.requires_grad, storage, node))
        elif type(leaf) is float:
            parts.append((float, repr(leaf)))  # -0.0 and 0.0 compare equal but may record differently
        elif type(leaf) in _SCALARS:
            parts.append((type(leaf), leaf))
        else:
            return None
    return tuple(parts)


class DecompositionMemo:
    """One retrace's recordings, by call key."""

    def __init__(self, fake_mode: FakeTensorMode) -> None:
        self.fake_mode = fake_mode
        self._recordings: dict[tuple, Optional[_Recording]] = {}

    def call(self, target: Any, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        """``run()``'s result, or the copy of an identical call's recording."""
        if not isinstance(target, OpOverload):
            return run()
        recording = current_recording()
        tracer = current_fx_tracer()
        if recording is None or tracer is None:
            return run()
        graph, tracker = recording
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = _key(target, leaves, spec, tracker)
        if key is None:
            return run()
        if key not in self._recordings:
            last = _last_node(graph)
            out = run()
            self._recordings[key] = _record(_nodes_after(graph, last), tracker, leaves, out)
            return out
        rec = self._recordings[key]
        if rec is None:
            return run()
        copied = self._copy(rec, tracer, tracker, leaves)
        if copied is _NOT_COPIED:
            self._recordings[key] = None
            return run()
        LAST_STATS["copied"] += 1
        return copied

    def _values(self, rec: _Recording, leaves: list) -> tuple[dict, dict]:
        """Each copied node's value: fresh fake tensors of the recorded layouts, on the storages they
        share (an input's, an earlier value's of the call, or one of their own), made as the fake
        mode makes a cached result (``empty_strided``, then ``set_`` onto a shared storage)."""
        metas: dict[tuple, torch.Tensor] = {}
        vals: dict[torch.fx.Node, Any] = {}
        with outside_tracing():
            for node in rec.nodes:
                is_seq, seq_type, layouts = rec.plans[node]
                made = []
                for j, layout in enumerate(layouts):
                    if layout is None:
                        made.append(None)
                        continue
                    origin, shape, stride, offset, dtype, device = layout
                    meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                    if origin is not None:
                        base = leaves[origin[1]] if origin[0] == "input" else metas[origin[1]]
                        meta.set_(base.untyped_storage(), offset, shape, stride)
                    metas[(node, j)] = meta
                    made.append(fake_from_meta(self.fake_mode, meta, device))
                vals[node] = seq_type(made) if is_seq else made[0]
        return metas, vals

    def _copy(self, rec: _Recording, tracer: Any, tracker: Any, leaves: list) -> Any:
        """The call's outputs, its nodes copied from ``rec``; ``_NOT_COPIED`` (nothing left behind) when
        the first copy's metadata differs from the recording's."""
        try:
            metas, vals = self._values(rec, leaves)
        except Exception:  # a layout the meta device refuses to rebuild: the call runs instead
            return _NOT_COPIED
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        for node, position in rec.inputs.items():
            env[node] = recorded_node(tracker, leaves[position])
        new_nodes = []
        for node in rec.nodes:
            name = "getitem" if node.target is operator.getitem else operator_node_name(tracer.graph, node.target)
            new = tracer.create_node("call_function", node.target, torch.fx.node.map_arg(node.args, env.__getitem__),
                                     torch.fx.node.map_arg(node.kwargs, env.__getitem__), name)
            new_nodes.append(new)
            env[node] = new
            for key in _MADE_HERE:
                if key in node.meta:
                    new.meta[key] = vals[node] if key == "val" else node.meta[key]
        if not rec.checked:
            if any(set(new.meta) != set(old.meta) for new, old in zip(new_nodes, rec.nodes)):
                for new in reversed(new_nodes):
                    tracer.graph.erase_node(new)
                return _NOT_COPIED
            rec.checked = True
        out = []
        with outside_tracing():
            for kind, ref in rec.outputs:
                if kind == "input":
                    out.append(leaves[ref])
                elif kind == "literal":
                    out.append(ref)
                else:
                    node, j = ref
                    # the tensor the program goes on with, beside the node's value (make_fx's snapshot)
                    live = fake_from_meta(self.fake_mode, metas[(node, j)].detach(), vals[node].device)
                    track_tensor_as(live, env[node], tracer)
                    out.append(live)
        return pytree.tree_unflatten(out, rec.out_spec)


_NOT_COPIED = object()


def _last_node(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(iter(reversed(graph.nodes)))  # a recording's graph has its placeholders at least


def _nodes_after(graph: torch.fx.Graph, last: torch.fx.Node) -> list[torch.fx.Node]:
    nodes = []
    node = last.next
    while node.op != "root":  # the graph's sentinel closes the ring of nodes
        nodes.append(node)
        node = node.next
    return nodes


def _writes(op: OpOverload) -> bool:
    schema = schema_of(op)
    return schema is None or schema.is_mutable


def _record(made: list[torch.fx.Node], tracker: Any, leaves: list, out: Any) -> Optional[_Recording]:
    """The recording of a call that made ``made``, or None when its later calls are not copied."""
    rec = _Recording()
    storages: dict[Any, tuple] = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            node = recorded_node(tracker, leaf)
            if node is None or tracked_as_constant(tracker, leaf):
                return None
            rec.inputs.setdefault(node, i)
            storages.setdefault(storage_key(leaf), ("input", i))
    own = set(made)
    for node in made:
        if node.op != "call_function" or set(node.meta) - _MADE_HERE - _TRACER_META:
            return None
        if node.target is operator.getitem:
            if node.args[0] not in own:
                return None
        elif not isinstance(node.target, OpOverload) or _writes(node.target):
            return None
        if any(used not in own and used not in rec.inputs for used in node.all_input_nodes):
            return None
        val = node.meta.get("val")
        is_seq = isinstance(val, (tuple, list))
        layouts = []
        for j, t in enumerate(val if is_seq else (val,)):
            if t is None and is_seq:
                layouts.append(None)
                continue
            if type(t) is not FakeTensor or t.requires_grad or t.is_conj() or t.is_neg() or _symbolic_layout(t):
                return None
            key = storage_key(t)
            origin = storages.get(key)
            if origin is None:
                if t.storage_offset() != 0 or t.untyped_storage().nbytes() != _extent(t):
                    return None  # a storage the copy would not make alike
                storages[key] = ("node", (node, j))
            layouts.append((origin, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device))
        rec.plans[node] = (is_seq, type(val), layouts)
    rec.nodes = made
    out_leaves, rec.out_spec = pytree.tree_flatten(out)
    for value in out_leaves:
        if isinstance(value, torch.Tensor):
            position = next((i for i, leaf in enumerate(leaves) if leaf is value), None)
            if position is not None:
                rec.outputs.append(("input", position))
                continue
            node = recorded_node(tracker, value)
            if node is None or node not in own or tracked_as_constant(tracker, value):
                return None
            val = node.meta.get("val")
            if isinstance(val, (tuple, list)):
                return None  # a sequence's element is tracked as its getitem node
            if storage_key(value) != storage_key(val) or value.shape != val.shape or value.stride() != val.stride():
                return None
            rec.outputs.append(("node", (node, 0)))
        elif isinstance(value, _SYMBOLIC):
            return None
        else:
            rec.outputs.append(("literal", value))
    return rec


# what the tracer gives a node it makes under the interpreter's current node
_TRACER_META = {"stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "from_node", "seq_nr", "custom"}


def _extent(t: torch.Tensor) -> int:
    if any(s == 0 for s in t.shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))) * t.element_size()
