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
    "torch.export.dynamic_shapes._DimHint": None,
    "torch.export.dynamic_shapes._IntWrapper": None,
}

# (The surface test builds the AdditionalInputs instance itself: graphcap does not import torch.export.)


def additional_inputs_examples(builder: Any) -> Any:
    """The example ``(args, kwargs)`` pairs an ``AdditionalInputs`` holds (graphcap's or torch's), or None.

    Relies on the field ``AdditionalInputs._examples`` (a list of ``(args, kwargs)``).
    """
    return getattr(builder, "_examples", None)


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
