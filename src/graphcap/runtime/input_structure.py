"""Compare the structure of given inputs with a program's input tree spec, and draw a structure.

``module()``'s input check and ``ep.example_inputs = ...`` refuse inputs whose
containers differ from the program's (a dict's keys may come in any order:
they are read by key); the message draws both structures with ``*`` for a leaf.
"""
from __future__ import annotations

from typing import Any

from .. import auto_flatten, module_inputs
from ..pytree import input_path_str
from ..torch_private import pytree


def _same_structure(a: Any, b: Any) -> bool:
    """Tree specs equal, except that a dict's keys may come in any order."""
    if a.type is not b.type or a.num_children != b.num_children:
        return False
    if a.type is dict:
        if set(a.context) != set(b.context):
            return False
        order = {k: i for i, k in enumerate(a.context)}
        return all(_same_structure(a.child(order[k]), b.child(j)) for j, k in enumerate(b.context))
    if a.context != b.context:
        return False
    return all(_same_structure(a.child(i), b.child(i)) for i in range(a.num_children))


def other_structure(args: Any, kwargs: Any, in_spec: Any) -> Any:
    """The tree spec of ``(args, kwargs)`` when it is not the program's ``in_spec``, None when it
    is (a dict's keys may come in any order: they are read by key)."""
    spec = auto_flatten.structure(module_inputs.wrap((tuple(args), dict(kwargs))))
    return None if spec == in_spec or _same_structure(spec, in_spec) else spec


def drawn_structure(spec: Any) -> str:
    """An input structure drawn as containers with one ``*`` a leaf."""
    return repr(auto_flatten.unflatten(["*"] * spec.num_leaves, spec)).replace("'*'", "*")


def _kind(spec: Any) -> str:
    if spec.is_leaf():
        return "one tensor or value"
    cls = spec.context if isinstance(spec.context, type) else spec.type  # a namedtuple's class is its context
    name = getattr(cls, "__qualname__", str(cls))
    return {"tuple": "a tuple", "list": "a list", "dict": "a dict"}.get(name, name)


def first_difference(expected: Any, got: Any) -> str:
    """The first place, as an input path (``*args[0]['b']``, ``*args[1].y``, ``**kwargs['y']``), where
    the structure ``got`` of a call differs from the program's ``expected``, and how: said in words
    for the structure check's message. Paths are the program's own input paths (the keys its
    classes flatten with)."""
    dummy = auto_flatten.unflatten(list(range(expected.num_leaves)), expected)
    leaf_paths = [p for p, _ in auto_flatten.flatten_with_path(dummy)[0]]

    def child_path(parent: tuple[Any, ...], spec: Any, j: int, first_leaf: int) -> tuple[Any, ...]:
        """The key path of child ``j`` of ``spec``: the prefix of its first leaf's path."""
        if spec.child(j).num_leaves and first_leaf < len(leaf_paths):
            return leaf_paths[first_leaf][:len(parent) + 1]
        return parent + (pytree.SequenceKey(j),)

    def walk(a: Any, b: Any, path: tuple[Any, ...], first_leaf: int) -> str | None:
        if a.is_leaf() and b.is_leaf():
            return None
        text = input_path_str(path)
        where = f"at {text}: "
        if a.type is not b.type or a.is_leaf() != b.is_leaf():
            return f"{where}expected {_kind(a)}, got {_kind(b)}"
        starts = [first_leaf]
        for j in range(a.num_children - 1):
            starts.append(starts[-1] + a.child(j).num_leaves)
        if a.type is dict:
            missing = [k for k in a.context if k not in b.context]
            extra = [k for k in b.context if k not in a.context]
            if missing or extra:
                what = "keyword arguments" if text == "**kwargs" else "keys"
                parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                        ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
                return f"{where}{what} differ: {'; '.join(parts)}"
            order = {k: j for j, k in enumerate(b.context)}
            for j, k in enumerate(a.context):
                found = walk(a.child(j), b.child(order[k]), child_path(path, a, j, starts[j]), starts[j])
                if found:
                    return found
            return None
        if a.num_children != b.num_children:
            what = "positional argument" if text == "*args" else "item"
            return f"{where}expected {a.num_children} {what}{'' if a.num_children == 1 else 's'}, got {b.num_children}"
        if a.context != b.context:
            return f"{where}expected {_kind(a)} with context {a.context!r}, got {b.context!r}"
        for j in range(a.num_children):
            found = walk(a.child(j), b.child(j), child_path(path, a, j, starts[j]), starts[j])
            if found:
                return found
        return None

    if _args_kwargs(expected) and _args_kwargs(got):  # positional and keyword arguments, each told
        found = [walk(expected.child(0), got.child(0), (pytree.SequenceKey(0),), 0),
                 walk(expected.child(1), got.child(1), (pytree.SequenceKey(1),), expected.child(0).num_leaves)]
        return "; ".join(f for f in found if f) or "the containers differ"
    return walk(expected, got, (), 0) or "the containers differ"


def _args_kwargs(spec: Any) -> bool:
    return spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple \
        and spec.child(1).type is dict
