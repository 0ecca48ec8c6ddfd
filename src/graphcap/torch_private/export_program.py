"""The private torch names graphcap's ExportedProgram needs to be an instance of torch's.

graphcap's ``ExportedProgram`` derives from ``torch.export.ExportedProgram``
so that the consumers (ExecuTorch, torch.onnx, AOTInductor, coremltools,
torch.export's save) take it as is. Those tools read the program's verifier
classes and hand them to torch's constructor, which accepts only subclasses
of torch's ``Verifier``. graphcap reaches that class as the public module
``torch.export.exported_program`` names it, and the training-IR class among its
subclasses by its dialect (graphcap imports nothing of torch's exporter
package itself). graphcap's own check of its programs is
``graphcap.ir_checks``; torch's classes here only name the dialect for torch's
code that rebuilds a program.

torch's constructor (which graphcap's does not run) also sets fields that only
torch's own methods read; graphcap sets them here to what a graphcap program
means by them.
"""
from __future__ import annotations

RELIES_ON = {
    # the base class of torch's verifiers (the ATEN dialect's), as the program's module names it
    "torch.export.exported_program.Verifier": None,
    # the exception torch's verifier raises from ep.validate(), found in the module that defines
    # that Verifier class: code written against torch.export catches it
    "torch.export.exported_program.Verifier.__module__#SpecViolationError": None,
    # read by torch.export's save (its serializer) and torch's module(): shape guards as Python text
    "torch.export.exported_program.ExportedProgram#_guards_code": None,
}



def _verifier_module() -> object:
    import sys
    return sys.modules[_torch_verifier_base().__module__]


# the "instance" the SpecViolationError entry is checked on: the module that defines torch's Verifier
SAMPLES = {"torch.export.exported_program.Verifier.__module__": _verifier_module}


def set_torch_only_fields(ep: object) -> None:
    """Set on graphcap's program the fields torch's constructor sets and only torch's code reads.

    ``_guards_code``: the shape guards torch's ``module()`` turns into checks, written into
    torch's file format by torch.export's save. graphcap's program keeps what it accepts in
    ``range_constraints`` and checks its inputs in its own ``module()``; it records no extra
    guard text (torch.export's list is empty for most programs too).
    """
    ep._guards_code = []


def _torch_verifier_base() -> type:
    import torch.export.exported_program as torch_program
    return torch_program.Verifier


def torch_spec_violation_error() -> type:
    """The exception class torch's ``ExportedProgram.validate()`` raises for a broken program; it is
    defined beside torch's ``Verifier``, so it is read from the module that class names."""
    return _verifier_module().SpecViolationError


def torch_verifier_for(dialect: str) -> type:
    """torch's verifier class for the IR level ``dialect`` (``"TRAINING"`` or ``"ATEN"``): the base
    class for ATEN, and torch's own subclass whose ``dialect`` is TRAINING for the training IR."""
    base = _torch_verifier_base()
    if dialect == "ATEN":
        return base
    if dialect == "TRAINING":
        found = [c for c in base.__subclasses__()
                 if getattr(c, "dialect", None) == "TRAINING" and c.__module__.startswith("torch.")]
        if found:
            return found[0]
    raise ValueError(f"torch has no verifier class for the dialect {dialect!r} (known: 'TRAINING', 'ATEN')")


def is_torch_verifier(cls: object) -> bool:
    """Whether ``cls`` is torch's verifier class or a subclass of it (e.g. ExecuTorch's EXIR verifiers)."""
    return isinstance(cls, type) and issubclass(cls, _torch_verifier_base())
