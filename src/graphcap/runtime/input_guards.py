"""torch.export's wording of failed input checks, beside graphcap's own.

graphcap names an input by where it sits in the call (``*args[1]``,
``**kwargs['mask']``); torch.export's ``module()`` names it by the forward's
own parameter (``y``, ``ys[0]``, ``z['k']``) and words a failed check as a
condition, ``Guard failed: x.size()[0] >= 3``. Code written against torch
matches that phrase, so graphcap's errors carry both: its own sentence (what,
where, how to fix) and torch's condition line.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import sympy

from ..torch_private import pytree


def forward_names(arg_names: Optional[Sequence[str]], in_spec: Any, avoid: frozenset[str] = frozenset()) -> list[str]:
    """The name of each positional then keyword input, as the program's forward calls them.

    The recorded forward parameter names are used when they fit the input
    structure (one per positional argument and keyword, valid and distinct
    identifiers); otherwise ``arg_0, arg_1, ...`` and the keyword names.
    A positional name the generated forward reads itself (fx's globals such
    as ``torch``, or ``avoid``: builtins the graph calls by name) becomes
    ``arg_<i>``, so the parameter does not shadow it.
    """
    if is_args_kwargs(in_spec):
        n_args = in_spec.child(0).num_children
        kwarg_names = [str(k) for k in in_spec.child(1).context]
    else:
        n_args, kwarg_names = in_spec.num_children, []
    names = [_unshadowing(n, i, avoid) for i, n in enumerate(arg_names or [])]
    if len(names) == n_args + len(kwarg_names) and names[n_args:] == kwarg_names and _usable(names, avoid):
        return names
    if len(names) >= n_args and _usable(names[:n_args] + kwarg_names, avoid):
        return names[:n_args] + kwarg_names
    fallback = [f"arg_{i}" for i in range(n_args)] + kwarg_names
    return fallback if _usable(fallback, avoid) else [f"arg_{i}" for i in range(n_args + len(kwarg_names))]


def _unshadowing(name: str, position: int, avoid: frozenset[str]) -> str:
    """``arg_<i>`` for a parameter named like a global of fx's generated code (``torch``):
    as a parameter it would shadow the ``torch.ops...`` the body calls."""
    return f"arg_{position}" if name in _fx_globals() or name in avoid else name


def _fx_globals() -> frozenset[str]:
    from ..torch_private.naming_and_shapes import fx_codegen_global_names
    return fx_codegen_global_names()


def is_args_kwargs(in_spec: Any) -> bool:
    """Whether ``in_spec`` is the ``(args_tuple, kwargs_dict)`` structure export records."""
    return (in_spec.type is tuple and in_spec.num_children == 2 and in_spec.child(0).type is tuple
            and in_spec.child(1).type is dict)


def _usable(names: list[str], avoid: frozenset[str] = frozenset()) -> bool:
    import keyword
    return (len(set(names)) == len(names)
            and all(n.isidentifier() and not keyword.iskeyword(n) and n != "self" and n not in _fx_globals()
                    and n not in avoid for n in names))


def placeholder_leaves(in_spec: Any) -> list[Any]:
    """Stand-in leaves to rebuild the input structure with: tensors, since classes flattened by
    their tensor-holding attributes list only attributes that hold one."""
    import torch
    return [torch.empty(0) for _ in range(in_spec.num_leaves)]


def leaf_sources(in_spec: Any, names: list[str]) -> list[str]:
    """torch's name of every input leaf, in flat order: ``x``, ``ys[0]``, ``z['k']``."""
    from ..auto_flatten import flatten_with_path, unflatten
    dummy = unflatten(placeholder_leaves(in_spec), in_spec)
    out = []
    n_args = in_spec.child(0).num_children if is_args_kwargs(in_spec) else 0
    for path, _ in flatten_with_path(dummy)[0]:
        out.append(_source(path, names, n_args))
    return out


def _source(path: tuple[Any, ...], names: list[str], n_args: int) -> str:
    if len(path) < 2:
        return "inputs" + pytree.keystr(path)
    group, key = path[0], path[1]
    if getattr(group, "idx", None) == 0 and hasattr(key, "idx"):
        head = names[key.idx] if key.idx < len(names) else f"args[{key.idx}]"
    elif getattr(group, "idx", None) == 1 and hasattr(key, "key"):
        head = str(key.key)
    else:
        head = "inputs" + pytree.keystr(path[:2])
    return head + pytree.keystr(path[2:])


def size_source(source: str, dim: int) -> str:
    return f"{source}.size()[{dim}]"


def value_condition(source: str, value: Any) -> str:
    """``y == 5``, ``y == 5.0``, ``mode == 'trunc'``, ``math.isnan(y)``."""
    if isinstance(value, float) and math.isnan(value):
        return f"math.isnan({source})"
    return f"{source} == {value!r}"


def expr_condition(expr: Any, sources: dict[Any, Any]) -> str:
    """A sympy relation or expression over size symbols, with each symbol written as its input size."""
    named = expr.xreplace({s: sympy.Symbol(n) for s, n in sources.items()})
    if isinstance(named, sympy.Eq):
        return f"{_py(named.lhs)} == {_py(named.rhs)}"
    if isinstance(named, sympy.Ne):
        return f"{_py(named.lhs)} != {_py(named.rhs)}"
    return _py(named)


def _py(expr: Any) -> str:
    from ..torch_private.symbolic import python_source
    return python_source(expr)


def with_guard(what: str, condition: str) -> str:
    """graphcap's sentence, then torch's condition line."""
    return f"{what}\nGuard failed: {condition}"


def with_assertion(what: str, condition: str) -> str:
    """graphcap's sentence, then torch's line for a relation its program checks by an in-graph
    assert (sizes given by a ShapesSpec are unbacked symbols: torch asserts their relations in the
    graph, where graphcap's ``module()`` checks them first)."""
    return f"{what}\nRuntime assertion failed for expression {condition}"

