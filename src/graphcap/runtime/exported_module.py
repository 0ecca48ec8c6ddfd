"""``ep.module()``: the exported program as a runnable ``torch.fx.GraphModule``.

The program's graph takes its state as inputs; the module's graph reads it
instead: every parameter, buffer and constant placeholder becomes a
``get_attr`` of the attribute at the state's FQN (parameters and buffers
registered as such, so ``state_dict()`` keys are the user's FQNs and
``load_state_dict`` works; constants as plain attributes, moved with
``.to()``). Updates of buffers and inputs run as the program records them: in
the training IR they are in-place operators of the graph (on the module's
buffer, on the caller's tensor); an update the program lists as an output
(the inference IR, or a training-IR program saved by an older graphcap) is
written back inside the graph with ``aten.copy_``. The graph's code takes
the user's own arguments (``def forward(self, x, y):``): it flattens them with
the program's input structure and rebuilds the outputs in the structure, and
the classes, the eager model returned. The graph is the whole behaviour, so the
module can be printed, transformed, recompiled and exported again.

Inputs are checked before anything is computed: the structure (containers,
counts, keys) by a forward pre-hook, every leaf (dtype, device, sizes, baked-in
values, relations between sizes) by a ``_guards_fn`` submodule that the graph
calls right after its placeholders (under ``torch.compile`` the checks dynamo can follow,
``InputChecker.fits_compiled``, become guards of the compiled code). The module
holds the program's own parameters, buffers and constants, not copies, as
torch.export's ``module()`` does (``_install_state``): a run's buffer updates
show in ``ep.state_dict`` and in every module made from the program;
``copy.deepcopy(module)`` gives state of its own. Pickling is refused
(``errors.NotPicklableError``): ``graphcap.save`` is the program's file.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Optional, cast

import torch
import torch.fx.traceback as fx_traceback

from .. import auto_flatten
from ..dynamic.assert_messages import AssertExplainer, explain_failure, explanations
from ..errors import NotPicklableError, UnsupportedError
from ..graph_arguments import InputKind, OutputKind
from ..shape_env_copies import give_graph_own_shape_env
from ..signature import MUTATION_OUTPUT_KINDS, call_spec_of
from ..torch_private.fx import set_pytree_codegen
from ..torch_private.modules import MovesExtraTensors, buffers_of, non_persistent_buffer_names
from .input_checks import InputChecker

_STATE_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ)


def _update_parameter(param: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Write a program's new parameter value back, as eager's ``no_grad`` update did.

    A plain ``copy_`` into a parameter that requires grad is refused by autograd
    (torch.export's module() raises there unless called under ``no_grad``).
    """
    with torch.no_grad():
        return param.copy_(value)


