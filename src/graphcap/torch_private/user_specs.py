"""torch.export's user-facing spec objects, read by duck typing where graphcap accepts them.

A user may pass torch's own ``AdditionalInputs`` as ``dynamic_shapes``;
graphcap builds the spec through its public ``dynamic_shapes(...)`` and then
checks the program against every example it holds, which torch keeps only in
a private field.
"""
from __future__ import annotations

from typing import Any

RELIES_ON = {
    "torch.export.dynamic_shapes.AdditionalInputs#_examples": None,
}

# (The surface test builds the AdditionalInputs instance itself: graphcap does not import torch.export.)


def additional_inputs_examples(builder: Any) -> Any:
    """The example ``(args, kwargs)`` pairs an ``AdditionalInputs`` holds (graphcap's or torch's), or None.

    Relies on the field ``AdditionalInputs._examples`` (a list of ``(args, kwargs)``).
    """
    return getattr(builder, "_examples", None)
