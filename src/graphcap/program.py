"""ExportedProgram: the container export returns.

It holds a ``torch.fx.GraphModule`` whose placeholders are, in order, the
lifted parameters, buffers and constants and then the flat user inputs; the
graph signature that names each of them; the tensors themselves
(``state_dict`` for parameters and persistent buffers, ``constants`` for
non-persistent buffers and lifted constants); the ranges of the symbolic
sizes; and the call structure. It is a container: the work of building,
checking, running and transforming programs lives in the modules that do it.
It derives from ``torch.export.ExportedProgram`` (without running torch's
constructor) so that the consumers of torch.export's program take it as is
(docs/consumers.md).

Where it sits in the import order: the capture stages, the passes and the
serializer build programs, so they come after this module; it imports only
what is below it (the signature, the input checks, the tracing lock, and the
verifier that checks it on construction). Its methods ``run_decompositions``, ``module()``
and printing are the public face of later stages, so each imports its stage
(:mod:`graphcap.passes`, :mod:`graphcap.runtime`, :mod:`graphcap.printing`)
inside the method, one way: none of those imports this module back at run
time (a pass builds its result with ``ep._new_program(...)``, and names
``ExportedProgram`` only under ``TYPE_CHECKING``). tests/unit/test_import_layers.py
checks that no import cycle comes back.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator, NamedTuple, Optional

import torch
import torch.export.exported_program as _torch_exported_program  # the base class (see ExportedProgram)

from .edited_graphs import fill_source_metadata, normalize_edited_graph
from .errors import NotPicklableError
from .ir_checks import is_inference_ir, verify
from .signature import ExportGraphSignature, InputKind, ModuleCallEntry, call_spec_of
from .torch_logs import quiet_torch_logs
from .torch_private import pytree
from .torch_private.export_program import is_torch_verifier, set_torch_only_fields, torch_verifier_for
from .tracing_lock import TRACING_LOCK
from .young_heap import trace_allocations_only


def _verify_as_built(ep: "ExportedProgram") -> None:
    """The construction's check (the constructor's ``verify`` argument hides the function's name)."""
    verify(ep)


class CallSpec(NamedTuple):
    """(in_spec, out_spec) of the whole program: the pytree structure of (args, kwargs) and of the result."""

    in_spec: Optional[pytree.TreeSpec]
    out_spec: Optional[pytree.TreeSpec]


class Verifier:
    """graphcap's IR check (``graphcap.ir_checks``), named by the IR level it checks.

    ``dialect`` says which IR level the program is at, as torch names them:
    ``TRAINING`` for what ``export`` returns, ``ATEN`` for what
    ``run_decompositions`` returns. A program built with this class lists
    torch's verifier class of the same dialect in ``ep.verifiers`` (what
    torch's code and the consumers read and hand to torch's constructor);
    ``ep.validate()`` runs graphcap's check.
    """

    dialect = "TRAINING"

    def check(self, ep: "ExportedProgram") -> None:
        verify(ep)


class InferenceVerifier(Verifier):
    """The check of a program in the inference IR (functional core ATen)."""

    dialect = "ATEN"


def _read_only(name: str):
    def refuse(self, value):
        raise RuntimeError(f"Unable to set ExportedProgram's {name} attribute: an ExportedProgram is "
                           f"rebuilt, not edited (ep._update(graph_module, graph_signature, ...) makes a "
                           f"new one).")
    return refuse


def _as_torch_verifiers(verifiers: Optional[list[type]]) -> list[type]:
    """The verifier classes a program lists: torch's class of each graphcap verifier's dialect
    (torch's constructor, which consumers call with ``ep.verifier``, takes only torch's)."""
    return [v if is_torch_verifier(v) else torch_verifier_for(v.dialect) for v in verifiers or [Verifier]]


def _graphcap_layout(graph_module: torch.fx.GraphModule, graph_signature: ExportGraphSignature,
                     state_dict: dict[str, torch.Tensor], range_constraints: dict[Any, Any],
                     module_call_graph: list[ModuleCallEntry], example_inputs: Optional[tuple[tuple, dict]] = None,
                     constants: Optional[dict[str, torch.Tensor]] = None) -> tuple:
    """The constructor's fields, as graphcap's stages pass them."""
    return graph_module, graph_signature, state_dict, range_constraints, module_call_graph, example_inputs, constants


