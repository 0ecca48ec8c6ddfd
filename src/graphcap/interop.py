"""Conversion to and from torch.export's ExportedProgram.

Both sides use the same IR (an fx graph of ATen operators with lifted state and
fake-tensor metadata), so conversion maps the signature, call graph and state
containers between the two libraries' types and copies the graph. A graphcap
program is itself an instance of torch's class and goes to torch's toolchain
(AOTInductor, ONNX, ExecuTorch) as is (docs/consumers.md); ``to_torch`` gives
torch's own object, checked by torch's own validation, for those who want it;
with ``from_torch`` a program exported by torch can be kept in graphcap's
pickle-free format. This is the
one module allowed to construct and read torch's ExportedProgram; it calls
nothing of torch.export's pipeline.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.export.exported_program as tep
import torch.export.graph_signature as tsig

from . import auto_flatten
from . import signature as gsig
from .edited_graphs import normalize_edited_graph
from .errors import NotAProgramError, SerializationError
from .program import ExportedProgram
from .trace.naming.node_names import copy_placeholder_names

_ARG_TO_TORCH = {
    gsig.TensorArgument: tsig.TensorArgument, gsig.SymIntArgument: tsig.SymIntArgument,
    gsig.SymFloatArgument: tsig.SymFloatArgument, gsig.SymBoolArgument: tsig.SymBoolArgument,
}
_ARG_FROM_TORCH = {v: k for k, v in _ARG_TO_TORCH.items()}


def _arg_to_torch(a: Any) -> Any:
    if isinstance(a, gsig.ConstantArgument):
        return tsig.ConstantArgument(name=a.name, value=a.value)
    return _ARG_TO_TORCH[type(a)](name=a.name)


def _arg_from_torch(a: Any) -> Any:
    if isinstance(a, tsig.ConstantArgument):
        return gsig.ConstantArgument(a.name, a.value)
    cls = _ARG_FROM_TORCH.get(type(a))
    if cls is None:
        raise SerializationError(
            f"The torch program has a {type(a).__name__} in its signature, which graphcap does not "
            f"represent.", where="graphcap.from_torch(ep)",
            fix="Only tensor, symbolic-size and constant inputs/outputs convert; custom objects and "
                "tokens do not yet.")
    return cls(a.name)


def _call_graph(entries: list, sig_cls: Any, entry_cls: Any, conv: Any) -> list:
    out = []
    for e in entries:
        s = e.signature
        new_sig = None if s is None else sig_cls(
            inputs=[conv(a) for a in s.inputs], outputs=[conv(a) for a in s.outputs],
            in_spec=s.in_spec, out_spec=s.out_spec, forward_arg_names=s.forward_arg_names)
        out.append(entry_cls(fqn=e.fqn, signature=new_sig))
    return out


def torch_file_conversion(path: str) -> str:
    """The code that reads a torch.export file at ``path`` (its repr) as a graphcap program."""
    return f"ep = graphcap.from_torch(torch.export.load({path}))"


def to_torch(ep: ExportedProgram) -> torch.export.ExportedProgram:
    """A ``torch.export.ExportedProgram`` with the same graph, signature, state and ranges.

    Args:
        ep: a graphcap :class:`ExportedProgram`.

    Returns:
        torch's ExportedProgram, validated by torch, for torch's tools
        (``torch.export.save``, AOTInductor, ...).

    Raises:
        SerializationError: ``ep`` is not a graphcap ExportedProgram, or holds what torch's program cannot.

    Example:
        >>> tep = graphcap.to_torch(graphcap.export(model, args))
        >>> torch.export.save(tep, "model_torch.pt2")
    """
    if not isinstance(ep, ExportedProgram):
        raise NotAProgramError.of(ep, "graphcap.to_torch(ep)", "graphcap.to_torch({})")
    gm = copy.deepcopy(ep.graph_module)
    copy_placeholder_names(gm, ep.graph_module)  # fx's copy suffixes an input named like a builtin
    sig = tsig.ExportGraphSignature(
        input_specs=[tsig.InputSpec(kind=tsig.InputKind[s.kind.name], arg=_arg_to_torch(s.arg), target=s.target,
                                    persistent=s.persistent) for s in ep.graph_signature.input_specs],
        output_specs=[tsig.OutputSpec(kind=tsig.OutputKind[s.kind.name], arg=_arg_to_torch(s.arg), target=s.target)
                      for s in ep.graph_signature.output_specs])
    for entry in ep.module_call_graph:  # torch's module() knows only classes in torch's registry
        if entry.signature is not None:
            auto_flatten.register_for_torch(entry.signature.in_spec)
            auto_flatten.register_for_torch(entry.signature.out_spec)
    call_graph = _call_graph(ep.module_call_graph, tep.ModuleCallSignature, tep.ModuleCallEntry, _arg_to_torch)
    return tep.ExportedProgram(root=gm, graph=gm.graph, graph_signature=sig, state_dict=dict(ep.state_dict),
                               range_constraints=dict(ep.range_constraints), module_call_graph=call_graph,
                               example_inputs=ep.example_inputs, constants=dict(ep.constants),
                               verifiers=list(ep.verifiers))  # torch's classes, of the program's dialect


def is_torch_program(ep: Any) -> bool:
    """Whether ``ep`` is a ``torch.export.ExportedProgram`` (and not graphcap's)."""
    return isinstance(ep, torch.export.ExportedProgram) and not isinstance(ep, ExportedProgram)


def from_torch(torch_ep: Any) -> ExportedProgram:
    """A graphcap ExportedProgram from one made by ``torch.export`` (to save it safely, run it, ...).

    Args:
        torch_ep: a ``torch.export.ExportedProgram``.

    Returns:
        A verified graphcap :class:`ExportedProgram` with the same graph,
        signature, state and ranges.

    Raises:
        SerializationError: ``torch_ep`` is not a torch ExportedProgram, or uses what graphcap cannot represent.
        VerificationError: the program breaks graphcap's IR invariants.

    Example:
        >>> ep = graphcap.from_torch(torch.export.export(model, args))
        >>> graphcap.save(ep, "model.pt2")
    """
    if not isinstance(torch_ep, torch.export.ExportedProgram):
        raise SerializationError(
            f"from_torch expects a torch.export.ExportedProgram, got {type(torch_ep).__name__}.",
            where="graphcap.from_torch(ep)", fix="Pass the result of torch.export.export or torch.export.load.")
    gm = copy.deepcopy(torch_ep.graph_module)
    # Copying an fx graph renames nodes whose names shadow Python builtins
    # (torch keeps a placeholder called ``input``; the copy calls it ``input_1``):
    # the signature follows the copy's names.
    renamed = {a.name: b.name for a, b in zip(torch_ep.graph.nodes, gm.graph.nodes) if a.name != b.name}

    def conv(a: Any) -> Any:
        a = _arg_from_torch(a)
        if not isinstance(a, gsig.ConstantArgument) and a.name in renamed:
            a = type(a)(renamed[a.name])
        return a

    tsg = torch_ep.graph_signature
    sig = gsig.ExportGraphSignature(
        input_specs=[gsig.InputSpec(gsig.InputKind[s.kind.name], conv(s.arg), s.target, s.persistent)
                     for s in tsg.input_specs],
        output_specs=[gsig.OutputSpec(gsig.OutputKind[s.kind.name], conv(s.arg), s.target)
                      for s in tsg.output_specs])
    call_graph = _call_graph(torch_ep.module_call_graph, gsig.ModuleCallSignature, gsig.ModuleCallEntry, conv)
    normalize_edited_graph(gm, sig, call_graph)  # a torch program may be one a user edited and rebuilt
    return ExportedProgram(gm, sig, dict(torch_ep.state_dict), dict(torch_ep.range_constraints), call_graph,
                           example_inputs=torch_ep.example_inputs, constants=dict(torch_ep.constants),
                           verifiers=list(torch_ep.verifiers))  # the same dialect
