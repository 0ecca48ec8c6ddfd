"""graphcap: export PyTorch programs into flat, ahead-of-time ATen graphs.

A drop-in for ``torch.export``: ``from graphcap import export``.
"""
from .api import export, load, save
from .decomp_table import CustomDecompTable, default_decompositions
from .dynamic import AdditionalInputs, Dim, ShapesCollection, dims, refine_dynamic_shapes_from_suggested_fixes
from .errors import (ConstraintViolationError, ExportInputError, GraphcapError, MissingFakeKernelError,
                     RuntimeInputError, SerializationError, TraceError, InternalError, UnsupportedError, VerificationError)
from .program import ExportedProgram
from .pytree import register_dataclass
from .signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                        ModuleCallSignature, OutputKind, OutputSpec, SymIntArgument, TensorArgument)

# Imported on first use (PEP 562): a plain export needs none of them, and they cost a
# cold export's import of graphcap a fifth of its time.
_LAZY = ("unflatten", "from_torch", "to_torch", "move_to_device_pass", "FORMAT_VERSION")


def __getattr__(name):
    if name == "unflatten":
        from .hierarchy import unflatten as value
    elif name in ("from_torch", "to_torch"):
        from . import interop
        value = getattr(interop, name)
    elif name == "move_to_device_pass":
        from .passes.move_to_device import move_to_device_pass as value
    elif name == "FORMAT_VERSION":
        from .serialize.schema import FORMAT_VERSION as value
    else:
        raise AttributeError(f"module 'graphcap' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "export", "ExportedProgram", "register_dataclass", "unflatten",
    "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes",
    "default_decompositions", "CustomDecompTable", "move_to_device_pass",
    "save", "load", "to_torch", "from_torch", "FORMAT_VERSION",
    "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "TensorArgument",
    "SymIntArgument", "ConstantArgument", "ModuleCallEntry", "ModuleCallSignature",
    "GraphcapError", "ExportInputError", "UnsupportedError", "TraceError", "InternalError", "RuntimeInputError",
    "VerificationError", "ConstraintViolationError", "MissingFakeKernelError", "SerializationError",
]