def _torch_layout(root: Any, graph: torch.fx.Graph, graph_signature: Any, state_dict: dict[str, torch.Tensor],
                  range_constraints: dict[Any, Any], module_call_graph: list[Any],
                  example_inputs: Optional[tuple[tuple, dict]] = None,
                  constants: Optional[dict[str, torch.Tensor]] = None) -> tuple:
    """The constructor's fields from torch's layout (``root`` and ``graph`` where graphcap takes one
    graph module), as torch's passes and code written for torch build a program: the graph module
    is a new ``GraphModule`` over ``graph`` taking ``root``'s attributes and ``meta``, as torch's
    constructor makes it."""
    graph_module = torch.fx.GraphModule(root, graph)
    if isinstance(root, torch.fx.GraphModule):
        graph_module.meta.update(root.meta)
    return graph_module, graph_signature, state_dict, range_constraints, module_call_graph, example_inputs, constants


def _constructor_fields(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, bool]:
    """``ExportedProgram(...)``'s fields, called in graphcap's layout ``(graph_module, graph_signature,
    state_dict, range_constraints, module_call_graph, example_inputs=None, constants=None)`` or in
    torch's ``(root, graph, graph_signature, ...)`` (told by a ``root`` or ``graph`` keyword, or an
    ``fx.Graph`` second); and whether it was torch's."""
    torchs = "root" in kwargs or "graph" in kwargs or (len(args) > 1 and isinstance(args[1], torch.fx.Graph))
    return (_torch_layout if torchs else _graphcap_layout)(*args, **kwargs), torchs


def module_of_program(value: Any) -> Any:
    """``value.module()`` when ``value`` is an exported program (graphcap's or torch.export's),
    else ``value``: ``export(ep, args)`` exports the program's module, the one callable a program
    stands for (calling the program itself only raises)."""
    if isinstance(value, _torch_exported_program.ExportedProgram):
        return value.module()
    return value


