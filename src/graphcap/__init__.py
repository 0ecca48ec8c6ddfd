"""graphcap: export PyTorch programs into flat, ahead-of-time ATen graphs.

A drop-in for ``torch.export``: ``from graphcap import export``.

Importing the package imports no torch: every public name is loaded on first
use (PEP 562), so the ``graphcap`` command answers ``--help``, ``--version``
and ``completion`` without the seconds torch takes to import.
"""
import sys as _sys
import types as _types
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the public names as type checkers see them; at run time each loads on first use (below)
    from .api import draft_export, export, export_for_training, export_methods, load, save
    from .capture.draft_report import DraftReport
    from .capture.inferred_shapes import InferredShapes, infer_dynamic_shapes
    from .capture.strategies import Attempt, CaptureError, CaptureResult, capture
    from .decomp_table import CustomDecompTable, default_decompositions
    from .dynamic import AdditionalInputs, Dim, ShapesCollection, dims, refine_dynamic_shapes_from_suggested_fixes
    from .dynamic.dims import Constraint
    from .errors import (
        ConstraintViolationError,
        ExportInputError,
        GraphcapError,
        InternalError,
        MissingFakeKernelError,
        RuntimeInputError,
        SerializationError,
        TraceError,
        UnsupportedError,
        VerificationError,
    )
    from .hierarchy.flat_args import FlatArgsAdapter
    from .hierarchy.modules import UnflattenedModule
    from .hierarchy.unflatten import unflatten
    from .html_report import report
    from .interop import from_torch, to_torch
    from .passes.move_to_device import move_to_device_pass
    from .program import ExportedProgram
    from .pytree import register_dataclass, register_flattenable
    from .serialize.schema import FORMAT_VERSION
    from .signature import (
        ConstantArgument,
        ExportBackwardSignature,
        ExportGraphSignature,
        InputKind,
        InputSpec,
        ModuleCallEntry,
        ModuleCallSignature,
        OutputKind,
        OutputSpec,
        SymIntArgument,
        TensorArgument,
    )
    from .torch_logs import show_torch_logs
    from .verification import VerificationResult, verify


def _import_core() -> dict[str, Any]:
    """The names every export needs: they load together, on the first use of any of them."""
    from .api import draft_export, export, export_for_training, export_methods, load, save
    from .capture.draft_report import DraftReport
    from .capture.inferred_shapes import InferredShapes, infer_dynamic_shapes
    from .capture.strategies import Attempt, CaptureError, CaptureResult, capture
    from .decomp_table import CustomDecompTable, default_decompositions
    from .dynamic import AdditionalInputs, Dim, ShapesCollection, dims, refine_dynamic_shapes_from_suggested_fixes
    from .dynamic.dims import Constraint
    from .errors import (
        ExportInputError,
        GraphcapError,
        InternalError,
        MissingFakeKernelError,
        RuntimeInputError,
        SerializationError,
        TraceError,
        UnsupportedError,
        VerificationError,
    )
    from .program import ExportedProgram
    from .pytree import register_dataclass, register_flattenable
    from .signature import (
        ConstantArgument,
        ExportBackwardSignature,
        ExportGraphSignature,
        InputKind,
        InputSpec,
        ModuleCallEntry,
        ModuleCallSignature,
        OutputKind,
        OutputSpec,
        SymIntArgument,
        TensorArgument,
    )
    from .torch_logs import show_torch_logs
    values = dict(locals())
    return values


