"""torch.export's user-facing spec objects, read by duck typing where graphcap accepts them.

A user may pass torch's own ``AdditionalInputs`` as ``dynamic_shapes``;
graphcap builds the spec through its public ``dynamic_shapes(...)`` and then
checks the program against every example it holds, which torch keeps only in
a private field.
"""
from __future__ import annotations

import sys
from typing import Any

RELIES_ON = {
    "torch.export.dynamic_shapes.AdditionalInputs#_examples": None,
    "torch.fx.experimental.dynamic_spec.ShapesSpec#_params": None,
    "torch.fx.experimental.dynamic_spec.ParamsSpec#_named_args": None,
    "torch.fx.experimental.dynamic_spec.ParamsSpec#_varargs": None,
    "torch.fx.experimental.dynamic_spec.ParamsSpec#_varkw": None,
    "torch.fx.experimental.dynamic_spec.TensorSpec#_specs": None,
    "torch.fx.experimental.dynamic_spec.SeqSpec#_entries": None,
    # the attribute @dynamic_spec(...) stores its spec under, on a function or forward
    "torch.fx.experimental.dynamic_spec._DYNAMIC_SPEC_ATTR": None,
    "torch._check": ("cond", "message"),
    "torch.export.dynamic_shapes._DimHint": None,
    "torch.export.dynamic_shapes._IntWrapper": None,
    # Dim.AUTO's hint, put on an _IntWrapper's ``dynamism`` for dynamo (int_marked_dynamic_for_dynamo)
    "torch.export.dynamic_shapes._DimHint.AUTO": (),
}

# torch's structured spec objects (torch.fx.experimental.dynamic_spec) first ship with 2.13: before
# it no user can pass one, and the functions reading them meet none
SINCE = {path: "2.13" for path in RELIES_ON if path.startswith("torch.fx.experimental.dynamic_spec.")}
SINCE["torch.fx.experimental.dynamic_spec._DYNAMIC_SPEC_ATTR"] = "2.14"  # the @dynamic_spec decorator


def _sample_tensor_spec():
    from torch.fx.experimental.dynamic_spec import TensorSpec
    return TensorSpec([None])


def _sample_seq_spec():
    from torch.fx.experimental.dynamic_spec import SeqSpec
    return SeqSpec([None])


def _sample_params_spec():
    from torch.fx.experimental.dynamic_spec import ParamsSpec
    return ParamsSpec({"x": None, "*args": [None], "**kwargs": {}})


def _sample_shapes_spec():
    from torch.fx.experimental.dynamic_spec import ShapesSpec
    return ShapesSpec({"x": None})


SAMPLES = {
    "torch.fx.experimental.dynamic_spec.TensorSpec": _sample_tensor_spec,
    "torch.fx.experimental.dynamic_spec.SeqSpec": _sample_seq_spec,
    "torch.fx.experimental.dynamic_spec.ParamsSpec": _sample_params_spec,
    "torch.fx.experimental.dynamic_spec.ShapesSpec": _sample_shapes_spec,
}

# (The surface test builds the AdditionalInputs instance itself: graphcap does not import torch.export.)


def additional_inputs_examples(builder: Any) -> Any:
    """The example ``(args, kwargs)`` pairs an ``AdditionalInputs`` holds (graphcap's or torch's), or None.

    Relies on the field ``AdditionalInputs._examples`` (a list of ``(args, kwargs)``).
    """
    return getattr(builder, "_examples", None)


def attached_dynamic_spec(fn: Any) -> Any:
    """The spec torch's ``@dynamic_spec(...)`` decorator attached to ``fn`` (a function or a bound
    ``forward``), or None. Only a user who imported torch's spec module can have attached one.
    Relies on ``torch.fx.experimental.dynamic_spec._DYNAMIC_SPEC_ATTR`` (the attribute's name)."""
    module = sys.modules.get("torch.fx.experimental.dynamic_spec")
    attr = getattr(module, "_DYNAMIC_SPEC_ATTR", None) if module is not None else None
    return getattr(fn, attr, None) if attr is not None else None


def shapes_spec_params(spec: Any) -> Any:
    """The ``ParamsSpec`` a ``ShapesSpec`` holds (or None). Relies on ``ShapesSpec._params``."""
    return getattr(spec, "_params", None)


def params_spec_parts(params: Any) -> tuple[dict, Any, Any]:
    """A ``ParamsSpec``'s named entries, its ``"*args"`` list and ``"**kwargs"`` dict (None when
    absent). Relies on ``ParamsSpec._named_args`` / ``_varargs`` / ``_varkw``."""
    return dict(params._named_args), params._varargs, params._varkw


def spec_entries(value: Any) -> list[Any]:
    """The per-dim entries of a ``TensorSpec`` or the per-position entries of a ``SeqSpec``.
    Relies on ``TensorSpec._specs`` and ``SeqSpec._entries``."""
    return list(value._specs if hasattr(value, "_specs") else value._entries)


def check(condition: Any) -> None:
    """Record ``condition`` (a SymBool over a ShapeEnv's symbols) as known and asserted at runtime,
    as user code's ``torch._check`` does. Relies on ``torch._check(cond, message)``."""
    import torch
    torch._check(condition)


def draft_report_where_torch_reads_it(ep: Any, report: Any) -> None:
    """Put a draft report where code written against torch's draft_export reads it: the program's
    ``_report`` attribute (torch sets it on the programs its draft_export returns)."""
    ep._report = report


def _export_spec_class(name: str) -> Any:
    """The class ``torch.export.dynamic_shapes.<name>`` if that module was imported (a user who
    built one of its objects imported it), else None: graphcap does not import torch.export."""
    module = sys.modules.get("torch.export.dynamic_shapes")
    return getattr(module, name, None) if module is not None else None


def is_torch_dim_hint(obj: Any) -> bool:
    """Whether ``obj`` is torch.export's ``Dim.AUTO`` / ``Dim.DYNAMIC`` / ``Dim.STATIC`` hint
    (an instance of ``torch.export.dynamic_shapes._DimHint``)."""
    cls = _export_spec_class("_DimHint")
    return cls is not None and isinstance(obj, cls)


def is_torch_int_wrapper(obj: Any) -> bool:
    """Whether ``obj`` is the wrapper torch.export puts around an int input to give it an
    identity (``torch.export.dynamic_shapes._IntWrapper``)."""
    cls = _export_spec_class("_IntWrapper")
    return cls is not None and isinstance(obj, cls)


def int_marked_dynamic_for_dynamo(value: int) -> Any:
    """``value`` in the wrapper torch.export hands dynamo an int input its spec makes dynamic, with
    ``Dim.AUTO``'s hint: dynamo's input builder (``IntWrapperVariable``) reads it as a symbolic int
    input with no constraint of its own, where a plain int would be baked into the graph as a
    constant. ``value`` itself where torch.export's spec module is not loaded (dynamo recognises the
    wrapper only through that module)."""
    wrapper, hint = _export_spec_class("_IntWrapper"), _export_spec_class("_DimHint")
    if wrapper is None or hint is None:
        return value
    wrapped = wrapper(value)
    wrapped.dynamism = hint.AUTO()
    return wrapped

