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


def _kind(spec: Any) -> str:
    if spec.is_leaf():
        return "one tensor or value"
    name = getattr(spec.type, "__qualname__", str(spec.type))
    return {"tuple": "a tuple", "list": "a list", "dict": "a dict"}.get(name, name)


def _step(spec: Any, i: int, top: bool) -> str:
    """The path piece of child ``i`` of ``spec``, as graphcap's input paths write it."""
    if top:
        return "*args" if i == 0 else "**kwargs"
    if spec.type is dict or (spec.context is not None and isinstance(spec.context, list)
                             and len(spec.context) == spec.num_children and spec.type is not tuple):
        key = spec.context[i] if isinstance(spec.context, list) else i
        return f"[{key!r}]"
    fields = getattr(spec.type, "_fields", None)
    if fields is not None and i < len(fields):
        return f".{fields[i]}"
    return f"[{i}]"


def first_difference(expected: Any, got: Any) -> str:
    """The first place, as an input path (``*args[0]['b']``, ``**kwargs['y']``), where the structure
    ``got`` of a call differs from the program's ``expected``, and how: said in words for the
    structure check's message."""
    def walk(a: Any, b: Any, path: str, top: bool) -> str | None:
        if a.is_leaf() and b.is_leaf():
            return None
        where = f"at {path}: " if path else ""
        if a.type is not b.type or a.is_leaf() != b.is_leaf():
            return f"{where}expected {_kind(a)}, got {_kind(b)}"
        if a.type is dict:
            missing = [k for k in a.context if k not in b.context]
            extra = [k for k in b.context if k not in a.context]
            if missing or extra:
                what = "keyword arguments" if top or path == "**kwargs" else "keys"
                parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                        ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
                return f"{where}{what} differ: {'; '.join(parts)}"
            order = {k: j for j, k in enumerate(b.context)}
            for j, k in enumerate(a.context):
                found = walk(a.child(j), b.child(order[k]), f"{path}[{k!r}]", False)
                if found:
                    return found
            return None
        if a.num_children != b.num_children:
            what = "positional argument" if path == "*args" else "item"
            return f"{where}expected {a.num_children} {what}{'' if a.num_children == 1 else 's'}, got {b.num_children}"
        if a.context != b.context:
            return f"{where}expected {_kind(a)} with context {a.context!r}, got {b.context!r}"
        for j in range(a.num_children):
            step = _step(a, j, top)
            found = walk(a.child(j), b.child(j), step if top else path + step, False)
            if found:
                return found
        return None

    if _args_kwargs(expected) and _args_kwargs(got):  # positional and keyword arguments, each told
        found = [walk(expected.child(i), got.child(i), step, False) for i, step in enumerate(("*args", "**kwargs"))]
        return "; ".join(f for f in found if f) or "the containers differ"
    return walk(expected, got, "", True) or "the containers differ"


def _args_kwargs(spec: Any) -> bool:
    return spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple \
        and spec.child(1).type is dict