class ExportedProgram(_torch_exported_program.ExportedProgram):
    """A captured program: a flat ATen graph, its signature, its state and its ranges.

    It is an instance of ``torch.export.ExportedProgram`` so that every tool taking
    torch.export's program (ExecuTorch, ``torch.onnx.export``, AOTInductor,
    torch.export's save, coremltools) takes it as is; everything graphcap does with
    it (construction, ``validate``, ``module()``, ``run_decompositions``, printing,
    files) is graphcap's own code, overriding torch's (torch's constructor is not run).

    Built by :func:`graphcap.export` (or ``load``, ``from_torch``, a pass); the
    constructor verifies the IR invariants unless ``verify=False``. The fields are
    read-only views; passes return a new program.

    Args:
        graph_module: the ``torch.fx.GraphModule`` holding the graph. torch's layout is taken
            too: ``ExportedProgram(root, graph, graph_signature, ...)`` (positional or by
            keyword), as torch's passes build a program, makes the graph module from
            ``root`` and ``graph`` as torch's constructor does.
        graph_signature: what each placeholder and output is.
        state_dict: parameters and persistent buffers, by fully-qualified name.
        range_constraints: symbol -> ``ValueRanges`` of every size symbol.
        module_call_graph: how the program and each preserved submodule are called.
        example_inputs: ``(args, kwargs)`` the program was exported with, or None.
        constants: lifted tensor constants and non-persistent buffers, by name.
        verify: run the verifiers now (default True).
        verifiers: the verifier classes (default: those of the IR level the graph module's
            ``meta`` records, the training IR's unless ``run_decompositions`` made it).

    Attributes:
        graph_module: the ``torch.fx.GraphModule``; its placeholders are the lifted
            state (parameters, buffers, constants) then the flattened user inputs.
        graph: ``graph_module.graph``.
        graph_signature: an :class:`ExportGraphSignature`: the kind and target of
            every input and output of the graph.
        state_dict: parameters and persistent buffers (name -> tensor).
        constants: lifted constants and non-persistent buffers (name -> tensor);
            ``tensor_constants`` is the same dict under torch's other name.
        tensor_constants: same as ``constants``.
        range_constraints: each size symbol (a sympy expression) -> its inclusive
            range; what the program accepts for dynamic dimensions.
        module_call_graph: a list of :class:`ModuleCallEntry`, the program itself
            first (fqn ``""``), then each preserved submodule.
        example_inputs: the ``(args, kwargs)`` given to export (settable with inputs
            of the same structure), or None.
        call_spec: ``(in_spec, out_spec)``, the pytree structure of inputs/outputs.
        verifiers: torch's verifier classes of the program's IR level (what torch's code
            reads); ``verifier`` is the first, ``dialect`` its IR dialect name.
        verifier: the first of ``verifiers``.
        dialect: the IR dialect the verifier checks (``"TRAINING"``, or ``"ATEN"`` after ``run_decompositions``).

    Raises:
        VerificationError: (construction, ``validate``) the graph breaks an IR
            invariant; the message names the node and the rule.

    Example:
        >>> ep = graphcap.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
        >>> print(ep.graph_signature)
        >>> out = ep.module()(torch.randn(3, 4))
        >>> core = ep.run_decompositions()
    """

    _handed_over = False  # whether _hand_over_to_torch ran for this program

    def __init__(self, *args: Any, verify: bool = True, verifiers: Optional[list[type]] = None, **kwargs: Any):
        (graph_module, graph_signature, state_dict, range_constraints, module_call_graph, example_inputs,
         constants), torchs = _constructor_fields(args, kwargs)
        self._graph_module = graph_module
        self._graph_signature = graph_signature  # converted if torch's (see the property)
        graph_signature = self._graph_signature
        if torchs:  # code written for torch builds a program from a graph it edited, as ``_update`` does
            normalize_edited_graph(graph_module, graph_signature, module_call_graph)
        self._state_dict = state_dict
        self._range_constraints = range_constraints
        self._call_graph = module_call_graph  # graphcap's code reads it here (signature.call_graph_of)
        self._example_inputs = example_inputs
        self._constants = constants if constants is not None else {}
        # no verifiers given (a pass rebuilding a program, code written for torch): the IR level the
        # graph is at, as the decomposition recorded it on the graph module
        self._verifiers = _as_torch_verifiers(verifiers or [InferenceVerifier if is_inference_ir(self) else Verifier])
        # what the export that made this program measured and assumed, for graphcap.report:
        # seconds per pipeline stage, and graphcap.dynamic.assumptions.Assumption records
        # (None: not known, e.g. a program loaded from a file)
        self.export_timings: dict[str, float] = {}
        self.export_assumptions: Optional[list[Any]] = None
        # symbol text -> the spec's Dim name (graphcap.dynamic.symbol_names.dim_names reads it)
        self.export_dim_names: dict[str, str] = {}
        # operator namespace -> operator-set version, as the file this program was loaded from recorded
        # them (empty otherwise); save writes the user's namespaces again (serialize/opsets.py)
        self.opset_version: dict[str, int] = {}
        set_torch_only_fields(self)
        if verify:
            _verify_as_built(self)  # as the stages built it: a node without metadata is named

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
    def _graph_signature(self) -> ExportGraphSignature:
        """torch's field, which torch's and ExecuTorch's passes assign (``ep._graph_signature =
        new_signature``) with a signature of torch's classes: it is kept as graphcap's, so that
        graphcap's views, rules and ``module()`` see every spec."""
        return self.__dict__["_signature"]

    @_graph_signature.setter
    def _graph_signature(self, value: Any) -> None:
        if not isinstance(value, ExportGraphSignature):  # one rebuilt by torch's code
            value = ExportGraphSignature(value.input_specs, value.output_specs)
        self.__dict__["_signature"] = value

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
        """How the program and each preserved submodule are called. Read from outside graphcap
        (ExecuTorch, torch's own save, ...): see :meth:`_hand_over_to_torch`."""
        self._hand_over_to_torch()
        return self._call_graph

    @property
    def _module_call_graph(self) -> list[ModuleCallEntry]:
        """torch's own field, which torch's and ExecuTorch's code read directly."""
        self._hand_over_to_torch()
        return self._call_graph

    def _hand_over_to_torch(self) -> None:
        """Register with torch's pytree registry the classes graphcap flattened by their attributes
        that the program's structure names (a ``DynamicCache`` output): the program's structure is
        being read by code other than graphcap's (only graphcap's code reads ``_call_graph``), which
        rebuilds and writes it with torch's pytree (ExecuTorch's emitter, torch's own save).
        As :func:`graphcap.to_torch` does; a class already registered (by the user) is left as it is."""
        if self._handed_over:
            return
        from . import auto_flatten
        for entry in self._call_graph:
            if entry.signature is not None:
                auto_flatten.register_for_torch(entry.signature.in_spec)
                auto_flatten.register_for_torch(entry.signature.out_spec)
        self._handed_over = True

    @property
    def tensor_constants(self) -> dict[str, torch.Tensor]:
        """The lifted constants and non-persistent buffers (torch's other name for ``constants``)."""
        return self._constants

    @property
    def example_inputs(self) -> Optional[tuple[tuple, dict]]:
        return self._example_inputs

    @example_inputs.setter
    def example_inputs(self, value: Optional[tuple[tuple, dict]]) -> None:
        """Replace the stored example inputs; they must have the program's input structure."""
        from .runtime.input_checks import check_example_inputs
        check_example_inputs(value, call_spec_of(self)[0])
        self._example_inputs = value

    @property
    def call_spec(self) -> CallSpec:
        """(in_spec, out_spec) of the whole program (read from outside graphcap: :meth:`_hand_over_to_torch`)."""
        self._hand_over_to_torch()
        return CallSpec(*call_spec_of(self))

    @property
    def verifiers(self) -> list[type]:
        return self._verifiers

    @property
    def verifier(self) -> type:
        return self._verifiers[0]

    @property
    def dialect(self) -> str:
        return self._verifiers[0].dialect

    graph_module = graph_module.setter(_read_only("graph_module"))
    graph = graph.setter(_read_only("graph"))
    graph_signature = graph_signature.setter(_read_only("graph_signature"))
    state_dict = state_dict.setter(_read_only("state_dict"))
    constants = constants.setter(_read_only("constants"))
    tensor_constants = tensor_constants.setter(_read_only("tensor_constants"))
    range_constraints = range_constraints.setter(_read_only("range_constraints"))
    module_call_graph = module_call_graph.setter(_read_only("module_call_graph"))
    call_spec = call_spec.setter(_read_only("call_spec"))
    verifiers = verifiers.setter(_read_only("verifiers"))
    verifier = verifier.setter(_read_only("verifier"))
    dialect = dialect.setter(_read_only("dialect"))

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

    # -- rebuilding ----------------------------------------------------------
    def _update(self, graph_module: torch.fx.GraphModule, graph_signature: ExportGraphSignature, *,
                state_dict: Optional[dict[str, torch.Tensor]] = None,
                constants: Optional[dict[str, Any]] = None,
                verifiers: Optional[list[type]] = None) -> "ExportedProgram":
        """A new program with this one's ranges, call graph and example inputs and the given graph
        and signature (and, if given, state, constants and verifiers): how torch-style passes
        produce their result. The graph may be one the user edited: new nodes get the metadata
        they lack and duplicate ``getitem`` nodes are merged (:mod:`graphcap.edited_graphs`)
        before the new program is verified."""
        call_graph = copy.deepcopy(self._call_graph)
        if not isinstance(graph_signature, ExportGraphSignature):  # one rebuilt by torch's code
            graph_signature = ExportGraphSignature(graph_signature.input_specs, graph_signature.output_specs)
        normalize_edited_graph(graph_module, graph_signature, call_graph)
        new_ep = ExportedProgram(
            graph_module, graph_signature,
            state_dict if state_dict is not None else self._state_dict,
            copy.deepcopy(self._range_constraints), call_graph,
            example_inputs=self._example_inputs,
            constants=constants if constants is not None else self._constants,
            verifiers=verifiers if verifiers is not None else self._verifiers)
        new_ep.export_timings, new_ep.export_assumptions = dict(self.export_timings), self.export_assumptions
        new_ep.export_dim_names = dict(self.export_dim_names)
        new_ep.opset_version = dict(self.opset_version)
        return new_ep

    def _new_program(self, *args: Any, **kwargs: Any) -> "ExportedProgram":
        """A new ``ExportedProgram`` built from the constructor's arguments.

        How a pass builds its result: the passes sit above this module in the import
        order (see the module docstring) and do not import it at run time, so they ask
        the program they were given. The result is always this base class, whatever
        the class of ``self`` (a ``StructureOnlyProgram`` passed through a pass gives a
        plain program).
        """
        return ExportedProgram(*args, **kwargs)

    def buffers(self) -> Iterator[torch.Tensor]:
        for _, b in self.named_buffers():
            yield b

    def __deepcopy__(self, memo: dict) -> "ExportedProgram":
        """A copy sharing nothing mutable with this program: its own graph, tensors, ranges, call
        graph and tables, and its graph's values in a ShapeEnv of their own. (fx copies a graph's
        nodes with the same ``meta['val']`` objects; were they kept, a consumer's pass on the copy
        that settles a symbol — the batch is 2 — would settle it in this program too.)"""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update({name: copy.deepcopy(value, memo) for name, value in self.__dict__.items()})
        from .shape_env_copies import give_graph_own_shape_env
        from .trace.naming.node_names import copy_placeholder_names
        give_graph_own_shape_env(new._graph_module)
        # fx's copy suffixes an input named like a builtin (nn.Linear's ``input`` -> ``input_1``)
        # while the signature copied with it says ``input``: the copy keeps the program's names
        copy_placeholder_names(new._graph_module, self._graph_module)
        return new

    def __copy__(self) -> "ExportedProgram":
        """A shallow copy: the same graph module, tensors and tables (as ``copy.copy`` gives by
        default; written out since pickling, which that default goes through, is refused)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __reduce__(self) -> Any:
        # the graph's fake values and the module-stack tracer fx would re-trace it with on load do not
        # pickle: the file would be written and fail to load. graphcap.save is the program's format
        raise NotPicklableError.of(self)

    # -- behaviour (delegated) ---------------------------------------------
    def module(self, check_guards: bool = True) -> torch.fx.GraphModule:
        """A runnable ``torch.fx.GraphModule``: checks inputs, runs the graph, writes updates back.

        With ``check_guards=True`` the leaf checks are a ``_guards_fn`` call in the graph (so a
        re-export traces them); with ``False`` they run in the forward pre-hook instead.
        Either way every input is checked before anything is computed.
        """
        from .runtime.exported_module import build_module
        with trace_allocations_only():  # collections walk only what is built here (young_heap.py)
            return build_module(self, guards_in_graph=check_guards)

    def _num_lifted_params_buffers(self) -> int:
        """How many placeholders (parameters, buffers, constants) come before the user inputs."""
        specs = self._graph_signature.input_specs
        return next((i for i, s in enumerate(specs) if s.kind is InputKind.USER_INPUT), len(specs))

    def _graph_module_flat_inputs(self, args: tuple, kwargs: dict) -> tuple:
        """What ``graph_module`` takes for the call ``(*args, **kwargs)``: the lifted state, then
        the checked, flattened user inputs."""
        from .runtime.input_checks import InputChecker
        leaves = InputChecker(self)(tuple(args), dict(kwargs or {}))
        state = []
        for spec in self._graph_signature.input_specs:
            if spec.kind is InputKind.USER_INPUT:
                continue
            in_state = spec.kind is InputKind.PARAMETER \
                or (spec.kind is InputKind.BUFFER and spec.persistent is not False)
            state.append((self._state_dict if in_state else self._constants)[spec.target])
        return (*state, *leaves)

    def run_decompositions(self, decomp_table=None, decompose_custom_triton_ops: bool = False) -> "ExportedProgram":
        """A new program in the inference IR (functional core ATen); see ``graphcap.passes``.

        Operators defined with ``torch.library.triton_op`` stay whole, as torch.export keeps them;
        ``decompose_custom_triton_ops=True`` replaces each by its implementation (the triton kernel
        calls it wraps), as torch.export does (docs/decompositions.md)."""
        from .passes import run_decompositions
        # a graph the user edited in place (ep.graph_module.graph) gets the metadata its new
        # nodes lack, as a rebuilt one does in _update: the decomposed program is verified
        normalize_edited_graph(self._graph_module, self._graph_signature, self._call_graph, recompile=False)
        with TRACING_LOCK, quiet_torch_logs(), trace_allocations_only():
            new_ep = run_decompositions(self, decomp_table,
                                        decompose_custom_triton_ops=decompose_custom_triton_ops)
        new_ep._verifiers = _as_torch_verifiers([InferenceVerifier])
        new_ep.export_timings, new_ep.export_assumptions = dict(self.export_timings), self.export_assumptions
        new_ep.export_dim_names = dict(self.export_dim_names)
        new_ep.opset_version = dict(self.opset_version)
        return new_ep

    def validate(self) -> None:
        """Check the IR invariants (graphcap's rules for the program's IR level, see
        ``graphcap.ir_checks``); raises ``VerificationError`` naming the node and rule.

        The program was verified when it was built, so an operator node now without a source
        line or module stack is one the user (or a pass) added to the graph: it takes those of
        the node it reads (``graphcap.edited_graphs.fill_source_metadata``), as torch.export's
        verifier asks none of them. Everything else is checked as it is."""
        fill_source_metadata(self._graph_module)
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
