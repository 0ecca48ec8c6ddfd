"""torch's newer spec classes as ``dynamic_shapes``: ``ShapesSpec`` / ``ParamsSpec``.

``ParamsSpec({"x": TensorSpec([ShapeVar("batch"), STATIC]), "n": IntVar("n")})``
(module ``torch.fx.experimental.dynamic_spec``) names each forward parameter
(``"*args"`` / ``"**kwargs"`` for the variadic ones) and gives per tensor a list
over its dims: a ``ShapeVar`` / ``IntVar`` (a size that is not specialized at
all: an *unbacked* symbol ``u0``, so the program never branches on it), a
``SymInt`` expression of them (``B * 2``, ``A * B + 1``: a size that must equal
it), an int (static, must match the example) or ``STATIC`` / None.

:func:`translate` turns it into graphcap's own spec tree, keyed by argument
name, whose dynamic entries are :class:`SpecSize` objects; ``symbols`` makes
one unbacked symbol per ``IntVar`` (its range from ``min`` / ``max``) and a
derived size a fresh unbacked symbol equal to its expression, asserted in the
graph (``module()`` refuses a size that breaks it before computing).
``ShapesSpec(assumptions=[...])`` are asserted the same way.
"""
from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import DynamicSpecError
from ..torch_private import pytree
from ..torch_private.user_specs import attached_dynamic_spec, params_spec_parts, shapes_spec_params, spec_entries

_MODULE = "torch.fx.experimental.dynamic_spec"


def _is(obj: Any, name: str) -> bool:
    return any(c.__name__ == name and c.__module__ == _MODULE for c in type(obj).__mro__)


def is_shape_var_spec(spec: Any) -> bool:
    """Whether ``spec`` is torch's ``ShapesSpec`` or ``ParamsSpec``."""
    return _is(spec, "ShapesSpec") or _is(spec, "ParamsSpec")


@dataclass(frozen=True)
class SpecSize:
    """One size given by a ``ShapeVar`` / ``IntVar`` or a ``SymInt`` expression of them.

    ``expr`` is a sympy expression over the spec variables' symbols; ``variables``
    maps each of those symbols to its ``IntVar`` (for ``min`` / ``max`` / name)."""

    expr: Any
    variables: tuple  # ((sympy symbol, IntVar), ...)
    text: str

    def __repr__(self) -> str:
        return self.text


def _size(value: Any) -> Any:
    """A leaf int spec: None (static), an int (static, checked), or a SpecSize."""
    import torch
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, torch.SymInt):
        if _is(value, "IntVar"):
            expr = value.sympy_sym
        else:
            expr = value.node.expr
        variables = tuple(sorted(((s, _variable(s)) for s in expr.free_symbols), key=lambda p: str(p[0])))
        # the text the user wrote: b*2, not the spec engine's b#0*2
        return SpecSize(expr, variables, re.sub(r"#\d+", "", str(value)) if not _is(value, "IntVar") else value.name)
    raise DynamicSpecError(f"{value!r} is not a ShapeVar / IntVar, an expression of them, an int or STATIC.",
                           where="ParamsSpec", fix="Use ShapeVar(...) / IntVar(...), an int, or STATIC.")


# The ShapeVar / IntVar objects of the spec being translated, by symbol: one dict per thread's
# context (two threads may translate specs at once; translation runs outside the tracing lock).
_VARIABLES: "ContextVar[dict[Any, Any]]" = ContextVar("graphcap_shape_var_spec_variables")


def _variables() -> "dict[Any, Any]":
    return _VARIABLES.get({})


def _variable(sym: Any) -> Any:
    var = _variables().get(sym)
    if var is None:
        raise DynamicSpecError(f"the spec expression uses {sym}, which is no ShapeVar / IntVar of this spec.",
                               where="ParamsSpec", fix="Build expressions from the ShapeVar / IntVar objects "
                                                       "used in the spec.")
    return var


