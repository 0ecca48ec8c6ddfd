"""ExportedProgram: the container export returns.

It holds a ``torch.fx.GraphModule`` whose placeholders are, in order, the
lifted parameters, buffers and constants and then the flat user inputs; the
graph signature that names each of them; the tensors themselves
(``state_dict`` for parameters and persistent buffers, ``constants`` for
non-persistent buffers and lifted constants); the ranges of the symbolic
sizes; and the call structure. It is a container: the work of building,
checking, running and transforming programs lives in the modules that do it.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import torch
import torch.utils._pytree as pytree

from .signature import ExportGraphSignature, InputKind, ModuleCallEntry


class ExportedProgram:
    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        graph_signature: ExportGraphSignature,
        state_dict: dict[str, torch.Tensor],
        range_constraints: dict[Any, Any],
        module_call_graph: list[ModuleCallEntry],
        example_inputs: Optional[tuple[tuple, dict]] = None,
        constants: Optional[dict[str, torch.Tensor]] = None,
        *,
        verify: bool = True,
    ):
        self._graph_module = graph_module
        self._graph_signature = graph_signature
        self._state_dict = state_dict
        self._range_constraints = range_constraints
        self._module_call_graph = module_call_graph
        self._example_inputs = example_inputs
        self._constants = constants or {}
        if verify:
            self.validate()

    # -- views --------------------------------------------------------------
    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self._graph_module

    @property
    def graph(self) -> torch.fx.Graph:
        return self._graph_module.graph

    @property
    def graph_signature(self) -> ExportGraphSignature:
        return self._graph_signature

    @property
    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state_dict

    @property
    def constants(self) -> dict[str, torch.Tensor]:
        return self._constants

    @property
    def range_constraints(self) -> dict[Any, Any]:
        return self._range_constraints

    @property
    def module_call_graph(self) -> list[ModuleCallEntry]:
        return self._module_call_graph

    @property
    def example_inputs(self) -> Optional[tuple[tuple, dict]]:
        return self._example_inputs

    @property
    def call_spec(self) -> tuple[pytree.TreeSpec, pytree.TreeSpec]:
        """(in_spec, out_spec) of the whole program."""
        sig = self._module_call_graph[0].signature
        return sig.in_spec, sig.out_spec

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        for name in self._graph_signature.parameters:
            yield name, self._state_dict[name]

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self) -> Iterator[tuple[str, torch.Tensor]]:
        for spec in self._graph_signature.input_specs:
            if spec.kind is InputKind.BUFFER:
                store = self._constants if spec.persistent is False else self._state_dict
                yield spec.target, store[spec.target]

    def buffers(self) -> Iterator[torch.Tensor]:
        for _, b in self.named_buffers():
            yield b

    # -- behaviour (delegated) ---------------------------------------------
    def module(self) -> torch.nn.Module:
        """A runnable module: checks inputs, runs the graph, writes mutations back."""
        from .runtime import ExportedModule
        return ExportedModule(self)

    def run_decompositions(self, decomp_table=None) -> "ExportedProgram":
        """A new program in the inference IR (functional core ATen); see ``graphcap.passes``."""
        from .passes import run_decompositions
        return run_decompositions(self, decomp_table)

    def validate(self) -> None:
        """Check the IR invariants; raises ``VerificationError`` naming the node and rule."""
        from .verifier import verify
        verify(self)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "An ExportedProgram is not callable. Call ep.module()(*args, **kwargs) to run it.")

    # -- printing ------------------------------------------------------------
    def __str__(self) -> str:
        from .printing import program_to_str
        return program_to_str(self)

    def __repr__(self) -> str:
        return self.__str__()
