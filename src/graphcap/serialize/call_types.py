"""Does each argument of a loaded operator call have the kind its schema declares?

A file may put a number where ``aten.mm`` takes a Tensor, a string where a size
list goes, a list where one ``int`` goes: such a graph would build, and fail only
when it runs, with torch's own error about an operator. :func:`misfit` compares
each argument's kind (a tensor, a number, a string, a list, None, a dtype, ...)
with the kind the operator's schema declares, the way torch's call binding
converts Python values (``bench/probes/serialize_audit2.py binding`` compares the
two value by value). It answers only what that binding surely refuses, or what
fails before any kernel runs (None where a Tensor is required): a value it may
convert (a 0-dim tensor where an ``int`` goes, a dtype where an ``int`` goes,
None or a number where a ``bool`` goes) or a type it does not know
(``Generator``, ``Any``, script objects) is left to the call itself. A number
where a Tensor goes is taken only by the operators torch wraps numbers for
(``aten.add.Tensor(x, 1)``), and never as ``self``.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx

from ..torch_private.ops import OpOverload, schema_of, takes_numbers_as_tensors
from .values import bad

_NUMBERS = (bool, int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)
_UNKNOWN = object()  # a node without a saved value: its kind is not known, nothing is refused


def _value_of(v: Any) -> Any:
    """What the argument holds when the graph runs, as far as the file says (a node's saved ``val``)."""
    if isinstance(v, torch.fx.Node):
        return v.meta.get("val", _UNKNOWN)
    return v


def _kind(v: Any) -> str:
    v = _value_of(v)
    if v is _UNKNOWN:
        return "unknown"
    if v is None:
        return "None"
    if isinstance(v, torch.Tensor):
        return "scalar tensor" if v.dim() == 0 else "tensor"  # a 0-dim tensor converts to a number
    if isinstance(v, (float, torch.SymFloat)):
        return "float"
    if isinstance(v, complex):
        return "complex"
    if isinstance(v, _NUMBERS):
        return "int"  # bool, int, SymInt, SymBool: what an int argument takes
    if isinstance(v, str):
        return "str"
    if isinstance(v, (list, tuple)):
        return "list"
    if isinstance(v, torch.device):
        return "device"
    if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
        return "enum"  # torch's binding turns these into ints
    return "unknown"


# For each schema type, the kinds of value the call binding surely refuses (None is refused where
# the type is not Optional; lists are handled in _misfit).
_REFUSED = {
    "int": {"str", "list", "device", "float", "complex", "tensor", "None"},
    "float": {"str", "list", "device", "complex", "tensor", "None"},
    "bool": {"str", "list", "device", "enum", "tensor"},  # None and numbers have a truth value
    "number": {"str", "list", "device", "tensor", "scalar tensor", "None"},
    "ScalarType": {"str", "list", "device", "float", "complex", "tensor", "None"},
    "Layout": {"str", "list", "device", "float", "complex", "tensor", "None"},
    "MemoryFormat": {"str", "list", "device", "float", "complex", "tensor", "None"},
    "Device": {"int", "list", "float", "complex", "tensor", "scalar tensor", "enum", "None"},
    "str": {"int", "float", "complex", "list", "device", "enum", "tensor", "scalar tensor", "None"},
}


def _describe(v: Any) -> str:
    value = _value_of(v)
    if value is _UNKNOWN:
        return "a value"
    if isinstance(v, torch.fx.Node):
        return f"node {v.name} ({type(value).__name__})"
    return type(value).__name__


def _misfit(type_text: str, v: Any, tensor_numbers: bool, is_self: bool, sized: bool) -> Optional[str]:
    """Why ``v`` cannot be passed where the schema says ``type_text``, or None when it may.

    ``sized``: the schema gives the list a length (``int[1] dim``), so a lone value stands for it.
    """
    kind = _kind(v)
    if kind == "unknown":
        return None
    if type_text.startswith("Optional[") and type_text.endswith("]"):
        if kind == "None":
            return None
        type_text = type_text[len("Optional["):-1]
    if type_text.startswith("List[") and type_text.endswith("]"):
        element = type_text[len("List["):-1]
        if kind == "list":
            items = v if isinstance(v, (list, tuple)) else _value_of(v)  # elements that are nodes keep their values
            for item in items:
                why = _misfit(element, item, False, False, False)
                if why is not None:
                    return f"a list holding {why}"
            return None
        if kind == "tensor" and element == "Optional[Tensor]":
            return None  # torch's binding reads a tensor as the sequence of its rows here (``index``)
        if sized and kind == "int" and element in ("int", "bool", "float"):
            return None  # ``int[1] dim=0``: a lone number stands for the list
        return _describe(v)
    if type_text == "Tensor":
        if kind in ("tensor", "scalar tensor"):
            return None
        if kind in ("int", "float", "complex") and tensor_numbers and not is_self:
            return None  # torch wraps a number for the ATen operators that take one (``add(x, 1)``)
        return _describe(v)
    refused = _REFUSED.get(type_text)
    if refused is None:
        return None  # Generator, Any, Storage, script objects, ...: left to the call
    return _describe(v) if kind in refused else None


def misfit(op: OpOverload, values: dict[str, Any]) -> Optional[tuple[str, str, str]]:
    """The first argument (name, what it holds, its schema type) the call binding of ``op`` would refuse."""
    tensor_numbers = takes_numbers_as_tensors(op)
    for p in schema_of(op).arguments:
        if p.name not in values:
            continue
        type_text = str(p.real_type)
        why = _misfit(type_text, values[p.name], tensor_numbers, p.name == "self", p.N is not None)
        if why is not None:
            return p.name, why, type_text
    return None


def check_call(op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, where: str) -> None:
    """Refuse a call whose arguments do not fit the operator's schema (too many, a keyword it does
    not take, a required one missing, a value of another kind than the schema's: ``call_types``):
    such a graph loads and then fails only when it runs."""
    params = schema_of(op).arguments
    positional = [p for p in params if not p.kwarg_only]
    if len(args) > len(positional):
        raise bad(f"Node {name} passes {len(args)} positional arguments to {op}, which takes at most "
                  f"{len(positional)}.", where=where)
    known = {p.name for p in params}
    for key in kwargs:
        if key not in known:
            raise bad(f"Node {name} passes the keyword {key!r} to {op}, which has no such argument.", where=where)
    given = {p.name for p in positional[:len(args)]}
    for p in params:
        if p.name in given and p.name in kwargs:
            raise bad(f"Node {name} passes {op}'s argument {p.name!r} twice.", where=where)
        if p.name not in given and p.name not in kwargs and not p.has_default_value():
            raise bad(f"Node {name} does not pass {op}'s required argument {p.name!r}.", where=where)
    values = {**dict(zip((p.name for p in positional), args)), **kwargs}
    wrong = misfit(op, values)
    if wrong is not None:
        arg, what, kind = wrong
        raise bad(f"Node {name} passes {what} as {op}'s argument {arg!r}, which is a {kind}.", where=where)
