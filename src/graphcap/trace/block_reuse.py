"""Repeated blocks traced once: a submodule call replayed from an identical one's recording.

Deep models call the same block many times (a transformer's layers). Tracing
runs the block's Python on fake tensors each time; the program it records is
the same but for the names. Here the first call of a block is recorded (the
nodes it made, what they read from outside, what it returned) and a later call
of a structurally identical block gets the recorded ATen operators dispatched
again on its own tensors: the recorder makes the same nodes, with the same
names, values and metadata as a full trace would (``nn_module_stack`` with the
later call's FQNs and call keys, stack traces with its call site, ``torch_fn``
with the counts a full trace reaches), and no Python of the block runs.

A call is replayed only when a full trace is provably the same, else traced:

* the same class, and for every module of its subtree the same class, no hook
  (nor a process-wide one), the same parameters and buffers (names, shapes,
  dtypes, strides, aliasing) and the same non-tensor attributes; an attribute
  that differs between the two (``layer_idx``) is allowed only when the
  recording never read it (a read is seen through a descriptor put on the
  class while the export runs: see :class:`_AttributeWatch`);
* inputs of the same structure (plain tuples, lists, dicts), the same tensor
  metadata with the very same symbols, the same aliasing, the same Python
  scalars; the same grad/autocast mode; the shape engine knowing exactly what
  it knew when the recording started;
* a recording qualifies when its call learnt nothing about shapes (no guard,
  no range, no data-dependent symbol), wrote no attribute, rebound no global
  of the module's code, changed no input container, and made only operator
  nodes that neither mutate nor read a tensor constant, outside of which it
  read only its inputs, its own state and symbols of its inputs.

Python side effects a block has on objects other than its module tree, its
inputs and its code's globals (a global list appended to, a random draw) are
not seen: turn reuse off for such models (:func:`reuse_repeated_blocks` or the
environment variable ``GRAPHCAP_REUSE_BLOCKS=0``). See docs/repeated-blocks.md.
"""
from __future__ import annotations

import contextlib
import enum
import logging
import operator
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental import proxy_tensor

from .. import frame_stack
from ..errors import InternalError
from ..torch_private import block_replay as tracer_state
from ..torch_private import modules, pytree
from ..torch_private.fake import FakeTensorMode, fake_from_meta, meta_with_layout, storage_extent, storage_key
from ..torch_private.ops import OpOverload, schema_of
from . import module_paths

ENV_VAR = "GRAPHCAP_REUSE_BLOCKS"
_setting = threading.local()

_MAX_RECORDINGS_PER_CLASS = 3


def reuse_enabled() -> bool:
    """Whether export replays repeated blocks (on unless turned off)."""
    explicit = getattr(_setting, "enabled", None)
    if explicit is not None:
        return explicit
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def _set_on_this_thread(name: str, value: bool) -> Iterator[None]:
    """``_setting.<name>`` is ``value`` within the block on this thread, then what it was."""
    saved = getattr(_setting, name, None)
    setattr(_setting, name, bool(value))
    try:
        yield
    finally:
        setattr(_setting, name, saved)


def reuse_repeated_blocks(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Within the block, exports on this thread replay repeated blocks (``True``) or trace every
    call (``False``); it overrides ``GRAPHCAP_REUSE_BLOCKS``."""
    return _set_on_this_thread("enabled", enabled)


def _values_as_views() -> bool:
    views = getattr(_setting, "views", None)
    return True if views is None else views


def symbolic_values_as_views(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Within the block, copies make symbolically sized values as strided views of a one-dimensional
    storage of the value's extent (``True``, the default) or with ``empty_strided``/``set_``
    (``False``); the programs are the same either way (for tests and benchmarks)."""
    return _set_on_this_thread("views", enabled)


LAST_STATS: dict[str, int] = {}
"""Of the last export: ``recorded`` calls kept for replay, ``replayed`` calls (for tests and benchmarks)."""
log = logging.getLogger("graphcap.block_reuse")


class _Unproven(Exception):
    """A call's replay (or a recording's use) cannot be proved equal to a full trace."""


# -- fingerprints: what must be equal between two calls -----------------------------------------

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
# where the functions live that the recorder records for arithmetic on symbols
_SYM_OPERATION_MODULES = ("_operator", "operator", "math", "torch", "torch.fx.experimental.sym_node")

# size reads the recorder makes the first time a symbolic size is used, and how to read each
_SYM_READS = {
    torch.ops.aten.sym_size.int: lambda t, dim: t.size(dim),
    torch.ops.aten.sym_stride.int: lambda t, dim: t.stride(dim),
    torch.ops.aten.sym_numel.default: lambda t: t.numel(),
    torch.ops.aten.sym_storage_offset.default: lambda t: t.storage_offset(),
}

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
          torch.memory_format, enum.Enum)


def _value_fingerprint(value: Any, keep: list, depth: int = 0) -> Any:
    """A hashable value equal for two attribute values a trace cannot tell apart."""
    if isinstance(value, _PLAIN):
        if isinstance(value, float) and value != value:
            return ("nan",)
        return (type(value), value)
    if isinstance(value, torch.SymInt) or isinstance(value, torch.SymFloat) or isinstance(value, torch.SymBool):
        keep.append(value.node)
        return ("sym", id(value.node))
    if depth < 4 and type(value) in (tuple, list, torch.Size):
        return (type(value), tuple(_value_fingerprint(v, keep, depth + 1) for v in value))
    if depth < 4 and type(value) is dict and len(value) < 64:
        try:
            return (dict, tuple((k, _value_fingerprint(v, keep, depth + 1)) for k, v in value.items()
                                if isinstance(k, (str, int))), len(value))
        except TypeError:
            pass
    keep.append(value)  # held so that its id stays its own
    return ("id", id(value))


def _attribute_fingerprints(module: torch.nn.Module, keep: list) -> dict[str, Any]:
    return {name: _value_fingerprint(value, keep) for name, value in modules.plain_attributes(module)}


