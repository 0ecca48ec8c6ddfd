"""``unflatten(ep)``: the module hierarchy back from a flat program.

The result is an ``nn.Module`` tree with a submodule at every FQN the
exported model had (from the program's call graph and its state), each
holding its own parameters and buffers (the program's tensors, shared), and
each with a ``forward`` made of the part of the graph that ran inside it
(:mod:`.build`). The root checks its inputs as ``ep.module()`` does, then
runs its graph, which calls the submodules.

A module called several times is one module: its first call is its
``forward``; a later call that ran a different graph is a stateless view
(``n@1``) reading the module's state. A preserved submodule keeps its
eager call signature and can be swapped (:mod:`.preserved`).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..runtime.input_checks import InputChecker
from ..signature import InputKind, call_graph_of, call_spec_of
from .build import GraphCutter
from .flat_args import AdapterState, check_adapter
from .modules import SubmoduleGraph, UnflattenedModule
from .prepare import copy_graph, name_inplace_targets, read_no_op_conversions_as_their_input, writes_from_outputs
from .preserved import PreservedModule
from .scopes import CallScope, build_scopes
from .shared import merge_shared
from .state import install_state, state_entries


def _as_graphcap_program(ep: Any):
    from ..program import ExportedProgram
    if isinstance(ep, ExportedProgram):
        return ep
    if type(ep).__name__ == "ExportedProgram" and hasattr(ep, "graph_signature"):
        from ..interop import from_torch
        return from_torch(ep)
    raise TypeError(f"unflatten expects an ExportedProgram, got {type(ep).__name__}.")


class _CheckerFactory:
    """Makes the program's input checker when the module first runs. Copies of the module
    share it (the checks describe the program, which copying the module does not change)."""

    def __init__(self, ep: Any):
        self.program = ep

    def __call__(self) -> InputChecker:
        return InputChecker(self.program)

    def __deepcopy__(self, memo: dict) -> "_CheckerFactory":
        return self


def _root_class(scope: CallScope, graph: torch.fx.Graph) -> str:
    for node in graph.nodes:
        for entry in (node.meta.get("nn_module_stack") or {}).values():
            if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == "":
                cls = entry[1]
                return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    return ""


def _split_call(name: str) -> tuple[str, int]:
    base, at, tail = name.rpartition("@")
    return (base, int(tail)) if at and tail.isdigit() else (name, 0)


def unflatten(module: Any, flat_args_adapter: Optional[Any] = None, *,
              method: Optional[str] = None) -> UnflattenedModule:
    """The module tree of the program ``module``'s model, rebuilt; see the module docstring.

    Args:
        module: an :class:`ExportedProgram` (the parameter has torch.export's name, so
            ``unflatten(module=ep)`` written for torch works).
        flat_args_adapter: a :class:`graphcap.FlatArgsAdapter` (torch.export's are accepted
            too): consulted on a call whose inputs are shaped otherwise than the program's, it
            maps the call's flat inputs onto the program's; the program's input checks then
            run on what it returns. Without one, such a call is refused.
        method: for a multi-method program (``graphcap.export_methods``), the method
            whose module tree to rebuild (the same as ``unflatten(progs[method])``).

    Returns:
        An ``UnflattenedModule``: an ``nn.Module`` with the original submodule
        hierarchy, each submodule running its part of the graph; submodules named
        in ``preserve_module_call_signature`` can be swapped for eager ones.

    Raises:
        ExportInputError: ``flat_args_adapter`` has no ``adapt`` method.

    Example:
        >>> ep = graphcap.export(model, args, preserve_module_call_signature=("block",))
        >>> unf = graphcap.unflatten(ep)
        >>> unf.block  # a module of its own, callable alone
    """
    check_adapter(flat_args_adapter)
    from ..multi_method import method_program
    ep = _as_graphcap_program(method_program(module, method, "graphcap.unflatten"))
    graph = copy_graph(ep)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    state = state_entries(ep, placeholders)
    name_inplace_targets(graph)
    read_no_op_conversions_as_their_input(graph)
    user_outputs = writes_from_outputs(ep, graph, {n: e.names for n, e in state.items()})
    root_scope = build_scopes(graph)
    adapter_state = AdapterState(flat_args_adapter, dict(ep.graph_module.meta))
    root = UnflattenedModule(_root_class(root_scope, graph), _CheckerFactory(ep), call_spec_of(ep)[1], adapter_state)

    signatures = {e.fqn: e.signature for e in call_graph_of(ep)[1:] if e.signature is not None}
    preserved = {_split_call(name)[0] for name in signatures}
    classes = {s.fqn: s.class_name for s in root_scope.walk() if s.fqn}
    modules: dict[str, SubmoduleGraph] = {"": root}

    def module_at(fqn: str) -> SubmoduleGraph:
        found = modules.get(fqn)
        if found is not None:
            return found
        parent_fqn, _, leaf = fqn.rpartition(".")
        parent = module_at(parent_fqn)
        cls = PreservedModule if fqn in preserved else SubmoduleGraph
        made = cls(fqn, classes.get(fqn, "Module"))
        parent.add_module(leaf, made)
        modules[fqn] = made
        return made

    for entry in call_graph_of(ep)[1:]:  # the model's tree, in its order
        fqn, index = _split_call(entry.fqn)
        if index == 0 and fqn:
            module_at(fqn)
    for scope in root_scope.walk():
        if scope.fqn:
            module_at(scope.fqn)
    install_state(state, module_at)

    cutter = GraphCutter(ep, graph, state, modules, signatures)
    user_inputs = [n for n, s in zip(placeholders, ep.graph_signature.input_specs) if s.kind is InputKind.USER_INPUT]
    root_graph = cutter.emit(root_scope, root, user_inputs, user_outputs, {}, output_tuple=True)
    root.set_graph(root_graph)
    merge_shared(root, modules)
    return root


__all__ = ["unflatten"]
