"""Compare the structure of given inputs with a program's input tree spec, and draw a structure.

``module()``'s input check and ``ep.example_inputs = ...`` refuse inputs whose
containers differ from the program's (a dict's keys may come in any order:
they are read by key); the message draws both structures with ``*`` for a leaf.
"""
from __future__ import annotations

from typing import Any

from .. import auto_flatten, module_inputs


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
