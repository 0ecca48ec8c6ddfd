"""Dynamic shapes: the spec language, symbolic inputs, constraint checks.

``dims`` holds what users write (``Dim``, ``dims``, ``ShapesCollection``,
``AdditionalInputs``); ``spec`` matches a spec to the inputs (``named_inputs``
keys them by argument name); ``symbols`` makes the symbolic fake inputs;
``constraints`` is the pipeline's guards step: ``guard_checks`` checks the guards
the trace raised, ``runtime_asserts`` inserts runtime asserts, ``ranges``
computes ``range_constraints``.
"""
from .dims import AdditionalInputs, Dim, ShapesCollection, dims
from .suggested_fixes import refine_dynamic_shapes_from_suggested_fixes

__all__ = ["Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes"]