def _collect_variables(value: Any) -> None:
    if _is(value, "IntVar"):
        _variables()[value.sympy_sym] = value
    elif _is(value, "TensorSpec") or _is(value, "SeqSpec"):
        for v in spec_entries(value):
            _collect_variables(v)
    elif _is(value, "DictSpec") or _is(value, "ObjectSpec"):
        for _, v in value.items():
            _collect_variables(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_variables(v)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_variables(v)


def _collect_spec_variables(params: Any) -> None:
    """The ShapeVar / IntVar objects a ``ParamsSpec`` (or None: none) uses, by symbol (what
    :func:`_variable` reads)."""
    _VARIABLES.set({})
    if params is not None:
        named, varargs, varkw = params_spec_parts(params)
        _collect_variables([list(named.values()), varargs or [], varkw or {}])


def _tree(value: Any, example: Any, where: str) -> Any:
    """graphcap's spec for ``example`` from one ParamsSpec entry."""
    import torch
    if value is None:
        return None
    if _is(value, "TensorSpec"):
        if not isinstance(example, torch.Tensor):
            raise DynamicSpecError(
                f"ParamsSpec entry for forward param {where} is a TensorSpec, but the input there is not a "
                f"Tensor ({type(example).__name__}).", where=f"ParamsSpec[{where}]",
                fix="Give a container spec (SeqSpec / DictSpec) that mirrors the input, or None.")
        if len(value) != example.dim():
            raise DynamicSpecError(
                f"ParamsSpec entry for forward param {where} lists {len(value)} dims, but the tensor there has "
                f"{example.dim()}.", where=f"ParamsSpec[{where}]", fix="List one entry per dimension.")
        return [_size(v) for v in value]
    if _is(value, "SeqSpec"):
        entries = spec_entries(value)
        items = list(example) if isinstance(example, (list, tuple)) else []
        return type(example)(_tree(entries[i] if i < len(entries) else None, x, f"{where}[{i}]")
                             for i, x in enumerate(items))
    if _is(value, "DictSpec"):
        entries = dict(value.items())
        return {k: _tree(entries.get(k), x, f"{where}[{k!r}]") for k, x in example.items()}
    if _is(value, "ObjectSpec"):
        return _object_tree(value, example, where)
    return _size(value)


def _object_tree(value: Any, example: Any, where: str) -> list:
    """An ``ObjectSpec`` (entries by attribute name) for an input object the pytree flattens by
    attribute (a registered dataclass, a class graphcap flattens by its fields): the spec of each
    child, in the object's own flattening order, None for attributes the ObjectSpec leaves out."""
    handler = pytree.SUPPORTED_NODES.get(pytree.node_type(example))
    keyed = handler.flatten_with_keys_fn(example)[0] if handler is not None and handler.flatten_with_keys_fn else None
    names = [getattr(key, "name", None) for key, _ in keyed or []]
    if not keyed or None in names:
        raise DynamicSpecError(
            f"ParamsSpec entry for forward param {where} is an ObjectSpec, but the input there "
            f"({type(example).__name__}) is not an object flattened by its attributes.",
            where=f"ParamsSpec[{where}]",
            fix="Use ObjectSpec for a dataclass registered with torch.export.register_dataclass (or a "
                "pytree node keyed by attribute); SeqSpec / DictSpec for lists, tuples and dicts.")
    fields = dict(value.items())
    unknown = [f for f in fields if f not in names]
    if unknown:
        raise DynamicSpecError(
            f"ObjectSpec for forward param {where} names {unknown}, which {type(example).__name__} does not "
            f"flatten to (its attributes: {names}).", where=f"ParamsSpec[{where}]",
            fix=f"Key the ObjectSpec by the attributes {names}.")
    return [_tree(fields.get(name), child, f"{where}.{name}") for name, (_, child) in zip(names, keyed)]


def translate(m: Any, args: tuple, kwargs: dict, spec: Any) -> Any:
    """graphcap's spec tree (a dict keyed by argument name) for a ShapesSpec / ParamsSpec."""
    import inspect

    import torch

    from .named_inputs import combined_inputs
    params = shapes_spec_params(spec) if _is(spec, "ShapesSpec") else spec
    combined = combined_inputs(m, args, kwargs)
    out: dict[str, Any] = {name: None for name in combined}
    if params is None:
        return out
    named, varargs, varkw = params_spec_parts(params)
    _collect_spec_variables(params)
    fn = m.forward if isinstance(m, torch.nn.Module) else m
    try:
        kinds = {n: p.kind for n, p in inspect.signature(fn).parameters.items()}
    except (TypeError, ValueError):
        kinds = {}
    for name, value in named.items():
        if name not in combined:
            if name in kinds:
                continue  # a parameter not passed (its default is used): nothing to mark
            raise DynamicSpecError(f"ParamsSpec names {name!r}, which is not a parameter of forward "
                                   f"({list(combined)}).", where="ParamsSpec",
                                   fix="Key the ParamsSpec by forward's parameter names.")
        out[name] = _tree(value, combined[name], repr(name))
    for name, kind in kinds.items():
        if name not in combined:
            continue
        if kind is inspect.Parameter.VAR_POSITIONAL and varargs is not None:
            values = combined[name]
            out[name] = tuple(_tree(varargs[i] if i < len(varargs) else None, v, f"'*args'[{i}]")
                              for i, v in enumerate(values))
        elif kind is inspect.Parameter.VAR_KEYWORD and varkw is not None:
            values = combined[name]
            out[name] = {k: _tree(varkw.get(k), v, f"'**kwargs'[{k!r}]") for k, v in values.items()}
    return out


def with_attached_spec(mod: Any, dynamic_shapes: Any) -> Any:
    """``dynamic_shapes``, or the spec torch's ``@dynamic_spec(...)`` attached to the exported
    function (a module's ``forward``) when the call gives none; both at once is ambiguous and
    refused, as torch.export refuses it."""
    import torch
    fn = mod.forward if isinstance(mod, torch.nn.Module) else mod
    attached = attached_dynamic_spec(fn)
    if attached is None:
        return dynamic_shapes
    if dynamic_shapes is not None:
        name = getattr(fn, "__qualname__", type(mod).__name__)
        raise DynamicSpecError(
            f"{name} carries a spec from @dynamic_spec(...) and export was also given dynamic_shapes=: "
            f"it is not clear which one to follow.", where="export(..., dynamic_shapes=...)",
            fix="Drop the dynamic_shapes= argument to use the decorator's spec, or remove the decorator.")
    return attached


def assumptions_of(spec: Any) -> list[tuple[Any, tuple, str]]:
    """A ``ShapesSpec``'s assumptions, each as ``(sympy condition over the spec variables' symbols,
    ((symbol, IntVar), ...), its text)``; empty for any other spec. An assumption over a variable
    the params do not use is refused."""
    if not _is(spec, "ShapesSpec") or not spec.assumptions:
        return []
    _collect_spec_variables(shapes_spec_params(spec))
    out = []
    for i, condition in enumerate(spec.assumptions):
        expr, text = condition.node.expr, re.sub(r"#\d+", "", str(condition))  # b#0 is the variable b
        unused = sorted(re.sub(r"#\d+", "", str(sym)) for sym in expr.free_symbols if sym not in _variables())
        if unused:
            raise DynamicSpecError(
                f"ShapesSpec.assumptions[{i}] ({text}) is over {', '.join(unused)}, which no entry of the "
                f"ShapesSpec's params uses.", where=f"ShapesSpec.assumptions[{i}]",
                fix="State assumptions over the ShapeVar / IntVar objects the params use.")
        variables = tuple(sorted(((sym, _variable(sym)) for sym in expr.free_symbols), key=lambda p: str(p[0])))
        out.append((expr, variables, text))
    return out


def variable_range(var: Any) -> tuple[Optional[int], Optional[int]]:
    lo = getattr(var, "min", None)
    hi = getattr(var, "max", None)
    return lo, hi
