"""``ep.module()``: the exported program as a runnable ``nn.Module``.

Parameters and buffers are registered under their original paths (so
``state_dict()`` keys are the user's FQNs and ``load_state_dict`` works);
parameters and read-only buffers are shared with the program, buffers the
program updates are copied so that running the module leaves the program as
it was;
constants are kept beside them and moved with ``.to()``. A call checks every
input against the signature (``graphcap.input_checks``) before computing,
runs the graph, writes buffer and input mutations back, and rebuilds the
outputs in the structure — the same classes — the eager model returned.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.utils._pytree as pytree

from .input_checks import InputChecker
from .signature import InputKind, OutputKind


def _install(root: torch.nn.Module, fqn: str, value: torch.Tensor, kind: str, persistent: bool = True) -> None:
    *path, leaf = fqn.split(".")
    mod = root
    for part in path:
        child = mod._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            mod.add_module(part, child)
        mod = child
    if kind == "parameter":
        param = value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, requires_grad=value.requires_grad)
        mod.register_parameter(leaf, param)
    else:
        mod.register_buffer(leaf, value, persistent=persistent)


class ExportedModule(torch.nn.Module):
    """Runs an ExportedProgram; see the module docstring."""

    def __init__(self, ep):
        super().__init__()
        sig = ep.graph_signature
        self._state_targets: list[tuple[InputKind, str]] = []
        constants: dict[str, torch.Tensor] = {}
        # Buffers the program updates get their own copy: running this module
        # must not change the ExportedProgram (nor the other modules made from it).
        updated = set(sig.buffers_to_mutate.values())
        for spec in sig.input_specs:
            if spec.kind is InputKind.PARAMETER:
                if not _has(self, spec.target):
                    _install(self, spec.target, ep.state_dict[spec.target], "parameter")
            elif spec.kind is InputKind.BUFFER:
                store = ep.constants if spec.persistent is False else ep.state_dict
                value = store[spec.target]
                if not _has(self, spec.target):
                    _install(self, spec.target, value.clone() if spec.target in updated else value, "buffer",
                             spec.persistent is not False)
            elif spec.kind is InputKind.CONSTANT_TENSOR:
                constants[spec.target] = ep.constants[spec.target]
            else:
                continue
            self._state_targets.append((spec.kind, spec.target))
        self._constants = constants
        # The graph is held outside nn.Module's registry: it owns no state, and
        # its name must not shadow a user submodule.
        object.__setattr__(self, "_graph", copy.deepcopy(ep.graph_module))
        self._checker = InputChecker(ep)
        self._out_spec = ep.call_spec[1]
        user_index = {s.arg.name: i for i, s in enumerate(
            s for s in sig.input_specs if s.kind is InputKind.USER_INPUT)}
        # (kind, state FQN or flat user input index) per mutation output
        self._mutations = [(s.kind, user_index[s.target] if s.kind is OutputKind.USER_INPUT_MUTATION else s.target)
                           for s in sig.output_specs
                           if s.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION,
                                         OutputKind.USER_INPUT_MUTATION)]

    def _state_value(self, kind: InputKind, target: str) -> torch.Tensor:
        if kind is InputKind.PARAMETER:
            return self.get_parameter(target)
        if kind is InputKind.BUFFER:
            return self.get_buffer(target)
        return self._constants[target]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        user = self._checker(args, kwargs)
        state = [self._state_value(kind, target) for kind, target in self._state_targets]
        outputs = self._graph(*state, *user)
        n_mut = len(self._mutations)
        with torch.no_grad():
            for (kind, where), value in zip(self._mutations, outputs[:n_mut]):
                dest = (self.get_buffer(where) if kind is OutputKind.BUFFER_MUTATION
                        else self.get_parameter(where) if kind is OutputKind.PARAMETER_MUTATION
                        else user[where])
                if value is not dest:
                    dest.copy_(value)
        return pytree.tree_unflatten(list(outputs[n_mut:]), self._out_spec)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self._constants = {k: fn(v) for k, v in self._constants.items()}
        return self

    def __repr__(self) -> str:
        return f"ExportedModule({len(self._state_targets)} state tensors)"

    @property
    def graph(self) -> torch.fx.Graph:
        return self._graph.graph

    @property
    def code(self) -> str:
        return self._graph.code


def _has(root: torch.nn.Module, fqn: str) -> bool:
    try:
        root.get_parameter(fqn)
        return True
    except AttributeError:
        pass
    try:
        root.get_buffer(fqn)
        return True
    except AttributeError:
        return False
