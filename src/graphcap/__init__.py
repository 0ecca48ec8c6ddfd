"""graphcap: export PyTorch programs into flat, ahead-of-time ATen graphs.

A drop-in for ``torch.export``: ``from graphcap import export``.
"""
from .api import draft_export, export, load, save
# eager: the name `capture` would otherwise be shadowed by the subpackage graphcap.capture once an export imports it
from .capture.draft_report import DraftReport
from .capture.strategies import Attempt, CaptureError, CaptureResult, capture
from .decomp_table import CustomDecompTable, default_decompositions
from .dynamic import AdditionalInputs, Dim, ShapesCollection, dims, refine_dynamic_shapes_from_suggested_fixes
from .capture.inferred_shapes import InferredShapes, infer_dynamic_shapes
from .errors import (ConstraintViolationError, ExportInputError, GraphcapError, MissingFakeKernelError,
                     RuntimeInputError, SerializationError, TraceError, InternalError, UnsupportedError, VerificationError)
from .program import ExportedProgram
from .pytree import register_dataclass
from .signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                        ModuleCallSignature, OutputKind, OutputSpec, SymIntArgument, TensorArgument)

# Imported on first use (PEP 562): a plain export needs none of them, and importing them
# up front cost a cold export's import of graphcap a fifth of its time. Each is a static
# import (graphcap imports nothing by a computed name).
def _import_unflatten():
    from .hierarchy import unflatten
    return {"unflatten": unflatten}


def _import_interop():
    from .interop import from_torch, to_torch
    return {"from_torch": from_torch, "to_torch": to_torch}


def _import_move_to_device():
    from .passes.move_to_device import move_to_device_pass
    return {"move_to_device_pass": move_to_device_pass}


def _import_format_version():
    from .serialize.schema import FORMAT_VERSION
    return {"FORMAT_VERSION": FORMAT_VERSION}


def _import_report():
    from .html_report import report
    return {"report": report}


def _import_verification():
    from .verification import VerificationResult, verify
    return {"verify": verify, "VerificationResult": VerificationResult}


_LAZY = {
    "unflatten": _import_unflatten, "from_torch": _import_interop, "to_torch": _import_interop,
    "move_to_device_pass": _import_move_to_device, "FORMAT_VERSION": _import_format_version,
    "report": _import_report, "verify": _import_verification, "VerificationResult": _import_verification,
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'graphcap' has no attribute {name!r}")
    values = _LAZY[name]()
    globals().update(values)
    return values[name]


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "export", "draft_export", "DraftReport", "capture", "CaptureResult", "Attempt", "CaptureError", "ExportedProgram",
    "report", "register_dataclass", "unflatten",
    "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes",
    "infer_dynamic_shapes", "InferredShapes",
    "default_decompositions", "CustomDecompTable", "move_to_device_pass",
    "save", "load", "to_torch", "from_torch", "FORMAT_VERSION", "verify", "VerificationResult",
    "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "TensorArgument",
    "SymIntArgument", "ConstantArgument", "ModuleCallEntry", "ModuleCallSignature",
    "GraphcapError", "ExportInputError", "UnsupportedError", "TraceError", "InternalError", "RuntimeInputError",
    "VerificationError", "ConstraintViolationError", "MissingFakeKernelError", "SerializationError",
]
