"""Classes graphcap flattens by their attributes, and pytree walks that know them.

An input or output of a class that holds tensors but is not a pytree node (a
user's plain class, an unregistered dataclass) is flattened by its attributes
(see :func:`graphcap.pytree.auto_register`). torch's pytree engine only knows
registered classes, and the trace runs torch code that flattens (``make_fx``,
control-flow operators), so such a class is registered with torch's registry
**only while a trace runs** (:func:`registered_while_tracing`) and removed on
every way out; a class the user registered is never touched. Afterwards the
program's own specs still name the class: ``module()``, the input checks, save
and load rebuild and take apart its instances with the walks below, which read
graphcap's own table of such classes where torch's registry has no entry.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Iterator, NamedTuple, Optional

from .torch_private import pytree


class AutoNode(NamedTuple):
    """How graphcap flattens one class (torch's node definition, plus how it is saved and
    how ``module()`` takes an argument apart by the program's spec)."""

    flatten_fn: Callable
    unflatten_fn: Callable
    flatten_with_keys_fn: Callable
    serialized_type_name: str
    flatten_by_spec_fn: Callable  # (obj, spec) -> children, in the spec's order
    to_dumpable: Optional[Callable] = None
    from_dumpable: Optional[Callable] = None


_KNOWN: dict[type, AutoNode] = {}  # graphcap's own node classes, and every class it flattened by attributes
_OWN: set[type] = set()  # of those, graphcap's own node classes
_SCOPES: list[list[type]] = []  # one list per running trace: the classes it registered with torch


def node_of(cls: type, holds_tensor: Callable[[Any], bool], serialized_type_name: Optional[str] = None) -> AutoNode:
    """The node functions of ``cls`` (made once): children are the attributes that hold tensors.

    Attributes that hold no tensor (sizes, flags, dtypes) are kept in the
    node's context ``(keys, static)``: part of the structure, like a dict's keys.
    ``serialized_type_name`` is the name files give the class (default: its
    qualified name, ``module.QualName``, which another process imports).
    """
    if cls in _KNOWN:
        return _KNOWN[cls]

    def split(obj):
        attrs = vars(obj)
        built_with = _rebuilt_keys(obj)
        keys = tuple(k for k, v in attrs.items() if holds_tensor(v) or k in built_with)
        return keys, tuple((k, v) for k, v in attrs.items() if k not in keys)

    def flatten(obj):
        keys, static = split(obj)
        return [getattr(obj, k) for k in keys], (keys, static)

    def flatten_with_keys(obj):
        keys, static = split(obj)
        return [(pytree.GetAttrKey(k), getattr(obj, k)) for k in keys], (keys, static)

    def unflatten(values, context):
        keys, static = context
        obj = cls.__new__(cls)
        obj.__dict__.update(static)
        obj.__dict__.update(zip(keys, values))
        _remember_keys(obj, keys)
        return obj

    def flatten_by_spec(obj, spec):
        return [getattr(obj, k) for k in spec.context[0]]

    _KNOWN[cls] = AutoNode(flatten, unflatten, flatten_with_keys,
                           serialized_type_name or f"{cls.__module__}.{cls.__qualname__}", flatten_by_spec)
    return _KNOWN[cls]


# The children each object rebuilt by a node's unflatten was built with. torch's tools rebuild a
# structure from placeholder leaves and flatten it again to read its spec (ExecuTorch's emitter
# does, with integers for leaves): the rebuilt object must flatten to the same children although
# its attributes hold no tensor.
_BUILT_WITH: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def _remember_keys(obj: Any, keys: tuple) -> None:
    try:
        _BUILT_WITH[obj] = keys
    except TypeError:  # an unhashable or unweakreferenceable class: children by their tensors only
        pass


def _rebuilt_keys(obj: Any) -> tuple:
    try:
        return _BUILT_WITH.get(obj, ())
    except TypeError:
        return ()


# How torch's pytree writes an attribute-flattened node's context as text (``treespec_dumps``, for
# a program handed to ExecuTorch, AOTInductor or torch's own save): graphcap's value encoding,
# which lives in the serializer above this module; ``graphcap.serialize.context_text`` installs it
# (the public entry points import it). None: handed-over classes get no text form.
_CONTEXT_TEXT: Optional[tuple[Callable[[tuple], str], Callable[[str], tuple]]] = None


def use_context_text(to_text: Callable[[tuple], str], from_text: Callable[[str], tuple]) -> None:
    """Install the functions torch's pytree writes and reads attribute-flattened contexts with."""
    global _CONTEXT_TEXT
    _CONTEXT_TEXT = (to_text, from_text)


def add_own_node(cls: type, node: AutoNode) -> None:
    """A pytree node class of graphcap's own (``module_inputs.ModuleInput``): in the table, so
    that traces register it and the walks, save and load know it, never torch's registry otherwise."""
    _KNOWN[cls] = node
    _OWN.add(cls)


def is_auto_flattened(cls: Any) -> bool:
    return cls in _KNOWN


def known_classes() -> dict[type, AutoNode]:
    """Every class of the table: graphcap's own node classes and the classes flattened by attributes."""
    return dict(_KNOWN)


def attribute_flattened_classes() -> list[type]:
    """The user classes graphcap flattened by their attributes in this process."""
    return [cls for cls in _KNOWN if cls not in _OWN]


def registered_as_own(cls: type) -> bool:
    """Whether torch's registry entry for ``cls`` is the one a running trace made from the table."""
    return _is_ours(cls)


def _is_ours(cls: type) -> bool:
    node = pytree.registered_node(cls)
    return node is not None and cls in _KNOWN and node.unflatten_fn is _KNOWN[cls].unflatten_fn


def register_for_trace(cls: type) -> None:
    """Make ``cls`` (already in the table) a torch pytree node until the running trace ends.

    Outside a trace nothing is registered: graphcap's walks know the class anyway.
    """
    if not _SCOPES:
        return
    with pytree.registry_lock():
        if pytree.registered_node(cls) is not None:
            return  # the user's registration, or this trace's own
        node = _KNOWN[cls]
        pytree.register_python_node(cls, node.flatten_fn, node.unflatten_fn, node.flatten_with_keys_fn,
                                           node.serialized_type_name, node.to_dumpable, node.from_dumpable)
    _SCOPES[-1].append(cls)


def rename(cls: type, serialized_type_name: str) -> None:
    """Give a table class (not yet registered with torch) another name in files."""
    _KNOWN[cls] = _KNOWN[cls]._replace(serialized_type_name=serialized_type_name)


def serialized_name(cls: type) -> str:
    return _KNOWN[cls].serialized_type_name


def register_with_torch(cls: type) -> bool:
    """Register a table class with torch's pytree for good, with the table's node functions and name.

    What a hand-over does for each class a program's structure names, and what
    ``graphcap.register_flattenable(cls, with_torch=True)`` does in a process
    that loads torch's files (an AOTInductor package, a program file torch's own saver wrote)
    made from a graphcap program: the same functions under the same name,
    so the file's structure reads back. Returns False when torch's registry
    already holds another registration of ``cls`` (left as it is).
    """
    with pytree.registry_lock():
        if pytree.registered_node(cls) is not None:
            return _is_ours(cls)
        node = _KNOWN[cls]
        # torch writes the context as text (treespec_dumps): an attribute-flattened node's through
        # the installed context text (serialize.context_text); graphcap's files keep their own
        to_text, from_text = (node.to_dumpable, node.from_dumpable) if cls in _OWN \
            else (_CONTEXT_TEXT or (None, None))
        pytree.register_python_node(cls, node.flatten_fn, node.unflatten_fn, node.flatten_with_keys_fn,
                                    node.serialized_type_name, to_text, from_text)
    return True


def register_for_torch(spec: Optional[Any]) -> None:
    """Register with torch, for good, the table's classes that ``spec`` names.

    For a program handed to torch (``graphcap.to_torch``): torch's own
    ``module()`` flattens and rebuilds through torch's registry only. Beyond a
    trace, graphcap registers a class with torch only here (the program is
    handed to torch) and when the user asks (``register_flattenable(cls,
    with_torch=True)``).
    """
    if spec is None or spec.is_leaf():
        return
    if spec.type in _KNOWN:
        register_with_torch(spec.type)
    for child in spec.children():
        register_for_torch(child)


@contextlib.contextmanager
def registered_while_tracing() -> Iterator[None]:
    """The scope of one trace: classes registered in it are removed when it ends, however it ends.

    Traces run one at a time (``graphcap.api.TRACING_LOCK``); a trace started
    inside another (a forward that exports) hands its classes to the outer one.
    """
    mine: list[type] = []
    _SCOPES.append(mine)
    try:
        yield
    finally:
        _SCOPES.remove(mine)
        if _SCOPES:
            _SCOPES[-1].extend(mine)
        else:
            with pytree.registry_lock():
                for cls in reversed(mine):
                    if _is_ours(cls):  # a registration made meanwhile by the user stays
                        pytree.deregister_python_node(cls)


# --------------------------------------------------------------------------
# walks: torch's registry first, then graphcap's table
# --------------------------------------------------------------------------

def _node(typ: Any) -> Optional[Any]:
    return pytree.registered_node(typ) or _KNOWN.get(typ)


def _node_type(obj: Any) -> Optional[Any]:
    if type(obj) in _KNOWN and pytree.registered_node(type(obj)) is None:
        return type(obj)
    typ = pytree.node_type(obj)
    return typ if pytree.registered_node(typ) is not None else None


def flatten_with_path(tree: Any, is_leaf: Optional[Callable[[Any], bool]] = None
                      ) -> tuple[list[tuple[tuple, Any]], Any]:
    """torch's pytree ``tree_flatten_with_path`` that also knows graphcap's classes."""
    out: list[tuple[tuple, Any]] = []

    def walk(obj: Any, path: tuple) -> Any:
        typ = None if is_leaf is not None and is_leaf(obj) else _node_type(obj)
        if typ is None:
            out.append((path, obj))
            return pytree.treespec_leaf()
        node = _node(typ)
        children, context = node.flatten_fn(obj)  # the spec's context is flatten's, as torch's
        keys = [k for k, _ in node.flatten_with_keys_fn(obj)[0]] if node.flatten_with_keys_fn is not None \
            else [pytree.SequenceKey(i) for i in range(len(children))]
        return pytree.TreeSpec(typ, context, [walk(c, path + (k,)) for k, c in zip(keys, children)])

    spec = walk(tree, ())
    return out, spec


def flatten(tree: Any, is_leaf: Optional[Callable[[Any], bool]] = None) -> tuple[list[Any], Any]:
    pairs, spec = flatten_with_path(tree, is_leaf)
    return [v for _, v in pairs], spec


def structure(tree: Any) -> Any:
    return flatten_with_path(tree)[1]


def unflatten(leaves: Any, spec: Any) -> Any:
    """torch's pytree ``tree_unflatten`` that also rebuilds graphcap's classes."""
    leaves = list(leaves)
    if len(leaves) != spec.num_leaves:
        raise ValueError(f"unflatten: {len(leaves)} leaves for a structure of {spec.num_leaves} ({spec}).")
    position = iter(leaves)

    def build(s: Any) -> Any:
        if s.is_leaf():
            return next(position)
        children = [build(c) for c in s.children()]
        return _node(s.type).unflatten_fn(children, s.context)

    return build(spec)


def flatten_by_spec(tree: Any, spec: Any) -> list[Any]:
    """The leaves of ``tree`` in the order of ``spec`` (a dict's keys by the spec's order).

    What ``module()`` runs on its arguments, whose structure the input checks
    have already compared with the program's.
    """
    if spec.is_leaf():
        return [tree]
    typ = spec.type
    if typ is dict and isinstance(tree, dict):
        children = [tree[k] for k in spec.context]
    elif typ in (list, tuple, pytree.namedtuple):
        children = [tree[i] for i in range(spec.num_children)]
    elif typ in _KNOWN and (pytree.registered_node(typ) is None or _is_ours(typ)):
        children = _KNOWN[typ].flatten_by_spec_fn(tree, spec)
    elif pytree.flatten_spec_fn(typ) is not None:
        children = pytree.flatten_spec_fn(typ)(tree, spec)
    else:
        children = _node(_node_type(tree) or typ).flatten_fn(tree)[0]
    leaves: list[Any] = []
    for child, child_spec in zip(children, spec.children()):
        leaves += flatten_by_spec(child, child_spec)
    return leaves


def mentions_known_class(spec: Optional[Any]) -> bool:
    """Whether ``spec`` has a node of a class graphcap flattens by attributes."""
    if spec is None or spec.is_leaf():
        return False
    return spec.type in _KNOWN or any(mentions_known_class(c) for c in spec.children())