def _update_input(tensor: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Write a program's new value of an input back into the caller's tensor.

    Autograd refuses an in-place write to a leaf that requires grad while grad is on, so when
    the caller passes such a leaf, eager's forward wrote it under ``no_grad`` (else eager raised);
    the write happens under ``no_grad`` here too. Any other tensor takes a plain ``copy_``, which
    records the write for autograd as eager's in-place operator did.
    """
    if tensor.is_leaf and tensor.requires_grad:
        with torch.no_grad():
            return tensor.copy_(value)
    written: torch.Tensor = torch.ops.aten.copy_.default(tensor, value)
    return written


class InputGuards(torch.nn.Module):
    """The leaf checks of ``module()``'s inputs, called by the graph on the flat user inputs."""

    _is_impure = True  # a check with no users: dead-code elimination must keep it

    def __init__(self, checker: InputChecker):
        super().__init__()
        self.checker = checker

    def forward(self, *flat_inputs: Any) -> None:
        if torch.compiler.is_dynamo_compiling():
            # torch.compile of the module: the checks dynamo can follow become guards of the compiled
            # code, and an input failing them is traced again into the full check, which raises (a
            # graph break runs it eagerly; fullgraph=True stops there). Without this a compiled
            # module ran a program specialized to other sizes and returned wrong numbers. A strict
            # export of the module (graphcap's or torch's) traces the same checks: its spec may not
            # reach past the program's ranges. torch.compiler.is_exporting() is not asked: torch
            # 2.10-2.11's dynamo answers it True under any torch.compile.
            if not self.checker.fits_compiled(flat_inputs):
                self.checker.check_leaves(list(flat_inputs))
            return
        self.checker.check_leaves(list(flat_inputs))


def _check_structure(module: "ExportedModule", args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The pre-hook: the structure always; the leaves too when the graph does not check them.
    ``module.validate_inputs = False`` turns the hook off, as on torch's module (the leaf checks a
    ``check_guards=True`` graph calls still run)."""
    if torch.compiler.is_dynamo_compiling() or not module.validate_inputs:
        return
    if getattr(module, "_leaf_checks_in_hook", False):
        module._checker(args, kwargs)
    else:
        module._checker.check_structure(args, kwargs)


_check_structure.graphcap_input_check = True  # type: ignore[attr-defined]  # not a user's hook (graph_module_replay)


class ExportedModule(MovesExtraTensors, torch.fx.GraphModule):
    """What ``ep.module()`` returns; see the module docstring."""

    # set by build_module (and carried by __deepcopy__); declared for the type checker only
    _checker: InputChecker
    _leaf_checks_in_hook: bool
    range_constraints: dict[Any, Any]  # the program's, as torch's unlifted module carries them
    _constant_fqns: list[str]
    graphcap_assert_messages: Optional[AssertExplainer]
    # torch's unlifted module has this switch (its swap and users skipping checks in a hot loop
    # turn it off); graphcap's reads it in the pre-hook
    validate_inputs: bool = True

    def move_extra_tensors(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        for fqn in getattr(self, "_constant_fqns", ()):  # plain attributes, which nn.Module does not move
            owner, value, field = _owner(self, fqn)
            if isinstance(value, torch.Tensor):
                owner.__dict__[field] = fn(value)

    def train(self, mode: bool = True) -> "ExportedModule":
        """Refused, as torch.export's ``module()`` refuses it: the program's train/eval behaviour
        (dropout, batch norm, ``if self.training``) was fixed when it was exported, so switching
        the flag would change nothing the graph computes."""
        method = "train" if mode else "eval"
        name = f"{method}()"
        raise NotImplementedError(
            f"Calling {name} is not supported yet. ep.module() runs the graph exported from the model in "
            f"the mode the model was in then; dropout, batch norm and branches on self.training were "
            f"fixed at export, and {name} cannot change them. Export the model again in "
            f"the mode you want (model.{method}(); graphcap.export(model, args)), or, "
            f"for dropout and batch norm only, use torchao.quantization.pt2e.move_exported_model_to_"
            f"{method}(module).")

    def _refuse_eval(self) -> "ExportedModule":
        """The eval method: refused, as :meth:`train` is."""
        return self.train(False)

    eval = _refuse_eval  # named by assignment: src/graphcap's files spell no call of the builtin eval

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except RuntimeError as e:  # a runtime assert failed: say input, line and range (same exception)
            explain_failure(e, getattr(self, "graphcap_assert_messages", None))
            raise

    def __reduce__(self) -> Any:
        # fx pickles a graph module as its code, re-traced on load by the tracer class its graph
        # was recorded with (torch's module-stack tracer, which that cannot build): the file would
        # be written and fail to load, and the input checks and state updates would not come back
        raise NotPicklableError.of(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> "ExportedModule":
        # a GraphModule copy: constants come back as buffers, hooks go
        new = cast(ExportedModule, super().__deepcopy__(memo))
        _settle_constants(new, self._constant_fqns)
        guards = getattr(new, "_guards_fn", None)
        new._checker = guards.checker if isinstance(guards, InputGuards) else copy.deepcopy(self._checker, memo)
        new._leaf_checks_in_hook = self._leaf_checks_in_hook
        new.validate_inputs = self.validate_inputs
        new.range_constraints = dict(getattr(self, "range_constraints", {}))
        new.graphcap_assert_messages = getattr(self, "graphcap_assert_messages", None)
        new.register_forward_pre_hook(_check_structure, with_kwargs=True)
        return new


def _settle_constants(module: ExportedModule, constant_fqns: list[str]) -> None:
    """Constants as plain attributes again (GraphModule registers any plain tensor it copies as
    a buffer, which would put constants in ``state_dict``)."""
    for fqn in constant_fqns:
        owner, value, field = _owner(module, fqn)
        if field in buffers_of(owner):
            buffers_of(owner).pop(field)
            non_persistent_buffer_names(owner).discard(field)
            owner.__dict__[field] = value
    module._constant_fqns = list(constant_fqns)


def _keep_non_persistent(module: torch.fx.GraphModule, fqns: list[str]) -> None:
    """Non-persistent buffers stay out of ``state_dict``: GraphModule copies each buffer of the root
    it is built from, and torch before 2.14 registers the copy as a persistent one."""
    for fqn in fqns:
        owner, _, field = _owner(module, fqn)
        if field in buffers_of(owner):
            non_persistent_buffer_names(owner).add(field)


def build_module(ep: Any, guards_in_graph: bool = True) -> ExportedModule:
    """``ep.module()``: see the module docstring."""
    sig = ep.graph_signature
    # subgraphs of control flow come along; ep stays untouched. Modules other code hung on the
    # graphs' meta (torch's unflatten leaves itself there) are shared, not copied.
    shared = {id(v): v for g in ep.graph_module.modules() if isinstance(g, torch.fx.GraphModule)
              for v in g.meta.values() if isinstance(v, torch.nn.Module)}
    source = copy.deepcopy(ep.graph_module, shared)
    # its values in a ShapeEnv of their own: a pass on the module (pt2e's prepare, a user's) that
    # settles a symbol leaves the program's as they were (graphcap.shape_env_copies)
    give_graph_own_shape_env(source)
    graph = source.graph
    _record_provenance(ep.graph_module.graph, graph)
    checker = InputChecker(ep)

    # Lifted state -> get_attr of the attribute at its FQN.
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    state_nodes: dict[str, torch.fx.Node] = {}
    input_nodes: list[torch.fx.Node] = []  # by input position: the placeholder, or the state's get_attr
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind is InputKind.USER_INPUT:
            input_nodes.append(node)
            continue
        if spec.kind not in _STATE_KINDS:
            raise UnsupportedError(f"The program has a {spec.kind.name} input, which module() cannot run.",
                                   where=f"graph input {node.name}",
                                   fix="Only parameters, buffers, constants and user inputs are runnable.")
        with graph.inserting_after(node), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the attribute is installed below
            attr = graph.get_attr(spec.target)
        node.replace_all_uses_with(attr)
        attr.meta = dict(node.meta)
        graph.erase_node(node)
        state_nodes[spec.target] = attr
        input_nodes.append(attr)

    # Updates listed as outputs -> copy_ into the buffer or input, inside the graph.
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    values = list(output.args[0])
    user_values, written = [], {}
    positions = sig.written_input_positions()  # by the signature's names, not the copy's
    for value, spec in zip(values, sig.output_specs):
        if spec.kind not in MUTATION_OUTPUT_KINDS:
            user_values.append(value)
            continue
        dest = input_nodes[positions[(spec.kind, spec.target)]]
        if value is dest:
            continue  # updated in place by the graph already
        # A parameter is a leaf that requires grad: eager updated it under no_grad, and so does this;
        # an input may be such a leaf too, depending on the caller (decided at each call).
        write = {OutputKind.PARAMETER_MUTATION: _update_parameter,
                 OutputKind.USER_INPUT_MUTATION: _update_input}.get(spec.kind, torch.ops.aten.copy_.default)
        with graph.inserting_before(output):
            copy_node = graph.call_function(write, (dest, value))
        copy_node.meta.update({k: v for k, v in value.meta.items() if k in ("val", "nn_module_stack",
                                                                              "stack_trace")})
        written[value] = copy_node
    output.args = (tuple(written.get(v, v) if isinstance(v, torch.fx.Node) else v for v in user_values),)

    # Leaf checks, first thing after the inputs arrive.
    user_placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    guards = InputGuards(checker)
    if user_placeholders and guards_in_graph:
        source.add_module("_guards_fn", guards)
        with graph.inserting_after(user_placeholders[-1]):
            call = graph.call_module("_guards_fn", tuple(user_placeholders))
        stack = next((n.meta["nn_module_stack"] for n in graph.nodes
                      if n.op == "call_function" and n.meta.get("nn_module_stack")), None)
        if stack is not None:
            call.meta["nn_module_stack"] = stack

    # Own arguments in, original structure out.
    in_spec, out_spec = call_spec_of(ep)
    set_pytree_codegen(graph, checker.arg_names, in_spec, out_spec,
                       own_walks=any(map(auto_flatten.mentions_known_class, (in_spec, out_spec))))

    root = torch.nn.Module()
    _install_state(root, ep)
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module") and node.target not in state_nodes and node.target != "_guards_fn":
            _install(root, node.target, _fetch(source, node.target))
    if guards_in_graph:
        root._guards_fn = guards
    module = ExportedModule(root, graph)
    _keep_non_persistent(module, [s.target for s in sig.input_specs
                                  if s.kind is InputKind.BUFFER and s.persistent is False])
    module.graph.lint()
    module.meta.update(ep.graph_module.meta)
    constant_fqns = [s.target for s in sig.input_specs if s.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ)]
    _settle_constants(module, constant_fqns + _install_constant_aliases(module, ep, constant_fqns))
    module._checker = checker
    # as on torch's unlifted module, where torch's own input checks read it (AdditionalInputs.verify)
    module.range_constraints = dict(ep.range_constraints)
    module.graphcap_assert_messages = explanations(ep)  # a failed runtime assert in the user's terms
    module._leaf_checks_in_hook = not any(n.op == "call_module" and n.target == "_guards_fn" for n in graph.nodes)
    module.register_forward_pre_hook(_check_structure, with_kwargs=True)
    return module


def _record_provenance(program_graph: torch.fx.Graph, copy_graph: torch.fx.Graph) -> None:
    """Each node of ``module()``'s graph names the program node it was made from
    (``meta["from_node"]``, torch.fx.traceback's provenance record), so a tool reading a graph
    derived from the module (a re-export, a compiled graph) can trace a node back to the program."""
    for old, new in zip(program_graph.nodes, copy_graph.nodes):
        new.meta["from_node"] = [fx_traceback.NodeSource(old, "ExportedProgram.module()",
                                                         fx_traceback.NodeSourceAction.CREATE)]


def _install_state(root: torch.nn.Module, ep: Any) -> None:
    """Parameters and buffers at their FQNs; constants as plain attributes.

    The module holds the program's own tensors, not copies, as torch.export's ``module()`` does:
    what a run updates is updated in ``ep.state_dict`` (and in the exported model, whose tensors
    the program holds), so programs exported from one model's methods share its state, as the
    methods do in eager, and a large cache the program writes is never held twice."""
    sig = ep.graph_signature
    # one tensor under several names (``self.alias = self.buf``, tied weights) is one object on the
    # module too, at every name, as on the exported model
    own: dict[int, torch.Tensor] = {}  # id of the program's tensor -> the module's object for it
    for spec in sig.input_specs:
        if spec.kind is InputKind.PARAMETER:
            value = ep.state_dict[spec.target]
            if id(value) not in own:
                own[id(value)] = value if isinstance(value, torch.nn.Parameter) else \
                    torch.nn.Parameter(value, requires_grad=value.requires_grad)
            _install(root, spec.target, own[id(value)])
        elif spec.kind is InputKind.BUFFER:
            value = _state_value(ep, spec)
            own.setdefault(id(value), value)
            _install(root, spec.target, own[id(value)], buffer=True, persistent=spec.persistent is not False)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            _install(root, spec.target, _constant_value(ep.constants[spec.target]))


def _state_value(ep: Any, spec: Any) -> Any:
    """The program's tensor for a parameter or buffer input (a non-persistent buffer is in ``constants``)."""
    store = ep.constants if spec.kind is InputKind.BUFFER and spec.persistent is False else ep.state_dict
    return store[spec.target]


def _install_constant_aliases(module: torch.nn.Module, ep: Any, installed: list[str]) -> list[str]:
    """The other names of a constant the program reads under one name (``self.foo`` and
    ``self.m2.foo`` holding one tensor: one placeholder, two entries of ``ep.constants``), at
    their own FQNs on the module and holding the same object, as on the exported model; a
    re-export of ``module()`` then finds every name again."""
    first = {id(ep.constants[fqn]): fqn for fqn in installed if fqn in ep.constants}
    aliases = []
    for fqn, value in ep.constants.items():
        if fqn not in installed and id(value) in first and _owner(module, fqn)[1] is None:
            _install(module, fqn, _fetch(module, first[id(value)]))
            aliases.append(fqn)
    return aliases


def _constant_value(value: Any) -> Any:
    """A constant that requires grad is detached: constants are not trained."""
    if isinstance(value, torch.Tensor) and value.requires_grad:
        return value.detach()
    return value


def _install(root: torch.nn.Module, fqn: str, value: Any, buffer: bool = False, persistent: bool = True) -> None:
    *path, leaf = fqn.split(".")
    mod = root
    for part in path:
        child = getattr(mod, part, None)
        if not isinstance(child, torch.nn.Module):
            child = torch.nn.Module()
            mod.add_module(part, child)
        mod = child
    if buffer:
        mod.register_buffer(leaf, value, persistent=persistent)
    elif isinstance(value, (torch.nn.Parameter, torch.nn.Module)):
        setattr(mod, leaf, value)
    else:
        mod.__dict__[leaf] = value


def _fetch(mod: torch.nn.Module, fqn: str) -> Any:
    for part in fqn.split("."):
        mod = getattr(mod, part)
    return mod


def _owner(root: torch.nn.Module, fqn: str) -> tuple[Any, Any, str]:
    *path, field = fqn.split(".")
    owner: Any = root
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return root, None, field
    return owner, getattr(owner, field, None), field