class _Package(_types.ModuleType):
    """The package's module type: importing the subpackage ``graphcap.capture`` does not rebind
    the public function ``graphcap.capture`` to it (the import system sets a loaded subpackage
    as an attribute of its parent; the function keeps the name)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "capture" and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def _import_constraint_violation_error() -> dict[str, Any]:
    """Also torch's ``UserError``: made on first use, so that a load and ``module()`` do not import
    torch._dynamo (graphcap/errors.py)."""
    from .errors import ConstraintViolationError
    return {"ConstraintViolationError": ConstraintViolationError}


# Loaded apart from the core (PEP 562): a plain export needs none of them, and importing them
# with it cost a cold export's import of graphcap a fifth of its time. Each is a static
# import (graphcap imports nothing by a computed name).
def _import_unflatten() -> dict[str, Any]:
    from .hierarchy import unflatten
    from .hierarchy.flat_args import FlatArgsAdapter
    from .hierarchy.modules import UnflattenedModule
    return {"unflatten": unflatten, "FlatArgsAdapter": FlatArgsAdapter, "UnflattenedModule": UnflattenedModule}


def _import_interop() -> dict[str, Any]:
    from .interop import from_torch, to_torch
    return {"from_torch": from_torch, "to_torch": to_torch}


def _import_move_to_device() -> dict[str, Any]:
    from .passes.move_to_device import move_to_device_pass
    return {"move_to_device_pass": move_to_device_pass}


def _import_format_version() -> dict[str, Any]:
    from .serialize.schema import FORMAT_VERSION
    return {"FORMAT_VERSION": FORMAT_VERSION}


def _import_report() -> dict[str, Any]:
    from .html_report import report
    return {"report": report}


def _import_verification() -> dict[str, Any]:
    from .verification import VerificationResult, verify
    return {"verify": verify, "VerificationResult": VerificationResult}


def _import_errors_module() -> dict[str, Any]:
    # the documented `graphcap.errors.StrictCaptureError` after a plain `import graphcap`: the
    # import system sets the attribute only once something has imported the submodule (and
    # `from . import errors` would ask this module's __getattr__ first)
    from .errors import GraphcapError
    return {"errors": _sys.modules[GraphcapError.__module__]}


_CORE_NAMES = (
    "draft_export", "export", "export_for_training", "export_methods", "load", "save", "DraftReport", "Attempt",
    "CaptureError",
    "CaptureResult", "capture", "InferredShapes", "infer_dynamic_shapes",
    "CustomDecompTable", "default_decompositions", "AdditionalInputs", "Dim", "ShapesCollection", "dims",
    "refine_dynamic_shapes_from_suggested_fixes", "ExportInputError", "GraphcapError",
    "MissingFakeKernelError", "RuntimeInputError", "SerializationError", "TraceError", "InternalError",
    "UnsupportedError", "VerificationError", "ExportedProgram", "register_dataclass", "register_flattenable",
    "show_torch_logs", "ConstantArgument", "Constraint", "ExportBackwardSignature",
    "ExportGraphSignature", "InputKind", "InputSpec", "ModuleCallEntry", "ModuleCallSignature", "OutputKind",
    "OutputSpec", "SymIntArgument", "TensorArgument",
)
_LAZY: dict[str, Callable[[], dict[str, Any]]] = {
    **{name: _import_core for name in _CORE_NAMES},
    "unflatten": _import_unflatten, "FlatArgsAdapter": _import_unflatten, "UnflattenedModule": _import_unflatten,
    "from_torch": _import_interop, "to_torch": _import_interop,
    "move_to_device_pass": _import_move_to_device, "FORMAT_VERSION": _import_format_version,
    "report": _import_report, "verify": _import_verification, "VerificationResult": _import_verification,
    "errors": _import_errors_module, "ConstraintViolationError": _import_constraint_violation_error,
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'graphcap' has no attribute {name!r}")
    values = _LAZY[name]()
    globals().update(values)
    return values[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "export", "export_for_training", "export_methods", "draft_export", "DraftReport", "capture", "CaptureResult",
    "Attempt", "CaptureError",
    "ExportedProgram",
    "report", "register_dataclass", "register_flattenable", "unflatten", "FlatArgsAdapter", "UnflattenedModule",
    "show_torch_logs",
    "Dim", "dims", "ShapesCollection", "AdditionalInputs", "Constraint", "refine_dynamic_shapes_from_suggested_fixes",
    "infer_dynamic_shapes", "InferredShapes",
    "default_decompositions", "CustomDecompTable", "move_to_device_pass",
    "save", "load", "to_torch", "from_torch", "FORMAT_VERSION", "verify", "VerificationResult",
    "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "TensorArgument",
    "SymIntArgument", "ConstantArgument", "ModuleCallEntry", "ModuleCallSignature", "ExportBackwardSignature",
    "GraphcapError", "ExportInputError", "UnsupportedError", "TraceError", "InternalError", "RuntimeInputError",
    "VerificationError", "ConstraintViolationError", "MissingFakeKernelError", "SerializationError",
]

# kept apart from the lazy loading above
from ._version import __version__ as __version__  # noqa: E402
