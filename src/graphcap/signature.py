"""The graph signature: what every placeholder and every output of a program is.

The names follow torch.export's so that both read alike. A signature is two
ordered lists — ``input_specs`` (one per placeholder) and ``output_specs`` (one
per output value) — and every other view (``parameters``, ``buffers_to_mutate``,
...) is derived from them, never stored twice. ``ModuleCallSignature`` and
``ModuleCallEntry`` say how each preserved module is called.

The kinds (``InputKind``, ``OutputKind``) and the argument classes
(``TensorArgument``, ``ConstantArgument``, ...) live in
:mod:`graphcap.graph_arguments`, with their interoperability with torch's; they
are importable from here too, as documented (``from graphcap.signature import
InputKind``). Specs built with torch's classes (by torch code that rebuilds a
signature) are converted to graphcap's on construction, so inside graphcap
every kind is graphcap's and ``spec.kind is InputKind.PARAMETER`` stays valid.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Optional

# public names of graphcap.signature (documented there); defined in graph_arguments
import torch.export.exported_program as _torch_program  # plain dataclasses, used as base classes
import torch.export.graph_signature as _torch_sig  # plain dataclasses, used as base classes

from .errors import SignatureEditError
from .graph_arguments import (  # noqa: F401
    ArgumentSpec,
    ConstantArgument,
    CustomObjArgument,
    InputKind,
    OutputKind,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
    TokenArgument,
    as_argument,
)


class _ConvertedOnSet:
    """A spec's ``kind`` and ``arg`` converted whenever they are set, also later (by a pass written
    for torch, with torch's member or argument class), so graphcap's views and rules
    (``spec.kind is InputKind.PARAMETER``) see them."""

    _kind_type: ClassVar[Any]

    def __post_init__(self) -> None:
        """Nothing beyond the conversion: what torch's dataclass checks here (a buffer's
        persistent flag, the argument's class) graphcap's verifier checks, with its errors."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "kind":
            value = self._kind_type(value)
        elif name == "arg":
            value = as_argument(value)
        object.__setattr__(self, name, value)


@dataclasses.dataclass
class InputSpec(_ConvertedOnSet, _torch_sig.InputSpec):
    """One placeholder of the graph: its kind, its argument and, for state, the state's name.

    Args:
        kind: an :class:`InputKind` (or torch's member of the same name).
        arg: the argument (``TensorArgument(name=...)`` etc.) naming the placeholder.
        target: for parameters, buffers and constants, their fully-qualified name.
        persistent: for buffers, whether it is in the state_dict.

    Raises:
        ValueError: ``kind`` is not an InputKind.

    Example:
        >>> graphcap.InputSpec(graphcap.InputKind.PARAMETER, graphcap.TensorArgument("p_weight"), "weight")
    """

    kind: InputKind
    arg: ArgumentSpec
    target: Optional[str] = None
    persistent: Optional[bool] = None

    _kind_type: ClassVar[Any] = InputKind

    def __str__(self) -> str:
        text = f"{self.arg.name}: {self.kind.name}"
        if self.target is not None:
            text += f" target={self.target!r}"
        if self.persistent is not None:
            text += f" persistent={self.persistent}"
        return text


@dataclasses.dataclass
class OutputSpec(_ConvertedOnSet, _torch_sig.OutputSpec):
    """One output of the graph: its kind, its argument and, for a mutation, what it updates.

    Args:
        kind: an :class:`OutputKind` (or torch's member of the same name).
        arg: the argument naming the output value.
        target: for a buffer or input mutation, the buffer's name or input's name.

    Raises:
        ValueError: ``kind`` is not an OutputKind.

    Example:
        >>> graphcap.OutputSpec(graphcap.OutputKind.USER_OUTPUT, graphcap.TensorArgument("add"))
    """

    kind: OutputKind
    arg: ArgumentSpec
    target: Optional[str] = None

    _kind_type: ClassVar[Any] = OutputKind

    def __str__(self) -> str:
        name = self.arg.name if self.arg.name or not isinstance(self.arg, ConstantArgument) \
            else repr(self.arg.value)
        text = f"{name}: {self.kind.name}"
        if self.target is not None:
            text += f" target={self.target!r}"
        return text


