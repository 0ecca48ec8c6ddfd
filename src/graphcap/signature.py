"""The graph signature: what every placeholder and every output of a program is.

The names follow torch.export's so that both read alike. A signature is two
ordered lists — ``input_specs`` (one per placeholder) and ``output_specs`` (one
per output value) — and every other view (``parameters``, ``buffers_to_mutate``,
...) is derived from them, never stored twice.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional, Union


class _Kind(enum.Enum):
    """An enum whose members also equal torch.export's members of the same name.

    Code written for torch.export compares ``spec.kind`` with torch's
    ``InputKind.PARAMETER``; that comparison keeps working on graphcap's
    signature (and the reverse one too: Python tries this side when torch's
    enum declines).
    """

    def __eq__(self, other: object) -> bool:
        if isinstance(other, enum.Enum) and type(other) is not type(self):
            return type(other).__name__ == type(self).__name__ and other.name == self.name
        return self is other

    def __hash__(self) -> int:
        return hash(self.name)


class InputKind(_Kind):
    USER_INPUT = 1
    PARAMETER = 2
    BUFFER = 3
    CONSTANT_TENSOR = 4
    CUSTOM_OBJ = 5
    TOKEN = 6


class OutputKind(_Kind):
    USER_OUTPUT = 1
    LOSS_OUTPUT = 2
    BUFFER_MUTATION = 3
    GRADIENT_TO_PARAMETER = 4
    GRADIENT_TO_USER_INPUT = 5
    USER_INPUT_MUTATION = 6
    TOKEN = 7
    PARAMETER_MUTATION = 8  # an in-place write to a parameter (inference IR; torch has the same kind)


@dataclasses.dataclass(frozen=True)
class TensorArgument:
    name: str


@dataclasses.dataclass(frozen=True)
class SymIntArgument:
    name: str


@dataclasses.dataclass(frozen=True)
class SymFloatArgument:
    name: str


@dataclasses.dataclass(frozen=True)
class SymBoolArgument:
    name: str


@dataclasses.dataclass(frozen=True)
class ConstantArgument:
    """A Python value baked into the program (an int input, a string output)."""

    name: str
    value: Any


ArgumentSpec = Union[TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument]


@dataclasses.dataclass
class InputSpec:
    kind: InputKind
    arg: ArgumentSpec
    target: Optional[str] = None
    persistent: Optional[bool] = None

    def __str__(self) -> str:
        text = f"{self.arg.name}: {self.kind.name}"
        if self.target is not None:
            text += f" target={self.target!r}"
        if self.persistent is not None:
            text += f" persistent={self.persistent}"
        return text


@dataclasses.dataclass
class OutputSpec:
    kind: OutputKind
    arg: ArgumentSpec
    target: Optional[str] = None

    def __str__(self) -> str:
        name = self.arg.name if self.arg.name or not isinstance(self.arg, ConstantArgument) \
            else repr(self.arg.value)
        text = f"{name}: {self.kind.name}"
        if self.target is not None:
            text += f" target={self.target!r}"
        return text


@dataclasses.dataclass
class ExportGraphSignature:
    input_specs: list[InputSpec]
    output_specs: list[OutputSpec]

    def _inputs(self, kind: InputKind) -> list[InputSpec]:
        return [s for s in self.input_specs if s.kind is kind]

    def _outputs(self, kind: OutputKind) -> list[OutputSpec]:
        return [s for s in self.output_specs if s.kind is kind]

    @property
    def parameters(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.PARAMETER)]

    @property
    def buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER)]

    @property
    def non_persistent_buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER) if s.persistent is False]

    @property
    def lifted_tensor_constants(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)]

    @property
    def user_inputs(self) -> list[Any]:
        return [s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                for s in self._inputs(InputKind.USER_INPUT)]

    @property
    def user_outputs(self) -> list[Any]:
        return [s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                for s in self._outputs(OutputKind.USER_OUTPUT)]

    @property
    def inputs_to_parameters(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.PARAMETER)}

    @property
    def inputs_to_buffers(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.BUFFER)}

    @property
    def inputs_to_lifted_tensor_constants(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)}

    @property
    def buffers_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._outputs(OutputKind.BUFFER_MUTATION)}

    @property
    def parameters_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._outputs(OutputKind.PARAMETER_MUTATION)}

    @property
    def user_inputs_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._outputs(OutputKind.USER_INPUT_MUTATION)}

    def __str__(self) -> str:
        inputs = "\n".join(map(str, self.input_specs))
        outputs = "\n".join(map(str, self.output_specs))
        return f"\n# inputs\n{inputs}\n\n# outputs\n{outputs}\n"


@dataclasses.dataclass
class ModuleCallSignature:
    """How a module is called: its flat inputs/outputs and their structure."""

    inputs: list[ArgumentSpec]
    outputs: list[ArgumentSpec]
    in_spec: Any  # pytree.TreeSpec over (args, kwargs)
    out_spec: Any  # pytree.TreeSpec over the return value
    forward_arg_names: Optional[list[str]] = None


@dataclasses.dataclass
class ModuleCallEntry:
    fqn: str
    signature: Optional[ModuleCallSignature] = None
