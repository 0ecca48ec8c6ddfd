"""graphcap: export PyTorch programs into flat, ahead-of-time ATen graphs.

A drop-in for ``torch.export``: ``from graphcap import export``.
"""
from .api import draft_export, export, load, save
from .capture.draft_report import DraftReport
from .capture.strategies import Attempt, CaptureError, CaptureResult, capture
from .decomp_table import CustomDecompTable, default_decompositions
from .dynamic import AdditionalInputs, Dim, ShapesCollection, dims, refine_dynamic_shapes_from_suggested_fixes
from .hierarchy import unflatten
from .html_report import report
from .errors import (ConstraintViolationError, ExportInputError, GraphcapError, MissingFakeKernelError,
                     RuntimeInputError, SerializationError, TraceError, InternalError, UnsupportedError, VerificationError)
from .interop import from_torch, to_torch
from .passes.move_to_device import move_to_device_pass
from .program import ExportedProgram
from .pytree import register_dataclass
from .serialize.schema import FORMAT_VERSION
from .verification import VerificationResult, verify
from .signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                        ModuleCallSignature, OutputKind, OutputSpec, SymIntArgument, TensorArgument)

__all__ = [
    "export", "draft_export", "DraftReport", "capture", "CaptureResult", "Attempt", "CaptureError", "ExportedProgram",
    "report", "register_dataclass", "unflatten",
    "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes",
    "default_decompositions", "CustomDecompTable", "move_to_device_pass",
    "save", "load", "to_torch", "from_torch", "FORMAT_VERSION", "verify", "VerificationResult",
    "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "TensorArgument",
    "SymIntArgument", "ConstantArgument", "ModuleCallEntry", "ModuleCallSignature",
    "GraphcapError", "ExportInputError", "UnsupportedError", "TraceError", "InternalError", "RuntimeInputError",
    "VerificationError", "ConstraintViolationError", "MissingFakeKernelError", "SerializationError",
]