@dataclasses.dataclass
class ExportBackwardSignature:
    """Where a joint (forward + backward) program puts its loss and gradients.

    graphcap never makes joint programs (``export`` gives the training IR, gradients are
    left to autograd), so ``ep.graph_signature.backward_signature`` is None for its own
    programs; a signature with ``LOSS_OUTPUT`` / ``GRADIENT_TO_*`` outputs (read from
    torch) reports them here, as torch.export's class of this name does.

    Attributes:
        gradients_to_parameters: output name -> the parameter's FQN it is the gradient of.
        gradients_to_user_inputs: output name -> the user input it is the gradient of.
        loss_output: the name of the loss output.

    Raises:
        Nothing (a plain dataclass).

    Example:
        >>> sig = graphcap.ExportBackwardSignature({"g_w": "fc.weight"}, {}, "loss")
        >>> ep.graph_signature.backward_signature is None
        True
    """

    gradients_to_parameters: dict[str, str]
    gradients_to_user_inputs: dict[str, str]
    loss_output: str


def _as_input_spec(spec: Any) -> Any:
    if isinstance(spec, InputSpec) or not hasattr(spec, "kind"):  # not a spec: a dict of dataclasses.asdict
        return spec
    return InputSpec(spec.kind, spec.arg, spec.target, getattr(spec, "persistent", None))


def _as_output_spec(spec: Any) -> Any:
    if isinstance(spec, OutputSpec) or not hasattr(spec, "kind"):
        return spec
    return OutputSpec(spec.kind, spec.arg, spec.target)


class _Specs(list):
    """A signature's list of specs. A spec of torch's class put into it (``sig.input_specs.insert(0,
    torch.export.graph_signature.InputSpec(...))``, as a pass written for torch adds a buffer)
    becomes graphcap's, as the signature's constructor converts them: every view and rule then
    sees it."""

    _convert = staticmethod(lambda spec: spec)

    def __init__(self, specs: Any = ()) -> None:
        super().__init__(self._convert(s) for s in specs)

    def append(self, spec: Any) -> None:
        super().append(self._convert(spec))

    def insert(self, index: Any, spec: Any) -> None:
        super().insert(index, self._convert(spec))

    def extend(self, specs: Any) -> None:
        super().extend(self._convert(s) for s in specs)

    def __iadd__(self, specs: Any) -> "_Specs":
        self.extend(specs)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            value = [self._convert(s) for s in value]
        else:
            value = self._convert(value)
        super().__setitem__(index, value)


class _InputSpecs(_Specs):
    _convert = staticmethod(_as_input_spec)


class _OutputSpecs(_Specs):
    _convert = staticmethod(_as_output_spec)


# The output kind that declares a write to an input of each kind; other inputs may not be written.
_MUTATION_KIND_OF = {InputKind.USER_INPUT: OutputKind.USER_INPUT_MUTATION,
                     InputKind.BUFFER: OutputKind.BUFFER_MUTATION,
                     InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION}
# The output kinds that declare a write to an input.
MUTATION_OUTPUT_KINDS = tuple(_MUTATION_KIND_OF.values())


def mutation_key(spec: InputSpec) -> Optional[tuple[OutputKind, str]]:
    """The ``(kind, target)`` an output declaring a write to this input carries: a user input
    is named by its placeholder, state by its FQN. None for an input that may not be written
    (a lifted constant, a custom object, a token)."""
    kind = _MUTATION_KIND_OF.get(spec.kind)
    if kind is None:
        return None
    return kind, (spec.arg.name if spec.kind is InputKind.USER_INPUT else spec.target)


def _frozen(items) -> Mapping[str, str]:
    return MappingProxyType(dict(items))


