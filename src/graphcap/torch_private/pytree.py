"""torch's container flattening (``torch.utils._pytree``, ``torch.fx._pytree``).

graphcap flattens inputs and outputs with torch's pytree so that its specs are
the ones torch's own tools (fx codegen, unflatten, user registrations) read.
``torch.utils._pytree`` is a private module, so the names graphcap uses are
re-exported here unchanged (callers keep writing ``pytree.tree_flatten``), and
the module's private helpers get named functions.

The registry is process-wide. graphcap flattens classes it was not told about
(``graphcap.auto_flatten``) by registering them with torch's Python pytree *only
while it traces* and removing them afterwards, so the process keeps the pytree
world it had. That needs the registry itself and its private
register/deregister pair (the public ``register_pytree_node`` also queues the
class for the C++ pytree, which has no matching removal), under torch's own lock.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch.utils._pytree as _pytree

# Re-exported unchanged: the public-looking names of the private module.
TreeSpec = _pytree.TreeSpec
MappingKey = _pytree.MappingKey
SequenceKey = _pytree.SequenceKey
GetAttrKey = _pytree.GetAttrKey
SUPPORTED_NODES = _pytree.SUPPORTED_NODES
SUPPORTED_SERIALIZED_TYPES = _pytree.SUPPORTED_SERIALIZED_TYPES
SERIALIZED_TYPE_TO_PYTHON_TYPE = _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
NO_SERIALIZED_TYPE_NAME_FOUND = _pytree.NO_SERIALIZED_TYPE_NAME_FOUND
# The node type torch records for every namedtuple (``spec.type is pytree.namedtuple``).
namedtuple = _pytree.namedtuple
tree_flatten = _pytree.tree_flatten
tree_flatten_with_path = _pytree.tree_flatten_with_path
tree_unflatten = _pytree.tree_unflatten
tree_leaves = _pytree.tree_leaves
tree_leaves_with_path = _pytree.tree_leaves_with_path
tree_structure = _pytree.tree_structure
tree_map = _pytree.tree_map
tree_map_only = _pytree.tree_map_only
treespec_leaf = _pytree.treespec_leaf
keystr = _pytree.keystr
register_pytree_node = _pytree.register_pytree_node
is_namedtuple_class = _pytree.is_namedtuple_class
is_namedtuple_instance = _pytree.is_namedtuple_instance
is_structseq_instance = _pytree.is_structseq_instance

RELIES_ON = {
    "torch.utils._pytree.TreeSpec": None,
    "torch.utils._pytree.MappingKey": None,
    "torch.utils._pytree.SequenceKey": None,
    "torch.utils._pytree.GetAttrKey": None,
    "torch.utils._pytree.SUPPORTED_NODES": None,
    "torch.utils._pytree.SUPPORTED_SERIALIZED_TYPES": None,
    "torch.utils._pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE": None,
    "torch.utils._pytree.NO_SERIALIZED_TYPE_NAME_FOUND": None,
    "torch.utils._pytree.namedtuple": None,
    "torch.utils._pytree.tree_flatten": ("tree", "is_leaf"),
    "torch.utils._pytree.tree_flatten_with_path": ("tree", "is_leaf"),
    "torch.utils._pytree.tree_unflatten": ("leaves", "treespec"),
    "torch.utils._pytree.tree_leaves": ("tree", "is_leaf"),
    "torch.utils._pytree.tree_leaves_with_path": ("tree", "is_leaf"),
    "torch.utils._pytree.tree_structure": ("tree", "is_leaf"),
    "torch.utils._pytree.tree_map": ("func", "tree"),
    "torch.utils._pytree.tree_map_only": ("type_or_types_or_pred", "func", "tree"),
    "torch.utils._pytree.treespec_leaf": (),
    "torch.utils._pytree.keystr": ("kp",),
    "torch.utils._pytree.register_pytree_node": ("cls", "flatten_fn", "unflatten_fn"),
    "torch.utils._pytree.is_namedtuple_class": ("cls",),
    "torch.utils._pytree.is_namedtuple_instance": ("obj",),
    "torch.utils._pytree.is_structseq_instance": ("obj",),
    "torch.utils._pytree._get_node_type": ("tree",),
    "torch.utils._pytree._is_leaf": ("tree", "is_leaf"),
    "torch.utils._pytree.CONSTANT_NODES": None,
    "torch.utils._pytree._private_register_pytree_node": ("cls", "flatten_fn", "unflatten_fn"),
    "torch.utils._pytree._deregister_pytree_node": ("cls",),
    "torch.utils._pytree._NODE_REGISTRY_LOCK": None,
    "torch.fx._pytree.tree_flatten_spec": ("pytree", "spec"),
    "torch.fx._pytree.register_pytree_flatten_spec": ("cls", "flatten_fn_spec"),
    "torch.fx._pytree.SUPPORTED_NODES": None,
}


def node_type(value):
    """The type pytree files ``value`` under (namedtuples and structseqs share one entry).

    Relies on ``torch.utils._pytree._get_node_type(tree)``.
    """
    return _pytree._get_node_type(value)


def is_leaf(value, is_leaf=None) -> bool:
    """Whether pytree treats ``value`` as a leaf (no registered node type).

    Relies on ``torch.utils._pytree.tree_is_leaf(tree, is_leaf)``, or on its
    older private name ``_is_leaf`` where a release lacks the public one (the
    private name warns that it is going away).
    """
    public = getattr(_pytree, "tree_is_leaf", None)
    if public is not None:
        return public(value, is_leaf)
    return _pytree._is_leaf(value, is_leaf)


def tree_flatten_spec(value, spec):
    """Flatten ``value`` following ``spec`` (fx's flattener, which honours registered flatten-spec functions).

    Relies on ``torch.fx._pytree.tree_flatten_spec(pytree, spec)``.
    """
    import torch.fx._pytree as fx_pytree
    return fx_pytree.tree_flatten_spec(value, spec)


def register_pytree_flatten_spec(cls, flatten_fn_spec) -> None:
    """Teach fx's spec-driven flattener a class (what the generated ``forward`` calls).

    Relies on ``torch.fx._pytree.register_pytree_flatten_spec(cls, flatten_fn_spec)``.
    """
    import torch.fx._pytree as fx_pytree
    fx_pytree.register_pytree_flatten_spec(cls, flatten_fn_spec)


# -- the process-wide registry (graphcap.auto_flatten's scoped registrations) -------------------

def registered_node(typ: Any) -> Optional[Any]:
    """The registry's node definition of ``typ`` (``flatten_fn``, ``unflatten_fn``, ...), or None."""
    return _pytree.SUPPORTED_NODES.get(typ)


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
