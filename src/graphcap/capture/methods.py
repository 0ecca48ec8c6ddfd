"""``export_methods``: several methods of one module exported over one state.

Each named method is exported with graphcap's own export (a bound method's
state is its module's, so every program lifts the model's parameters and
buffers under the model's FQNs); the programs go into one
:class:`~graphcap.multi_method.MultiMethodProgram`. Lives with the capture
(it runs the front end); the program type lives below it, where the
verification, the report and unflatten read it.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

import torch

from ..errors import ExportInputError, GraphcapError
from ..multi_method import MultiMethodProgram
from ..program import ExportedProgram
from .front_ends import run_front_end


def _method_names(model: torch.nn.Module) -> list[str]:
    base = set(dir(torch.nn.Module))
    return sorted(n for n in dir(type(model)) if not n.startswith("_") and n not in base
                  and inspect.isfunction(inspect.getattr_static(type(model), n, None))) + ["forward"]


def _bound_method(model: torch.nn.Module, name: Any) -> Any:
    cls = type(model).__name__
    if not isinstance(name, str):
        raise ExportInputError(f"Method names must be strings, got {name!r} ({type(name).__name__}).",
                               where="export_methods(model, inputs)",
                               fix="Key inputs by method name: {'prefill': (ids,), 'decode': (tok,)}.")
    known = ", ".join(map(repr, _method_names(model)))
    if not hasattr(model, name):
        raise ExportInputError(f"{cls} has no method {name!r}.", where=f"inputs[{name!r}]",
                               fix=f"Name one of {cls}'s methods: {known}.")
    value = getattr(model, name)
    if not (inspect.ismethod(value) and value.__self__ is model):
        kind = "a submodule" if isinstance(value, torch.nn.Module) else type(value).__name__
        raise ExportInputError(
            f"{cls}.{name} is {kind}, not a method of the model.", where=f"inputs[{name!r}]",
            fix=f"Define a method on {cls} that does the call, e.g. "
                f"`def {name}_method(self, *args): return self.{name}(*args)`, and name it; "
                f"{cls}'s methods are {known}.")
    return value


def _split_inputs(name: str, example: Any) -> tuple[tuple, Optional[dict]]:
    """A method's example: a tuple of arguments, or ``(args_tuple, kwargs_dict)``."""
    if isinstance(example, tuple) and len(example) == 2 and isinstance(example[0], tuple) \
            and isinstance(example[1], dict):
        return example[0], example[1]
    if isinstance(example, list):
        example = tuple(example)
    if not isinstance(example, tuple):
        raise ExportInputError(
            f"The example inputs of method {name!r} are a {type(example).__name__}, not a tuple.",
            where=f"inputs[{name!r}]",
            fix=f"Wrap them in a tuple: inputs={{{name!r}: (x,)}}, or pass (args, kwargs): "
                f"{{{name!r}: ((x,), {{'mask': m}})}}.")
    return example, None


def export_methods(model: torch.nn.Module, inputs: Mapping[str, Any],
                   dynamic_shapes: Optional[Mapping[str, Any]] = None, strict: bool = False) -> MultiMethodProgram:
    """Export several methods of ``model`` into one :class:`MultiMethodProgram` (see the module docstring)."""
    if not isinstance(model, torch.nn.Module):
        raise ExportInputError(f"export_methods exports methods of an nn.Module, got {type(model).__name__}.",
                               where="export_methods(model, ...)",
                               fix="Pass the model itself; for a plain function use graphcap.export.")
    if not isinstance(inputs, Mapping) or not inputs:
        raise ExportInputError(
            "export_methods needs example inputs for at least one method, keyed by method name; got "
            + (f"a {type(inputs).__name__}." if not isinstance(inputs, Mapping) else "an empty mapping."),
            where="export_methods(model, inputs)",
            fix="inputs={'prefill': (ids,), 'decode': (tok,)}")
    methods = {name: _bound_method(model, name) for name in inputs}
    specs = dict(dynamic_shapes or {})
    if dynamic_shapes is not None and not isinstance(dynamic_shapes, Mapping):
        raise ExportInputError(f"dynamic_shapes must map method names to specs, got {type(dynamic_shapes).__name__}.",
                               where="export_methods(..., dynamic_shapes)",
                               fix="dynamic_shapes={'prefill': {'ids': {1: Dim('seq')}}}")
    for name in specs:
        if name not in inputs:
            raise ExportInputError(
                f"dynamic_shapes has a spec for method {name!r}, which has no example inputs.",
                where=f"dynamic_shapes[{name!r}]",
                fix=f"Give the example inputs of {name!r} in inputs (inputs[{name!r}] = (...)), or drop "
                    f"its spec; the methods with inputs are {', '.join(map(repr, inputs))}.")
    programs: dict[str, ExportedProgram] = {}
    for name, method in methods.items():
        args, kwargs = _split_inputs(name, inputs[name])
        # `forward` is the model's call, as export(model) exports it: its forward hooks and pre-hooks
        # included (the module's `m(...)` runs it); the other methods run as bound methods, hookless.
        target = model if name == "forward" and method.__func__ is getattr(type(model), "forward", None) else method
        try:
            programs[name] = run_front_end(target, args, kwargs, dynamic_shapes=specs.get(name), strict=strict)
        except GraphcapError as e:
            e.add_note(f"(while exporting method {name!r} of {type(model).__name__} in export_methods"
                       + (f"; the dynamic_shapes of this message are dynamic_shapes[{name!r}])"
                          if specs.get(name) is not None else ")"))
            raise
    return MultiMethodProgram(programs)