@dataclasses.dataclass
class ExportGraphSignature(_torch_sig.ExportGraphSignature):
    """The kind and target of every input and output of the graph, in order.

    Args:
        input_specs: an :class:`InputSpec` per placeholder (torch's are converted).
        output_specs: an :class:`OutputSpec` per output (torch's are converted).

    Raises:
        ValueError: a spec has an unknown kind.

    Example:
        >>> sig = ep.graph_signature
        >>> sig.parameters, sig.buffers, sig.user_inputs, sig.user_outputs
    """

    input_specs: list[InputSpec]
    output_specs: list[OutputSpec]

    def __post_init__(self) -> None:
        pass  # the lists were converted as they were set (torch's own __post_init__ is not wanted)

    def __setattr__(self, name: str, value: Any) -> None:
        # A signature rebuilt by torch's code (torch's InputSpec/OutputSpec) becomes graphcap's, and
        # so does a spec put into either list later (see _Specs).
        if name == "input_specs":
            value = _InputSpecs(value)
        elif name == "output_specs":
            value = _OutputSpecs(value)
        object.__setattr__(self, name, value)

    def _inputs(self, kind: InputKind) -> list[InputSpec]:
        return [s for s in self.input_specs if s.kind is kind]

    def _outputs(self, kind: OutputKind) -> list[OutputSpec]:
        return [s for s in self.output_specs if s.kind is kind]

    def _input_map(self, kind: InputKind, arg_cls: type) -> Mapping[str, str]:
        return _frozen((s.arg.name, s.target) for s in self._inputs(kind) if isinstance(s.arg, arg_cls))

    def _output_map(self, kind: OutputKind) -> Mapping[str, str]:
        return _frozen((s.arg.name, s.target) for s in self._outputs(kind) if isinstance(s.arg, TensorArgument))

    # -- lists of state, by FQN ----------------------------------------------
    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(s.target for s in self._inputs(InputKind.PARAMETER))

    @property
    def buffers(self) -> tuple[str, ...]:
        return tuple(s.target for s in self._inputs(InputKind.BUFFER))

    @property
    def non_persistent_buffers(self) -> tuple[str, ...]:
        return tuple(s.target for s in self._inputs(InputKind.BUFFER) if s.persistent is False)

    @property
    def lifted_tensor_constants(self) -> tuple[str, ...]:
        return tuple(s.target for s in self._inputs(InputKind.CONSTANT_TENSOR))

    @property
    def lifted_custom_objs(self) -> tuple[str, ...]:
        return tuple(s.target for s in self._inputs(InputKind.CUSTOM_OBJ))

    # -- user-facing inputs and outputs --------------------------------------
    @property
    def user_inputs(self) -> tuple[Any, ...]:
        return tuple(s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                     for s in self._inputs(InputKind.USER_INPUT))

    @property
    def user_outputs(self) -> tuple[Any, ...]:
        """Names (or baked-in values) of the user outputs, the loss output included."""
        return tuple(s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                     for s in self.output_specs if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT))

    # -- placeholder name -> FQN ---------------------------------------------
    @property
    def inputs_to_parameters(self) -> Mapping[str, str]:
        return self._input_map(InputKind.PARAMETER, TensorArgument)

    @property
    def inputs_to_buffers(self) -> Mapping[str, str]:
        return self._input_map(InputKind.BUFFER, TensorArgument)

    @property
    def inputs_to_lifted_tensor_constants(self) -> Mapping[str, str]:
        return self._input_map(InputKind.CONSTANT_TENSOR, TensorArgument)

    @property
    def inputs_to_lifted_custom_objs(self) -> Mapping[str, str]:
        return self._input_map(InputKind.CUSTOM_OBJ, CustomObjArgument)

    # -- output name -> what it updates --------------------------------------
    @property
    def buffers_to_mutate(self) -> Mapping[str, str]:
        return self._output_map(OutputKind.BUFFER_MUTATION)

    @property
    def parameters_to_mutate(self) -> Mapping[str, str]:
        return self._output_map(OutputKind.PARAMETER_MUTATION)

    @property
    def user_inputs_to_mutate(self) -> Mapping[str, str]:
        return self._output_map(OutputKind.USER_INPUT_MUTATION)

    def written_input_positions(self) -> dict[tuple[OutputKind, str], int]:
        """``(kind, target)`` of a mutation output → position of the input (and placeholder)
        it writes; one map for every pass that turns declared writes into graph operations."""
        positions = {}
        for i, spec in enumerate(self.input_specs):
            key = mutation_key(spec)
            if key is not None:
                positions[key] = i
        return positions

    # -- joint programs and effect tokens (never produced by graphcap) -------
    @property
    def backward_signature(self) -> Optional[ExportBackwardSignature]:
        loss = [s.arg.name for s in self._outputs(OutputKind.LOSS_OUTPUT)]
        if not loss:
            return None
        return ExportBackwardSignature(
            gradients_to_parameters={s.arg.name: s.target for s in self._outputs(OutputKind.GRADIENT_TO_PARAMETER)},
            gradients_to_user_inputs={s.arg.name: s.target
                                      for s in self._outputs(OutputKind.GRADIENT_TO_USER_INPUT)},
            loss_output=loss[0])

    @property
    def assertion_dep_token(self) -> Optional[Mapping[int, str]]:
        return None

    @property
    def input_tokens(self) -> tuple[str, ...]:
        return tuple(s.arg.name for s in self._inputs(InputKind.TOKEN))

    @property
    def output_tokens(self) -> tuple[str, ...]:
        return tuple(s.arg.name for s in self._outputs(OutputKind.TOKEN))

    # -- renaming ------------------------------------------------------------
    def replace_all_uses(self, old: str, new: str) -> None:
        """Rename the graph value ``old`` to ``new`` wherever a spec names it (both are node names:
        a node or an argument given instead is refused, it would match nothing)."""
        for which, name in (("old", old), ("new", new)):
            if not isinstance(name, str):
                raise SignatureEditError(
                    f"replace_all_uses takes node names, but {which} is a {type(name).__name__} ({name!r}).",
                    where="ExportGraphSignature.replace_all_uses(old, new)",
                    fix=f"Pass the name: replace_all_uses({'old.name' if which == 'old' else 'old'}, "
                        f"{'new.name' if which == 'new' else 'new'}) for a node, "
                        f"spec.arg.name for a signature argument.")
        for spec in [*self.input_specs, *self.output_specs]:
            if not isinstance(spec.arg, ConstantArgument) and spec.arg.name == old:
                spec.arg.name = new

    def get_replace_hook(self, replace_inputs: bool = False):
        """A hook for ``Node.replace_all_uses_with`` (through fx's ``_replace_hooks``) that
        keeps the signature naming the values the graph outputs."""
        def hook(old, new, user):
            if user.op == "output" or (replace_inputs and old.op == "placeholder"):
                self.replace_all_uses(old.name, new)
        return hook

    def __str__(self) -> str:
        from .printing import signature_to_str
        return signature_to_str(self)