def _tensor_fingerprint(t: torch.Tensor, symbols: list) -> tuple:
    """Metadata a trace reads from a tensor; a symbolic size is its expression (the symbol objects
    are gathered in ``symbols``, whose sharing the caller compares)."""
    def dim(s: Any) -> Any:
        if isinstance(s, torch.SymInt):
            symbols.append(s)
            return ("sym", s.node.expr)
        return s
    return (type(t), t.dtype, t.device, t.layout, t.requires_grad, tuple(dim(s) for s in t.shape),
            tuple(dim(s) for s in t.stride()), dim(t.storage_offset()), tracer_state.is_view(t))


def _builtin_structure(spec: Any) -> bool:
    """Whether a pytree spec holds only tuples, lists and dicts (no class with state of its own)."""
    todo = [spec]
    while todo:
        s = todo.pop()
        if s.type is not None and s.type not in (tuple, list, dict):
            return False
        children = getattr(s, "children", None)
        todo.extend(children() if callable(children) else s.children_specs)
    return True


def _leaf_fingerprint(leaf: Any, symbols: list) -> Any:
    if isinstance(leaf, torch.Tensor):
        return ("tensor", _tensor_fingerprint(leaf, symbols))
    if isinstance(leaf, _SYM_TYPES):
        symbols.append(leaf)
        return ("sym", type(leaf), leaf.node.expr)
    if isinstance(leaf, _PLAIN) and not isinstance(leaf, enum.Enum):
        return ("plain", type(leaf), leaf if not (isinstance(leaf, float) and leaf != leaf) else "nan")
    raise _Unproven(f"an input of type {type(leaf).__name__}")


def _alias_pattern(tensors: list) -> tuple:
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(t), i) for i, t in enumerate(tensors))


def _context_fingerprint() -> tuple:
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_default_dtype(),
            torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"),
            torch.are_deterministic_algorithms_enabled())


# -- which modules may repeat ---------------------------------------------------------------------

def _repeated_modules(root: torch.nn.Module) -> set[int]:
    """The ids of the modules with submodules whose structure another module of ``root``'s tree shares.

    The structure is the class of every module of the subtree, the submodule and buffer names, the
    parameters' names, shapes and dtypes: a coarser comparison than a replay's (:meth:`BlockReuse._matches`),
    so a module without a twin here has none at trace time either, and its calls skip the checks.
    Each subtree's structure is numbered once, from its children's numbers: linear in the model's size.
    """
    number: dict[Any, int] = {}
    of_module: dict[int, int] = {}
    members: dict[int, list[int]] = {}

    def visit(module: torch.nn.Module) -> int:
        known = of_module.get(id(module))
        if known is not None:
            return known
        of_module[id(module)] = -1  # a module that contains itself: never a twin of another
        children = tuple((name, visit(child) if child is not None else None)
                         for name, child in modules.children_of(module).items())
        params = tuple((name, None if p is None else (tuple(p.shape), p.dtype))
                       for name, p in modules.parameters_of(module).items())
        # the buffer names by keys(): a ScriptModule's registry refuses iteration by position
        key = (type(module), children, params, tuple(modules.buffers_of(module).keys()))
        n = number.setdefault(key, len(number))
        of_module[id(module)] = n
        if children:
            members.setdefault(n, []).append(id(module))
        return n

    with tracer_state.no_torch_function():  # (a tensor's shape read under the tracer's modes is an operator call)
        visit(root)
    return {i for ids in members.values() if len(ids) > 1 for i in ids} - {id(root)}


def _modules_below(root: torch.nn.Module, ids: set[int]) -> Iterator[torch.nn.Module]:
    """Each distinct module of the subtrees of the modules of ``root``'s tree whose id is in ``ids``."""
    seen: set[int] = set()
    for module in root.modules():
        if id(module) in ids and id(module) not in seen:  # (a candidate inside another was walked with it)
            for sub in module.modules():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield sub


# -- reads of attributes that differ between instances --------------------------------------------

class _AttributeWatch:
    """A data descriptor put on a module class for one attribute name while an export runs.

    Reads and writes go to the instance's ``__dict__`` exactly as without it; a read or a
    write on a module of a block being recorded is noted in that recording.
    """

    def __init__(self, name: str, reuse: BlockReuse):
        self.name = name
        self.reuse = reuse

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)
        d = obj.__dict__
        if self.name not in d:
            raise AttributeError(self.name)
        for rec in self.reuse.active:
            rel = rec.rel_of.get(id(obj))
            if rel is not None:
                rec.reads.add((rel, self.name))
        return d[self.name]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value
        for rec in self.reuse.active:
            if id(obj) in rec.rel_of:
                rec.wrote = True

    def __delete__(self, obj: Any) -> None:
        for rec in self.reuse.active:
            if id(obj) in rec.rel_of:
                rec.wrote = True
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


def _class_defines(cls: type, name: str) -> bool:
    return any(name in vars(k) for k in cls.__mro__)


# -- a recorded call --------------------------------------------------------------------------------

@dataclass
class _Recording:
    module_type: type
    rel_of: dict[int, str]  # id(module in the subtree) -> its path relative to the block
    modules: list  # (relative path, module) of the subtree, in named_modules order
    keep: list = field(default_factory=list)  # objects whose ids the fingerprints hold
    reads: set = field(default_factory=set)  # (relative path, attribute) read while recording
    wrote: bool = False
    attributes: dict = field(default_factory=dict)  # relative path -> attribute fingerprints
    state_fp: Any = None
    input_fp: Any = None
    context_fp: Any = None
    knowledge: Any = None
    call_path: str = ""
    stack_len: int = 0
    stack_keys: list = field(default_factory=list)
    plan: list = field(default_factory=list)  # (operator node, the getitem nodes made with it)
    prefix_keys: tuple = ()
    calls_before: dict = field(default_factory=dict)
    calls_after: dict = field(default_factory=dict)
    fn_before: dict = field(default_factory=dict)
    fn_after: dict = field(default_factory=dict)
    fn_last: Any = None
    nodes: list = field(default_factory=list)
    external: dict = field(default_factory=dict)  # node read from outside -> index among inputs + state
    external_symbols: dict = field(default_factory=dict)  # symbol node read -> index among the inputs' symbols
    out_spec: Any = None
    out_leaves: list = field(default_factory=list)
    usable: bool = False
    # the copy plan (static shapes): each node's value layout and which storage it shares, the
    # block's outputs' runtime layout, inputs the tracer reads as a node of the call afterwards
    copyable: bool = False
    value_plan: dict = field(default_factory=dict)
    output_layouts: dict = field(default_factory=dict)
    retracked: list = field(default_factory=list)
    extents: dict = field(default_factory=dict)  # a symbolically sized value's storage extent, made once


