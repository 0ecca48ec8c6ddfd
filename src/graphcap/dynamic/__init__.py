"""Dynamic shapes: the spec language, symbolic inputs, constraint checks.

``dims`` holds what users write (``Dim``, ``dims``, ``ShapesCollection``,
``AdditionalInputs``); ``spec`` matches a spec to the inputs; ``symbols``
makes the symbolic fake inputs; ``constraints`` checks the guards the trace
raised, computes ``range_constraints`` and inserts runtime asserts.
"""
from .constraints import refine_dynamic_shapes_from_suggested_fixes
from .dims import AdditionalInputs, Dim, ShapesCollection, dims

__all__ = ["Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes"]
