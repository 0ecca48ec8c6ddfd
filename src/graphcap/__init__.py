"""graphcap: export PyTorch programs into flat, ahead-of-time ATen graphs.

A drop-in for ``torch.export``: ``from graphcap import export``.
"""
from .api import export
from .errors import (ExportInputError, GraphcapError, RuntimeInputError, TraceError, UnsupportedError,
                     VerificationError)
from .program import ExportedProgram
from .pytree import register_dataclass
from .signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                        ModuleCallSignature, OutputKind, OutputSpec, SymIntArgument, TensorArgument)

__all__ = [
    "export", "ExportedProgram", "register_dataclass",
    "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "TensorArgument",
    "SymIntArgument", "ConstantArgument", "ModuleCallEntry", "ModuleCallSignature",
    "GraphcapError", "ExportInputError", "UnsupportedError", "TraceError", "RuntimeInputError",
    "VerificationError",
]
