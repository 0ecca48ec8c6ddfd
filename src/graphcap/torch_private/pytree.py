"""torch's container flattening (``torch.utils._pytree``, ``torch.fx._pytree``).

graphcap flattens inputs and outputs with torch's pytree so that its specs are
the ones torch's own tools (fx codegen, unflatten, user registrations) read.
``torch.utils._pytree`` is a private module, so the names graphcap uses are
re-exported here unchanged (callers keep writing ``pytree.tree_flatten``), and
the module's private helpers get named functions.
"""
from __future__ import annotations

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
    "torch.fx._pytree.tree_flatten_spec": ("pytree", "spec"),
    "torch.fx._pytree.register_pytree_flatten_spec": ("cls", "flatten_fn_spec"),
}


def node_type(value):
    """The type pytree files ``value`` under (namedtuples and structseqs share one entry).

    Relies on ``torch.utils._pytree._get_node_type(tree)``.
    """
    return _pytree._get_node_type(value)


def is_leaf(value, is_leaf=None) -> bool:
    """Whether pytree treats ``value`` as a leaf (no registered node type).

    Relies on ``torch.utils._pytree._is_leaf(tree, is_leaf)`` (the same function
    some releases also export as ``tree_is_leaf``).
    """
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
