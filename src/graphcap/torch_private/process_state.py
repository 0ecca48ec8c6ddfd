"""torch's process-wide pytree registry, reached by graphcap's scoped registration and its tests.

graphcap flattens classes it was not told about (``graphcap.pytree``) by
registering them with torch's Python pytree *only while it traces* and removing
them afterwards, so the process keeps the pytree world it had. That needs the
registry itself and its private register/deregister pair (the public
``register_pytree_node`` also queues the class for the C++ pytree, which has no
matching removal). Each touchpoint is one function here; ``RELIES_ON`` lists
the torch names they use, for the surface test.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import torch.utils._pytree as _pytree

RELIES_ON = {
    "torch.utils._pytree.SUPPORTED_NODES": None,
    "torch.utils._pytree.SUPPORTED_SERIALIZED_TYPES": None,
    "torch.utils._pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE": None,
    "torch.utils._pytree.CONSTANT_NODES": None,
    "torch.utils._pytree._private_register_pytree_node": ("cls", "flatten_fn", "unflatten_fn"),
    "torch.utils._pytree._deregister_pytree_node": ("cls",),
    "torch.utils._pytree._get_node_type": ("tree",),
    "torch.utils._pytree._NODE_REGISTRY_LOCK": None,
    "torch.fx._pytree.SUPPORTED_NODES": None,
    "torch.fx.proxy._STACK_TRACE_ANCHORS": None,
    "torch.utils._pytree.TreeSpec": None,
    "torch.utils._pytree.treespec_leaf": (),
    "torch.utils._pytree.GetAttrKey": None,
    "torch.utils._pytree.SequenceKey": None,
    "torch.utils._pytree.namedtuple": None,
}


def registered_node(typ: Any) -> Optional[Any]:
    """The registry's node definition of ``typ`` (``flatten_fn``, ``unflatten_fn``, ...), or None.

    Relies on ``torch.utils._pytree.SUPPORTED_NODES`` (type -> NodeDef).
    """
    return _pytree.SUPPORTED_NODES.get(typ)


def node_type_of(obj: Any) -> Any:
    """The registry key ``obj`` flattens by (``namedtuple`` for any namedtuple instance).

    Relies on ``torch.utils._pytree._get_node_type``.
    """
    return _pytree._get_node_type(obj)


def tree_spec(typ: Any, context: Any, children: list) -> Any:
    """A pytree spec node. Relies on ``torch.utils._pytree.TreeSpec(type, context, children)``."""
    return _pytree.TreeSpec(typ, context, children)


def leaf_spec() -> Any:
    """The spec of one leaf. Relies on ``torch.utils._pytree.treespec_leaf``."""
    return _pytree.treespec_leaf()


def attr_key(name: str) -> Any:
    """The path entry of an attribute. Relies on ``torch.utils._pytree.GetAttrKey``."""
    return _pytree.GetAttrKey(name)


def sequence_key(index: int) -> Any:
    """The path entry of a position. Relies on ``torch.utils._pytree.SequenceKey``."""
    return _pytree.SequenceKey(index)


def namedtuple_node_type() -> Any:
    """The registry key every namedtuple flattens by. Relies on ``torch.utils._pytree.namedtuple``."""
    return _pytree.namedtuple


def register_python_node(cls: type, flatten: Callable, unflatten: Callable, flatten_with_keys: Callable,
                         serialized_type_name: str, to_dumpable: Optional[Callable] = None,
                         from_dumpable: Optional[Callable] = None) -> None:
    """Register ``cls`` with torch's Python pytree only (nothing queued for the C++ pytree).

    Relies on ``torch.utils._pytree._private_register_pytree_node``.
    """
    _pytree._private_register_pytree_node(cls, flatten, unflatten, serialized_type_name=serialized_type_name,
                                          flatten_with_keys_fn=flatten_with_keys,
                                          to_dumpable_context=to_dumpable, from_dumpable_context=from_dumpable)


def deregister_python_node(cls: type) -> None:
    """Remove a registration :func:`register_python_node` made.

    Relies on ``torch.utils._pytree._deregister_pytree_node``.
    """
    _pytree._deregister_pytree_node(cls)


def flatten_spec_fn(typ: Any) -> Optional[Callable]:
    """The function torch.fx flattens an object *by a spec* with, for a type registered for it.

    (``graphcap.module_inputs`` registers its module wrapper there: a raw module
    flattens by the wrapper's spec.) Relies on ``torch.fx._pytree.SUPPORTED_NODES``.
    """
    import torch.fx._pytree as fx_pytree
    return fx_pytree.SUPPORTED_NODES.get(typ)


@contextlib.contextmanager
def stack_trace_anchor(fn: Any) -> Iterator[None]:
    """Make ``fn``'s frames count as user frames in recorded stack traces, for the block only.

    torch keeps the anchors in a process-wide set that its own tracers read too;
    an anchor added here is taken out again (one the set already had stays).
    Relies on ``torch.fx.proxy._STACK_TRACE_ANCHORS`` (a set of (filename, name)).
    """
    import torch.fx.proxy as fx_proxy
    code = getattr(fn, "__code__", None)
    key = (code.co_filename, code.co_name) if code is not None else None
    added = key is not None and key not in fx_proxy._STACK_TRACE_ANCHORS
    if added:
        fx_proxy._STACK_TRACE_ANCHORS.add(key)
    try:
        yield
    finally:
        if added:
            fx_proxy._STACK_TRACE_ANCHORS.discard(key)


def registry_lock() -> Any:
    """The lock torch takes around registry writes; held across check-then-write here.

    Relies on ``torch.utils._pytree._NODE_REGISTRY_LOCK`` (an RLock).
    """
    return _pytree._NODE_REGISTRY_LOCK


def pytree_registry_snapshot() -> dict[str, Any]:
    """What the registry holds now, comparable with ``==`` (for "nothing left behind" checks).

    Relies on ``SUPPORTED_NODES``, ``SUPPORTED_SERIALIZED_TYPES``,
    ``SERIALIZED_TYPE_TO_PYTHON_TYPE`` and ``CONSTANT_NODES`` of ``torch.utils._pytree``.
    """
    return {
        "nodes": {t: (n.flatten_fn, n.unflatten_fn) for t, n in _pytree.SUPPORTED_NODES.items()},
        "serialized": dict(_pytree.SUPPORTED_SERIALIZED_TYPES),
        "names": dict(_pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE),
        "constants": set(_pytree.CONSTANT_NODES),
    }