@dataclasses.dataclass
class ModuleCallSignature(_torch_program.ModuleCallSignature):
    """How a module is called: its flat inputs/outputs and their structure.

    Args:
        inputs: the arguments (graph values) the call takes, flattened.
        outputs: the arguments it returns, flattened.
        in_spec: the pytree structure of ``(args, kwargs)``.
        out_spec: the pytree structure of the return value.
        forward_arg_names: the names of ``forward``'s parameters, when known.

    Raises:
        Nothing.

    Example:
        >>> ep.module_call_graph[0].signature.in_spec
    """

    inputs: list[ArgumentSpec]
    outputs: list[ArgumentSpec]
    in_spec: Any  # pytree.TreeSpec over (args, kwargs)
    out_spec: Any  # pytree.TreeSpec over the return value
    forward_arg_names: Optional[list[str]] = None

    def __post_init__(self) -> None:
        self.inputs = [as_argument(a) for a in self.inputs]
        self.outputs = [as_argument(a) for a in self.outputs]

    def replace_all_uses_with(self, original_node, new_node) -> None:
        """Follow a node rename in the graph (torch's passes call this on every entry)."""
        for arg in [*self.inputs, *self.outputs]:
            if arg.name == original_node.name:
                arg.name = new_node.name


@dataclasses.dataclass
class ModuleCallEntry(_torch_program.ModuleCallEntry):
    """One entry of ``ep.module_call_graph``: a module's path and, when preserved, its call signature.

    Args:
        fqn: the module's fully-qualified name (``""`` for the program itself).
        signature: its :class:`ModuleCallSignature`, or None.

    Raises:
        Nothing.

    Example:
        >>> [e.fqn for e in ep.module_call_graph]
    """

    fqn: str
    signature: Optional[ModuleCallSignature] = None


def call_graph_of(ep: Any) -> list:
    """``ep.module_call_graph`` as graphcap's own code reads it.

    Reading the public field of graphcap's program hands the program to torch
    (the classes its structure names are registered with torch's pytree,
    ``ExportedProgram._hand_over_to_torch``); graphcap's own reads must not.
    A torch program has only the public field.
    """
    own = getattr(ep, "_call_graph", None)
    return own if own is not None else ep.module_call_graph


def call_spec_of(ep: Any) -> tuple[Any, Any]:
    """``(in_spec, out_spec)`` of the whole program, read as :func:`call_graph_of` reads."""
    graph = call_graph_of(ep)
    if not graph or graph[0].signature is None:
        return None, None
    return graph[0].signature.in_spec, graph[0].signature.out_spec