@dataclass
class _Replay:
    rec: _Recording
    stack_items: list
    prefix_keys: tuple
    calls_before: dict
    fn_before: dict
    fn_last_before: Any
    queue: list
    position: int = 0
    extras_only: bool = False  # copying: every node the tracer makes is a size read made on the way
    made: list = field(default_factory=list)


class BlockReuse:
    """Records submodule calls and replays identical ones, for one recording (one tracer)."""

    def __init__(self, tracer: Any, scope: torch.nn.Module, root: torch.nn.Module, fake_mode: FakeTensorMode,
                 frame_keys: Callable[[Any], tuple], format_keys: Callable[[tuple], str]):
        self.tracer = tracer
        self.root = root
        self.fake_mode = fake_mode
        self.frame_keys = frame_keys
        self.format_keys = format_keys
        self.keys: dict[torch.fx.Node, tuple | None] = {}
        self.names: dict[torch.fx.Node, Any] = {}
        self.fn_of: dict[torch.fx.Node, tuple] = {}
        self.active: list[_Recording] = []
        self.recordings: dict[type, list[_Recording]] = {}
        self.attempts: dict[type, int] = {}
        self.replaying: _Replay | None = None
        self._watched: list[tuple[type, str]] = []
        self._original_call_module = tracer.call_module
        self._varying: set[tuple[type, str]] = set()
        self._candidates = _repeated_modules(root)
        self._called_once: set[int] = set()
        LAST_STATS.clear()
        self._install_watches()
        tracer.call_module = self._call_module

    # -- setup and teardown --

    def _install_watches(self) -> None:
        """Watch reads of every attribute whose value differs between modules of one class, among the
        modules of the subtrees a call may be replayed for (a call replayed compares only those)."""
        seen: dict[tuple[type, str], Any] = {}
        present: dict[type, int] = {}
        counts: dict[tuple[type, str], int] = {}
        keep: list = []
        for module in _modules_below(self.root, self._candidates):
            cls = type(module)
            present[cls] = present.get(cls, 0) + 1
            for name, fp in _attribute_fingerprints(module, keep).items():
                key = (cls, name)
                counts[key] = counts.get(key, 0) + 1
                if key in seen and seen[key] != fp:
                    self._varying.add(key)
                seen.setdefault(key, fp)
        for (cls, name), n in counts.items():
            if n != present[cls]:
                self._varying.add((cls, name))  # present on some instances only
        for cls, name in sorted(self._varying, key=lambda k: (k[0].__qualname__, k[1])):
            if name.startswith("<") or _class_defines(cls, name):
                continue  # a class-level descriptor or a slot: not watchable, must be equal
            setattr(cls, name, _AttributeWatch(name, self))
            self._watched.append((cls, name))

    def close(self) -> None:
        for cls, name in self._watched:
            if isinstance(vars(cls).get(name), _AttributeWatch):
                delattr(cls, name)
        self._watched.clear()
        self.tracer.call_module = self._original_call_module

    def _watchable(self, cls: type, name: str) -> bool:
        return (cls, name) in self._varying and isinstance(vars(cls).get(name), _AttributeWatch)

    # -- what the recorder tells us about each node --

    def note(self, node: torch.fx.Node, keys: tuple | None, name: Any) -> None:
        self.keys[node] = keys
        self.names[node] = name
        if "torch_fn" in node.meta:
            fn = tracer_state.torch_fn_metadata(self.tracer)
            self.fn_of[node] = (fn, tracer_state.torch_fn_counts(self.tracer).get(fn))

    # -- the intercepted module call --

    # every submodule call of the trace passes here: its frame gives the calls below it room on the
    # frame stack (graphcap/frame_stack.py), with no frame added per module level
    @frame_stack.large_frame
    def _call_module(self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if self.replaying is not None or m is self.root or not reuse_enabled() \
                or isinstance(m, torch.fx.GraphModule) or tracer_state.is_attr_proxy(m) \
                or not modules.children_of(m) or not self._may_repeat(m):
            # (the tracer inlines a graph module's call, in no module scope)
            return self._original_call_module(m, forward, args, kwargs)

        def intercepted(*a: Any, **k: Any) -> Any:
            return self._run(m, forward, a, k)
        return self._original_call_module(m, intercepted, args, kwargs)

    def _may_repeat(self, m: torch.nn.Module) -> bool:
        """Whether a call of ``m`` may be recorded or replayed: ``m`` has the structure of another module
        of the model (see :func:`_repeated_modules`), or it is called a second time (a shared block)."""
        key = id(m)
        if key in self._candidates:
            return True
        if key in self._called_once:
            self._candidates.add(key)
            return True
        self._called_once.add(key)
        return False

    def _run(self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if not tracer_state.module_stack(self.tracer):  # a call the tracer keeps no scope for
            return forward(*args, **kwargs)
        recs = self.recordings.get(type(m), ())
        if recs and self._current_tracer_is_ours():
            prepared = self._prepare(m, args, kwargs)
            if prepared is not None:
                for rec in recs:
                    if self._matches(rec, m, prepared):
                        return self._replay(rec, prepared)
                log.debug("block reuse: a call of %s matches no recording: traced", type(m).__name__)
        if self.attempts.get(type(m), 0) >= _MAX_RECORDINGS_PER_CLASS or not self._current_tracer_is_ours():
            return forward(*args, **kwargs)
        return self._record(m, forward, args, kwargs)

    def _current_tracer_is_ours(self) -> bool:
        from ..torch_private.fx import current_make_fx_tracer
        return getattr(current_make_fx_tracer(), "fx_tracer", None) is self.tracer

    # -- the facts of one call --

    def _subtree(self, m: torch.nn.Module) -> list:
        return list(m.named_modules(remove_duplicate=False))

    def _prepare(self, m: torch.nn.Module, args: tuple, kwargs: dict) -> dict | None:
        """The call's inputs, state and fingerprints, or None when they cannot be compared."""
        with tracer_state.no_torch_function():
            return self._prepare_facts(m, args, kwargs)

    def _prepare_facts(self, m: torch.nn.Module, args: tuple, kwargs: dict) -> dict | None:
        if tracer_state.global_module_hooks():
            return None
        keep: list = []
        try:
            leaves, spec = pytree.tree_flatten((args, kwargs))
            if not _builtin_structure(spec):
                return None
            subtree = self._subtree(m)
            if any(modules.has_hooks(sub) for _, sub in subtree):
                return None
            state = list(m.named_parameters(remove_duplicate=False)) + list(m.named_buffers(remove_duplicate=False))
            state_tensors = [t for _, t in state]
            tensors = [x for x in leaves if isinstance(x, torch.Tensor)] + state_tensors
            tensor_nodes = []
            for t in tensors:
                if not isinstance(t, proxy_tensor.FakeTensor) and not isinstance(
                        getattr(t, "data", None), proxy_tensor.FakeTensor):
                    return None
                slot = proxy_tensor.get_proxy_slot(t, self.tracer, None)
                if slot is None:
                    return None
                tensor_nodes.append(slot.proxy.node)
            symbols: list = []
            input_fp = (spec, tuple(_leaf_fingerprint(x, symbols) for x in leaves))
            state_fp = (tuple((n, _tensor_fingerprint(t, symbols)) for n, t in state), _alias_pattern(tensors),
                        tuple((rel, type(sub)) for rel, sub in subtree))
            # which symbolic sizes are one object: a full trace reads the one it reaches
            input_fp = (input_fp, _alias_pattern([x.node for x in symbols]))
            keep.extend(symbols)
        except _Unproven:
            return None
        return {"m": m, "leaves": leaves, "spec": spec, "subtree": subtree, "state_tensors": state_tensors,
                "tensors": tensors, "tensor_nodes": tensor_nodes, "symbols": symbols, "input_fp": input_fp,
                "state_fp": state_fp, "keep": keep, "args": args, "kwargs": kwargs}

    def _knowledge(self) -> Any:
        return tracer_state.shape_env_knowledge(self.fake_mode.shape_env)

    # -- recording --

    def _record(self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        prepared = self._prepare(m, args, kwargs)
        if prepared is None:
            return forward(*args, **kwargs)
        self.attempts[type(m)] = self.attempts.get(type(m), 0) + 1
        subtree = prepared["subtree"]
        rec = _Recording(type(m), {id(sub): rel for rel, sub in subtree}, subtree, keep=prepared["keep"])
        for rel, sub in subtree:
            rec.attributes[rel] = _attribute_fingerprints(sub, rec.keep)
        rec.input_fp, rec.state_fp = prepared["input_fp"], prepared["state_fp"]
        rec.context_fp = _context_fingerprint()
        rec.knowledge = self._knowledge()
        stack = tracer_state.module_stack(self.tracer)
        rec.stack_len = len(stack)
        rec.stack_keys = list(stack)
        rec.call_path = next(reversed(stack.values()))[0]
        rec.prefix_keys = self.frame_keys(sys._getframe(1))
        rec.calls_before = dict(tracer_state.module_call_counts(self.tracer))
        rec.fn_before = dict(tracer_state.torch_fn_counts(self.tracer))
        globals_before = self._globals_snapshot(subtree)
        graph = self.tracer.graph
        last = next(iter(reversed(graph.nodes)), None)  # the node before the first the call makes (iter: torch
        # 2.11's fx gives a reversed node list, not an iterator)
        self.active.append(rec)
        try:
            out = forward(*args, **kwargs)
        finally:
            self.active.remove(rec)
        try:
            with tracer_state.no_torch_function():
                self._finish_recording(rec, prepared, last, out, globals_before)
            rec.usable = True
            self.recordings.setdefault(type(m), []).append(rec)
            LAST_STATS["recorded"] = LAST_STATS.get("recorded", 0) + 1
        except _Unproven as why:
            log.debug("block reuse: the call of %s is not replayable: %s", rec.call_path, why)
        return out

    def _globals_snapshot(self, subtree: list) -> dict:
        snap = {}
        for _, sub in subtree:
            fn = getattr(type(sub).forward, "__globals__", None)
            if fn is not None and id(fn) not in snap:
                snap[id(fn)] = (fn, {k: id(v) for k, v in fn.items()})
        return snap

    def _finish_recording(self, rec: _Recording, prepared: dict, last: torch.fx.Node, out: Any,
                          globals_before: dict) -> None:
        if rec.wrote:
            raise _Unproven("an attribute was written")
        if self._knowledge() != rec.knowledge:
            raise _Unproven("the call taught the shape engine something")
        keep: list = []
        for rel, sub in rec.modules:
            if _attribute_fingerprints(sub, keep) != rec.attributes[rel]:
                raise _Unproven("an attribute changed")
        for fn_globals, ids in globals_before.values():
            if {k: id(v) for k, v in fn_globals.items()} != ids:
                raise _Unproven("a global was rebound")
        leaves, spec = pytree.tree_flatten((prepared["args"], prepared["kwargs"]))
        if spec != prepared["spec"] or len(leaves) != len(prepared["leaves"]) \
                or any(a is not b for a, b in zip(leaves, prepared["leaves"])):
            raise _Unproven("an input container changed")
        # the nodes the call made
        nodes = []
        n = last.next if last is not None else next(iter(self.tracer.graph.nodes), None)
        while n is not None and n.op != "root":
            nodes.append(n)
            n = n.next
        segment = set(nodes)
        for tensor_index, node in enumerate(prepared["tensor_nodes"]):
            rec.external.setdefault(node, tensor_index)
        input_symbols: dict[int, int] = {}
        for index, symbol in enumerate(prepared["symbols"]):
            input_symbols.setdefault(id(symbol.node), index)
        for node in nodes:
            self._check_recorded_node(rec, node, segment, input_symbols)
        rec.nodes = nodes
        for index, node in enumerate(nodes):
            if node.target is operator.getitem:
                if not rec.plan or node.args[0] is not rec.plan[-1][1]:
                    raise _Unproven("a getitem apart from its operator")
                rec.plan[-1][2].append(node)
            else:
                rec.plan.append((index, node, []))
        rec.calls_after = dict(tracer_state.module_call_counts(self.tracer))
        rec.fn_after = dict(tracer_state.torch_fn_counts(self.tracer))
        rec.fn_last = tracer_state.torch_fn_metadata(self.tracer)
        out_leaves, rec.out_spec = pytree.tree_flatten(out)
        if not _builtin_structure(rec.out_spec):
            raise _Unproven("an output of a class of its own")
        for leaf in out_leaves:
            if isinstance(leaf, torch.Tensor):
                slot = proxy_tensor.get_proxy_slot(leaf, self.tracer, None)
                if slot is None:
                    raise _Unproven("an untracked output")
                node = slot.proxy.node
                if node in segment:
                    rec.out_leaves.append(("node", node))
                elif node in rec.external and prepared["tensors"][rec.external[node]] is leaf:
                    rec.out_leaves.append(("input", rec.external[node]))
                else:
                    raise _Unproven("an output made outside the call")
            elif isinstance(leaf, _PLAIN) and not isinstance(leaf, enum.Enum):
                rec.out_leaves.append(("plain", leaf))
            else:
                raise _Unproven("an output that is not a tensor or a Python scalar")
        try:
            self._plan_copy(rec, prepared, out_leaves, segment)
            rec.copyable = True
        except _Unproven as why:
            log.debug("block reuse: the call of %s is replayed by its operators, not copied: %s", rec.call_path, why)
            rec.copyable = False

    def _check_recorded_node(self, rec: _Recording, node: torch.fx.Node, segment: set,
                             input_symbols: dict[int, int]) -> None:
        if node.op != "call_function" or "val" not in node.meta or "custom" in node.meta:
            raise _Unproven(f"node {node.name}")
        target = node.target
        val = node.meta["val"]
        if isinstance(val, _SYM_TYPES):
            # arithmetic on symbols (``q_len == 1``): a full trace computes it again, on the same symbols
            if target not in _SYM_READS and (getattr(target, "__module__", None) not in _SYM_OPERATION_MODULES
                                             or isinstance(target, OpOverload)):
                raise _Unproven(f"symbolic node {node.name} ({target})")
        elif target is operator.getitem:
            if not (isinstance(node.args[0], torch.fx.Node) and node.args[0] in segment):
                raise _Unproven("a getitem of an outside value")
        elif not isinstance(target, OpOverload) or _writes(target):
            raise _Unproven(f"operator {target}")
        if not (val is None or isinstance(val, (torch.Tensor, *_SYM_TYPES))
                or (isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val))):
            raise _Unproven("a node whose value is not a tensor")
        if self.keys.get(node, ()) is None or node not in self.keys:
            raise _Unproven("a node of unknown origin")
        keys = self.keys[node]
        if keys[:len(rec.prefix_keys)] != rec.prefix_keys:
            raise _Unproven("a stack trace outside the call")
        stack = node.meta.get("nn_module_stack") or {}
        if list(stack)[:rec.stack_len] != rec.stack_keys:
            raise _Unproven("a module stack outside the call")
        if "torch_fn" in node.meta:
            fn, count = self.fn_of.get(node, (None, None))
            if fn is None or count is None or count <= rec.fn_before.get(fn, 0):
                raise _Unproven("a torch function called before the call")
        for arg in node.all_input_nodes:
            if arg in segment or arg in rec.external:
                continue
            val = arg.meta.get("val")
            if isinstance(val, _SYM_TYPES) and id(val.node) in input_symbols:
                rec.external_symbols[arg] = input_symbols[id(val.node)]
                continue
            raise _Unproven(f"node {node.name} reads {arg.name}, made outside the call")


    # -- the copy plan: replay by copying nodes, for static shapes --

    def _plan_copy(self, rec: _Recording, prepared: dict, out_leaves: list, segment: set) -> None:
        """How to make a later call's nodes by copying: each value's layout and the storage it shares
        (an input's, or an earlier value's of the call), checked to need no operator run."""
        external_storage: dict[Any, int] = {}
        for node, index in rec.external.items():
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                external_storage.setdefault(storage_key(val), index)
        seen: dict[Any, tuple] = {}
        input_symbols: dict[int, int] = {}
        for index, symbol in enumerate(prepared["symbols"]):
            input_symbols.setdefault(id(symbol.node), index)
        for node in rec.nodes:
            if set(node.meta) - _COPIED_META:
                raise _Unproven("metadata the copy does not make")
            val = node.meta["val"]
            if isinstance(val, _SYM_TYPES):
                if node.target in _SYM_READS and node.args[0] not in segment:
                    raise _Unproven("a size of an input read first inside the call")
                rec.value_plan[node] = ("sym", val)
                continue
            values = val if isinstance(val, (tuple, list)) else (val,)
            layouts = []
            for j, t in enumerate(values):
                if t is None:
                    layouts.append(None)
                    continue
                if not isinstance(t, torch.Tensor) or type(t) is not proxy_tensor.FakeTensor:
                    raise _Unproven("an unusual value")
                key = storage_key(t)
                if key is None:
                    raise _Unproven("a value without storage")
                if key in external_storage:
                    origin: Any = ("input", external_storage[key])
                elif key in seen:
                    origin = ("node", seen[key])
                else:
                    if t.storage_offset() != 0:
                        raise _Unproven("a first view of a storage")
                    origin = None
                    seen[key] = (node, j)
                layouts.append((origin, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device,
                                t.requires_grad))
            rec.value_plan[node] = (isinstance(val, (tuple, list)), type(val), layouts)
        for leaf in out_leaves:
            if not isinstance(leaf, torch.Tensor):
                continue
            node = proxy_tensor.get_proxy_slot(leaf, self.tracer).proxy.node
            if node not in segment:
                continue
            if tracer_state.is_view(leaf) or not _dense_contiguous(leaf) or leaf.storage_offset() != 0:
                raise _Unproven("an output the copy cannot make")
            if storage_key(leaf) in external_storage:
                raise _Unproven("an output sharing an input's storage")

            def dim(d: Any) -> Any:
                if not isinstance(d, torch.SymInt):
                    return d
                k = input_symbols.get(id(d.node))
                return ("input", k) if k is not None else ("fresh", d)
            rec.output_layouts[node] = (tuple(dim(d) for d in leaf.shape), tuple(dim(d) for d in leaf.stride()),
                                        leaf.dtype, leaf.device, leaf.requires_grad, type(leaf))
        for index, t in enumerate(prepared["tensors"]):
            after = proxy_tensor.get_proxy_slot(t, self.tracer).proxy.node
            if after is prepared["tensor_nodes"][index]:
                continue
            if after not in segment:
                raise _Unproven("an input read as another node after the call")
            rec.retracked.append((index, after))

    def _copy(self, rec: _Recording, prepared: dict, replay: _Replay) -> dict | None:
        """The later call's nodes, copied; None (nothing made) when its values cannot be built."""
        tensors, inputs = prepared["tensors"], prepared["tensor_nodes"]
        values: dict[torch.fx.Node, Any] = {}
        runtime: dict[torch.fx.Node, Any] = {}
        metas: dict[tuple, torch.Tensor] = {}
        symbols = prepared["symbols"]
        fresh: dict[int, Any] = {}

        def dim(d: Any) -> Any:
            if not isinstance(d, tuple):
                return d
            if d[0] == "input":
                return symbols[d[1]]
            if id(d[1].node) not in fresh:  # a size of the call's own making: a symbol object of its own
                fresh[id(d[1].node)] = torch.SymInt(d[1].node.with_shape_env(d[1].node.shape_env))
            return fresh[id(d[1].node)]

        try:
            for index in rec.external_symbols.values():
                if proxy_tensor.get_proxy_slot(symbols[index], self.tracer, None) is None:
                    log.debug("block reuse: an input size of the call has no node: replayed by its operators")
                    return None
            with tracer_state.outside_tracing():
                for node, layout in rec.output_layouts.items():
                    shape, stride, dtype, device, requires_grad, _ = layout
                    shape, stride = [dim(d) for d in shape], [dim(d) for d in stride]
                    leaf = fake_from_meta(self.fake_mode, _own_storage_value(shape, stride, dtype, rec.extents,
                                                                             ("output", node)), device)
                    if requires_grad:
                        with torch.enable_grad():
                            leaf.requires_grad_(True)
                            out = leaf.clone()
                        if not _same_dims((*out.shape, *out.stride()), (*shape, *stride), symbols):
                            log.debug("block reuse: an output's clone has symbols of its own: "
                                      "replayed by its operators")
                            return None  # a full trace's sizes would differ
                        runtime[node] = out
                    else:
                        runtime[node] = leaf
                for node in rec.nodes:
                    plan = rec.value_plan[node]
                    if plan[0] == "sym":
                        values[node] = plan[1]
                        continue
                    is_seq, seq_type, layouts = plan
                    made = []
                    for j, layout in enumerate(layouts):
                        if layout is None:
                            made.append(None)
                            continue
                        origin, shape, stride, offset, dtype, device, requires_grad = layout
                        if origin is None and not (node in runtime and not is_seq):
                            # a storage of its own, at offset 0 (the plan checked): the tensor made with it
                            # is the value (a second tensor set_ onto it would redo the symbolic size and
                            # contiguity arithmetic, most of a dynamic copy's time)
                            meta = _own_storage_value(shape, stride, dtype, rec.extents, (node, j))
                        elif origin is not None and origin[0] == "node" and _values_as_views() \
                                and metas[origin[1]].dtype == dtype:
                            # a view of an earlier value of the call: a strided view of its meta tensor (no
                            # storage bounds or contiguity worked out in symbols, as set_ does)
                            meta = metas[origin[1]].as_strided(shape, stride, offset)
                        else:
                            if origin is None:
                                storage = runtime[node].untyped_storage()
                            elif origin[0] == "input":
                                storage = inputs[origin[1]].meta["val"].untyped_storage()
                            else:
                                storage = metas[origin[1]].untyped_storage()
                            meta = torch.empty(0, dtype=dtype, device="meta").set_(storage, offset, shape, stride)
                        metas[(node, j)] = meta
                        fake = fake_from_meta(self.fake_mode, meta, device)
                        if requires_grad:
                            fake.requires_grad_(True)
                        made.append(fake)
                    values[node] = seq_type(made) if is_seq else made[0]
        except Exception:
            return None
        env: dict[torch.fx.Node, torch.fx.Node] = {node: inputs[index] for node, index in rec.external.items()}
        graph = self.tracer.graph
        replay.extras_only = True
        for position, node in enumerate(rec.nodes):
            for arg in node.all_input_nodes:
                if arg in rec.external_symbols and arg not in env:
                    # an input's size, read here first: a full trace makes its node here too
                    replay.position = position
                    self.replaying = replay
                    try:
                        proxy = proxy_tensor.get_proxy_slot(symbols[rec.external_symbols[arg]], self.tracer).force()
                    finally:
                        self.replaying = None
                    env[arg] = proxy.node
            new = graph.create_node("call_function", node.target, torch.fx.node.map_arg(node.args, env.__getitem__),
                                    torch.fx.node.map_arg(node.kwargs, env.__getitem__), self.names.get(node))
            env[node] = new
            new.meta["val"] = values[node]
            if "tensor_meta" in node.meta:
                new.meta["tensor_meta"] = node.meta["tensor_meta"]
            self._copy_metadata(replay, node, new)
        with tracer_state.outside_tracing():  # as an operator's result is tracked: nothing recorded meanwhile
            for node, out in runtime.items():
                tracer_state.track_tensor_with_sizes(out, env[node], self.tracer)
        for index, node in rec.retracked:
            tracer_state.track_tensor_as(tensors[index], env[node], self.tracer)
        return runtime

    # -- matching and replay --

    def _matches(self, rec: _Recording, m: torch.nn.Module, prepared: dict) -> bool:
        if not rec.usable or rec.input_fp != prepared["input_fp"] or rec.state_fp != prepared["state_fp"]:
            return False
        if rec.context_fp != _context_fingerprint() or rec.knowledge != self._knowledge():
            return False
        keep = prepared["keep"]
        for (rel, sub), (rel_a, _) in zip(prepared["subtree"], rec.modules):
            mine, theirs = _attribute_fingerprints(sub, keep), rec.attributes[rel_a]
            if mine == theirs:
                continue
            cls = type(sub)
            for name in set(mine) | set(theirs):
                if mine.get(name) != theirs.get(name) and (
                        (rel, name) in rec.reads or not self._watchable(cls, name)):
                    return False
        return True

    def _replay(self, rec: _Recording, prepared: dict) -> Any:
        stack = tracer_state.module_stack(self.tracer)
        replay = _Replay(rec, list(stack.items()), self.frame_keys(sys._getframe(2)),
                         dict(tracer_state.module_call_counts(self.tracer)),
                         dict(tracer_state.torch_fn_counts(self.tracer)),
                         tracer_state.torch_fn_metadata(self.tracer), queue=rec.nodes)
        tensors = prepared["tensors"]
        copied = self._copy(rec, prepared, replay) if rec.copyable else None
        if copied is not None:
            self._advance_counters(rec, replay)
            LAST_STATS["replayed"] = LAST_STATS.get("replayed", 0) + 1
            LAST_STATS["copied"] = LAST_STATS.get("copied", 0) + 1
            return self._outputs(rec, copied, tensors)
        runtime: dict[torch.fx.Node, Any] = {}
        for node, index in rec.external.items():
            runtime[node] = tensors[index]
        for node, index in rec.external_symbols.items():
            runtime[node] = prepared["symbols"][index]

        def value_of(n: torch.fx.Node) -> Any:
            return runtime[n]

        self.replaying = replay
        try:
            for index, node, items in rec.plan:
                if node.target in _SYM_READS:
                    # a size read: made when a size is first used; a full trace makes it again only if
                    # this size has no node yet (a size of a tensor of this call, not one of its inputs')
                    value = _SYM_READS[node.target](*torch.fx.node.map_arg(node.args, value_of))
                    runtime[node] = value
                    slot = proxy_tensor.get_proxy_slot(value, self.tracer, None) \
                        if isinstance(value, _SYM_TYPES) else None
                    if slot is not None:
                        slot.force()
                    if replay.position == index:
                        replay.position += 1
                    continue
                args = torch.fx.node.map_arg(node.args, value_of)
                kwargs = torch.fx.node.map_arg(node.kwargs, value_of)
                result = node.target(*args, **kwargs)
                runtime[node] = result
                for item in items:
                    runtime[item] = result[item.args[1]]
            if replay.position != len(rec.nodes):
                raise InternalError(f"graphcap's replay of a repeated block made {replay.position} nodes where its "
                                    f"recording has {len(rec.nodes)}.",
                                    fix=f"Export with {ENV_VAR}=0 (or inside "
                                        f"graphcap.trace.block_reuse.reuse_repeated_blocks(False)) and report it.")
        finally:
            self.replaying = None
        self._advance_counters(rec, replay)
        LAST_STATS["replayed"] = LAST_STATS.get("replayed", 0) + 1
        return self._outputs(rec, runtime, tensors)

    def _outputs(self, rec: _Recording, runtime: dict, tensors: list) -> Any:
        out = []
        for kind, value in rec.out_leaves:
            if kind == "node":
                out.append(runtime[value])
            elif kind == "input":
                out.append(tensors[value])
            else:
                out.append(value)
        return pytree.tree_unflatten(out, rec.out_spec)

    def _advance_counters(self, rec: _Recording, replay: _Replay) -> None:
        """Move the tracer's call and torch-function counts as far as a full trace of the call would."""
        counts = tracer_state.module_call_counts(self.tracer)
        for path, after in rec.calls_after.items():
            done = after - rec.calls_before.get(path, 0)
            if done and path != rec.call_path:
                new_path = self._translate_path(rec, replay, path)
                counts[new_path] = replay.calls_before.get(new_path, 0) + done
        fns = dict(replay.fn_before)
        called = False
        for fn, after in rec.fn_after.items():
            done = after - rec.fn_before.get(fn, 0)
            if done:
                fns[fn] = replay.fn_before.get(fn, 0) + done
                called = True
        tracer_state.set_torch_fn_state(self.tracer, fns, rec.fn_last if called else replay.fn_last_before)

    def _translate_path(self, rec: _Recording, replay: _Replay, path: str) -> str:
        new_call = replay.stack_items[-1][1][0]
        if path == rec.call_path:
            return new_call
        if path.startswith(rec.call_path + "."):
            return new_call + path[len(rec.call_path):]
        return path

    def _translate_key(self, rec: _Recording, replay: _Replay, key: str, path: str) -> tuple[str, str]:
        new_path = self._translate_path(rec, replay, path)
        _, index = module_paths.split_call_name(key) if key != path else (path, 0)
        index = replay.calls_before.get(new_path, 0) + index - rec.calls_before.get(path, 0)
        return (f"{new_path}@{index}" if index > 0 else new_path), new_path

    def create_replayed(self, create: Callable[..., torch.fx.Node], args: tuple, kwargs: dict) -> torch.fx.Node:
        """Make the next node of the replay (the recorder's ``create_node`` calls this while replaying)."""
        replay = self.replaying
        assert replay is not None
        kind, target = args[0], args[1]
        if replay.extras_only:
            node = create(*args, **kwargs)
            self._copy_metadata(replay, replay.queue[replay.position], node)
            return node
        if target in _SYM_READS and (replay.position >= len(replay.queue)
                                     or replay.queue[replay.position].target is not target):
            # a size of an input the call's operator reads first here: a full trace makes it here too,
            # with the metadata of the operator it serves
            node = create(*args, **kwargs)
            if replay.position < len(replay.queue):
                self._copy_metadata(replay, replay.queue[replay.position], node)
            return node
        if replay.position >= len(replay.queue) or replay.queue[replay.position].target is not target \
                or replay.queue[replay.position].op != kind:
            raise InternalError(f"graphcap's replay of a repeated block made a {kind} node of {target} that its "
                                f"recording does not have there.",
                                fix=f"Export with {ENV_VAR}=0 (or inside "
                                    f"graphcap.trace.block_reuse.reuse_repeated_blocks(False)) and report it.")
        recorded = replay.queue[replay.position]
        replay.position += 1
        padded = list(args) + [None] * (6 - len(args))
        type_expr = kwargs.get("type_expr", padded[5])
        node = create(kind, target, padded[2], padded[3], self.names.get(recorded), type_expr)
        self._copy_metadata(replay, recorded, node)
        return node

    def _copy_metadata(self, replay: _Replay, recorded: torch.fx.Node, node: torch.fx.Node) -> None:
        rec = replay.rec
        old = recorded.meta.get("nn_module_stack") or {}
        items = list(old.items())
        stack = dict(replay.stack_items)
        for key, (path, cls) in items[rec.stack_len:]:
            new_key, new_path = self._translate_key(rec, replay, key, path)
            stack[new_key] = (new_path, cls)
        for key, (path, cls) in list(stack.items()):
            if isinstance(cls, type):
                stack[key] = (path, cls.__module__ + "." + cls.__qualname__)
        node.meta["nn_module_stack"] = stack
        keys = replay.prefix_keys + self.keys[recorded][len(rec.prefix_keys):]
        self.keys[node] = keys
        self.names[node] = self.names.get(recorded)
        if keys:
            node.meta["stack_trace"] = self.format_keys(keys)
        elif "stack_trace" in recorded.meta:
            node.meta["stack_trace"] = recorded.meta["stack_trace"] if not rec.prefix_keys else None
        else:
            node.meta.pop("stack_trace", None)
        if "torch_fn" in recorded.meta:
            fn, count = self.fn_of[recorded]
            new_count = replay.fn_before.get(fn, 0) + count - rec.fn_before.get(fn, 0)
            node.meta["torch_fn"] = (f"{fn.__name__}_{new_count}", recorded.meta["torch_fn"][1])
            self.fn_of[node] = (fn, new_count)
        else:
            node.meta.pop("torch_fn", None)


_COPIED_META = {"val", "tensor_meta", "nn_module_stack", "stack_trace", "torch_fn"}


def _same_dims(got: tuple, planned: tuple, inputs: list) -> bool:
    """Whether sizes ``got`` are ``planned`` as a full trace would make them: an input's symbol the
    same object, a symbol of the call's own making a new object of the same expression, sharing alike."""
    own = {id(s.node) for s in inputs}
    for a, b in zip(got, planned):
        if isinstance(b, torch.SymInt) and id(b.node) in own:
            if a is not b and getattr(a, "node", None) is not b.node:
                return False
        elif isinstance(b, torch.SymInt):
            if not isinstance(a, torch.SymInt) or id(a.node) in own or a.node.expr != b.node.expr:
                return False
        elif isinstance(a, torch.SymInt) or a != b:
            return False
    return _alias_pattern([getattr(a, "node", a) for a in got if isinstance(a, torch.SymInt)]) == \
        _alias_pattern([b.node for b in planned if isinstance(b, torch.SymInt)])


def _own_storage_value(shape: Any, stride: Any, dtype: torch.dtype, extents: dict, key: Any) -> torch.Tensor:
    """A meta tensor of this layout over a storage of its own, at offset 0.

    With symbolic sizes the storage's extent is worked out once per recorded value (``extents``):
    it is the same expression in every copy of a recording (see ``meta_with_layout``).
    """
    symbolic = any(isinstance(d, torch.SymInt) for d in (*shape, *stride))
    if not symbolic or not _values_as_views():
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if key in extents:
        extent = extents[key]
    else:
        extent = extents[key] = storage_extent(shape, stride)
    return meta_with_layout(shape, stride, 0, dtype, extent)


def _dense_contiguous(t: torch.Tensor) -> bool:
    """Whether ``t``'s strides are the contiguous ones, compared as expressions (no guard)."""
    expected: Any = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        got = stride.node.expr if isinstance(stride, torch.SymInt) else stride
        if sympy.expand(got - expected) != 0:
            return False
        expected = expected * (size.node.expr if isinstance(size, torch.SymInt) else size)
    return True


def _writes(op: OpOverload) -> bool:
    schema = schema_of(op)
    return schema is None or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
