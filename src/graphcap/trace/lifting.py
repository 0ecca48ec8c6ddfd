"""Turn a raw recording into the lifted graph and its signature.

After recording, the graph's placeholders are anonymous (``arg0_1``) and
tensor constants sit in ``get_attr`` nodes. Lifting:

1. drops constants nothing uses (``torch.tensor(3)`` computed and thrown
   away leaves a ``get_attr`` → ``lift_fresh_copy`` → ``detach_`` chain);
2. moves each remaining constant tensor into one placeholder placed after the
   buffers, whatever number of ``get_attr`` nodes read it. A tensor held by a
   module attribute is known under every FQN that reaches it (``foo`` and
   ``m2.foo`` when a parent keeps its child's tensor): the input is named
   after the first, and the program's constants list all of them. A tensor
   made in ``forward`` becomes ``lifted_tensor_<i>`` of the module that made
   it;
3. names every node as torch does (:mod:`graphcap.trace.naming.node_names`);
4. keeps every in-place write in the graph, as torch's training IR does: a
   buffer or input updated in place (``self.buf.add_(1)``, ``x[:, 0].add_(1)``,
   batch norm's running statistics) has no output of its own, and a buffer
   forward gave a new tensor (``self.buf = self.buf + 1``) becomes a ``copy_``
   of the new value into the buffer's placeholder at the end of the graph.
   ``run_decompositions`` finds these writes again by functionalization and
   turns them into ``BUFFER_MUTATION`` / ``USER_INPUT_MUTATION`` outputs;
5. writes the graph signature that describes all of it, and marks the
   placeholders' fake values with the ``requires_grad`` of the real tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch
import torch.fx

from ..errors import FakeConstantError, UnsupportedError
from ..signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
)
from ..torch_private import fx as fx_private
from ..torch_private import pytree
from ..torch_private.fake import FakeTensor, FakeTensorMode
from .naming import node_names
from .naming.owed_names import apply_owed_names

aten = torch.ops.aten


@dataclass
class StateLayout:
    """What the first placeholders of a recording stand for."""

    parameters: list[str]
    buffers: list[str]
    non_persistent: set[str]
    # id(tensor attribute of a module) → every FQN that reaches it, first found first
    constant_attrs: dict[int, list[str]]
    # FQN → real tensor, for the requires_grad of the placeholders
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # FQN → torch.Generator attribute of a module, to name it when an operator reads it
    generator_attrs: dict[str, torch.Generator] = field(default_factory=dict)


@dataclass
class Lifted:
    graph_module: torch.fx.GraphModule
    signature: ExportGraphSignature
    constants: dict[str, torch.Tensor]


@dataclass
class _Constant:
    placeholder: torch.fx.Node
    target: str
    value: torch.Tensor
    fqns: list[str]


def argument_for(node_or_value: Any, name_hint: str = "") -> Any:
    """The signature argument describing a graph value (a node or a constant)."""
    if not isinstance(node_or_value, torch.fx.Node):
        return ConstantArgument(name=name_hint, value=node_or_value)
    val = node_or_value.meta.get("val")
    if isinstance(val, torch.SymInt):
        return SymIntArgument(node_or_value.name)
    if isinstance(val, torch.SymFloat):
        return SymFloatArgument(node_or_value.name)
    if isinstance(val, torch.SymBool):
        return SymBoolArgument(node_or_value.name)
    if isinstance(val, torch.Tensor) or val is None:
        return TensorArgument(node_or_value.name)
    return ConstantArgument(name=node_or_value.name, value=val)


# Operators that only turn a constant into a fresh tensor: a chain of them
# ending unused means the constant is unused.
_FRESHENING = {aten.lift_fresh.default, aten.lift_fresh_copy.default, aten.detach.default,
               aten.detach_.default}


def _unused_chain(node: torch.fx.Node) -> Optional[list[torch.fx.Node]]:
    """``node`` and the freshening nodes after it, users first, if none of them is used."""
    chain = []
    for user in node.users:
        if user.op != "call_function" or user.target not in _FRESHENING:
            return None
        rest = _unused_chain(user)
        if rest is None:
            return None
        chain.extend(rest)
    return chain + [node]


def _module_of(node: torch.fx.Node) -> str:
    """FQN of the innermost module the node was recorded in ('' for the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    return list(stack.values())[-1][0] or ""


def _refuse_fake_constant(node: torch.fx.Node, name: str) -> None:
    """A fake tensor the recorder did not track reached an operator: it would be baked in as a
    constant without data, and the program would compute garbage."""
    where = node.meta.get("stack_trace") or next(
        (u.meta["stack_trace"] for u in node.users if u.meta.get("stack_trace")), None)
    raise FakeConstantError(
        f"A tensor of the trace that the recorder could not follow would become a constant of the "
        f"program ({name}); it has no data, so the program would compute garbage. This happens "
        f"when forward reaches a parameter or buffer through `.data` or another untraceable path.",
        where=" ".join(line.strip() for line in where.strip().splitlines()[-2:]) if where
        else f"graph node {node.name}",
        fix="Use the tensor itself instead of `.data`; to update a parameter or buffer in place, "
            "write `with torch.no_grad(): self.p.copy_(new_value)`.")


def _refuse_opaque_constant(node: torch.fx.Node, value: Any, origin: Optional[str] = None) -> None:
    """An object that is neither a tensor nor a subgraph reached an operator (a ``torch.Generator``
    made in forward, held by the module or passed in; a script object): graphcap's programs carry
    tensors only, so it would be left behind as an attribute no runtime, save or lowering can
    read. ``origin`` says where the object came from (``the input g``, ``the attribute self.g``)
    when graphcap found it among the inputs or the module's attributes."""
    where = next((u.meta["stack_trace"] for u in node.users if u.meta.get("stack_trace")), None)
    kind = type(value).__name__
    if isinstance(value, torch.Generator):
        source = origin or "a torch.Generator it made"
        what = (f"forward passes {source} ({node.name}) to a random operator; an exported program "
                f"cannot hold a generator object or take one as an input, and its random operators "
                f"draw from torch's default generator when the program runs.")
        fix = ("Drop `generator=` to draw fresh random values on each call (as the program's other "
               "random operators do; `torch.manual_seed(s)` before calling the program makes them "
               "repeatable); for the same values on every call, make the tensor once "
               "outside forward and register it as a buffer "
               "(`self.register_buffer('noise', torch.rand(shape, generator=g))`) or pass it in.")
    else:
        what = (f"forward passes an object of type {kind} ({node.name}) to an operator; graphcap's "
                f"programs hold tensors only, not script or opaque objects.")
        fix = "Pass the tensors the object holds instead, or keep the object out of forward."
    raise UnsupportedError(
        what, where=" ".join(line.strip() for line in where.strip().splitlines()[-2:]) if where
        else f"graph node {node.name}", fix=fix)


def _generator_origin(value: Any, inputs: dict[str, Any], layout: StateLayout) -> Optional[str]:
    """Which input or module attribute the generator an operator read is: the recorder holds a copy
    of the user's generator, found again by its device and state."""
    if not isinstance(value, torch.Generator):
        return None

    def same(other: torch.Generator) -> bool:
        return other is value or (other.device == value.device
                                  and torch.equal(other.get_state(), value.get_state()))
    for name, gen in inputs.items():
        if same(gen):
            return f"the input {name}"
    for fqn, gen in layout.generator_attrs.items():
        if same(gen):
            return f"the attribute self.{fqn}"
    return None


def _lift_constants(gm: torch.fx.GraphModule, first_user_input: Optional[torch.fx.Node],
                    layout: StateLayout, fake_mode: FakeTensorMode,
                    taken_targets: set[str], state_inputs: dict[int, torch.fx.Node],
                    input_objects: Optional[dict[str, Any]] = None) -> list[_Constant]:
    """Replace tensor ``get_attr`` nodes by placeholders, one per distinct tensor.

    A "constant" that is a parameter or buffer of the module itself (the same tensor object,
    reached through another object that holds it: transformers' static cache keeps the cache
    tensors it also registers as buffers) is that parameter's or buffer's input: its reads and
    in-place writes are the state's, not a copy's (``state_inputs``: tensor id -> placeholder).
    """
    lifted: dict[int, _Constant] = {}
    read_targets: set[str] = set()
    anonymous = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target)
        if not isinstance(value, torch.Tensor):
            # a TreeSpec is structure (flat_apply's specs), a module a subgraph: both stay
            if not isinstance(value, (torch.nn.Module, pytree.TreeSpec)) and node.users:
                _refuse_opaque_constant(node, value, _generator_origin(value, input_objects or {}, layout))
            continue  # submodules of control-flow operators stay as they are
        read_targets.add(node.target)
        unused = _unused_chain(node)
        if unused is not None:
            for dead in unused:
                gm.graph.erase_node(dead)
            continue
        key = id(value)  # the attribute's own tensor, the one the module's FQNs name
        if key in state_inputs:
            node.replace_all_uses_with(state_inputs[key])
            gm.graph.erase_node(node)
            continue
        if isinstance(value, torch.nn.Parameter):  # a Parameter never registered: a constant
            value = value.data
        constant = lifted.get(key)
        if constant is None:
            fqns = list(layout.constant_attrs.get(key, ()))
            if not fqns:
                prefix = _module_of(node)
                while True:
                    name = f"lifted_tensor_{anonymous}"
                    anonymous += 1
                    target = f"{prefix}.{name}" if prefix else name
                    if target not in taken_targets:
                        break
                fqns = [target]
            if isinstance(value, FakeTensor) and value.fake_mode is fake_mode:  # the user's own fakes are fine
                _refuse_fake_constant(node, fqns[0])
            taken_targets.update(fqns)
            insert_before = first_user_input or next(n for n in gm.graph.nodes if n.op != "placeholder")
            with gm.graph.inserting_before(insert_before):
                ph = gm.graph.placeholder("c_" + node_names.graph_name(fqns[0].rsplit(".", 1)[-1]))
            fake = fake_mode.from_tensor(value, static_shapes=True)
            ph.meta["val"] = fake
            constant = lifted[key] = _Constant(ph, fqns[0], value, fqns)
        node.replace_all_uses_with(constant.placeholder)
        gm.graph.erase_node(node)
    for target in read_targets:  # after the loop: several get_attr nodes may read one attribute
        if hasattr(gm, target):
            delattr(gm, target)
    return list(lifted.values())


def _mark_requires_grad(node: torch.fx.Node, real: Any) -> None:
    """The placeholder's fake value says whether the real tensor requires grad."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and isinstance(real, torch.Tensor) and val.is_leaf \
            and val.requires_grad != real.requires_grad:
        val.requires_grad_(real.requires_grad)


def _copy_of(value: torch.fx.Node, placeholder: torch.fx.Node) -> torch.fx.Node:
    """A clone of a buffer's old tensor, for a program that returns it and then replaces it."""
    output_node = next(n for n in reversed(placeholder.graph.nodes) if n.op == "output")
    with placeholder.graph.inserting_before(output_node):
        clone = placeholder.graph.create_node("call_function", aten.clone.default, (value,), name="clone")
    clone.meta["val"] = value.meta.get("val")
    # its source: the user's line that replaces the buffer (the other users of the old value),
    # recorded as none when the program only returns it
    writer = next((u for u in value.users if u is not clone and u.meta.get("stack_trace")), None)
    clone.meta["stack_trace"] = writer.meta["stack_trace"] if writer is not None else None
    if writer is not None and writer.meta.get("nn_module_stack"):
        clone.meta["nn_module_stack"] = writer.meta["nn_module_stack"]
    return clone


def _root_module_stack(graph: torch.fx.Graph) -> dict:
    """The outermost entry of any node's module stack: where a write with no source of its own happened."""
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            key, value = next(iter(stack.items()))
            return {key: value}
    return {}


def _write_back(graph: torch.fx.Graph, buffer: torch.fx.Node, value: Any) -> torch.fx.Node:
    """``copy_`` the new tensor of a reassigned buffer into the buffer, last thing before returning.

    This is how torch's training IR records ``self.buf = new``: the graph
    writes the buffer in place, and the signature lists no output for it.
    """
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    with graph.inserting_before(output_node):
        write = graph.create_node("call_function", aten.copy_.default, (buffer, value), name="copy__default")
    source = value.meta if isinstance(value, torch.fx.Node) else {}
    write.meta["val"] = buffer.meta.get("val")
    write.meta["nn_module_stack"] = dict(source.get("nn_module_stack") or _root_module_stack(graph))
    write.meta["stack_trace"] = source.get("stack_trace")  # the line that computed the new value (or none)
    if source.get("torch_fn") is not None:
        write.meta["torch_fn"] = source["torch_fn"]
    return write


def lift(gm: torch.fx.GraphModule, layout: StateLayout, user_input_names: list[str],
         user_input_values: list[Any], fake_mode: FakeTensorMode,
         reassigned_buffers: Sequence[str] = ()) -> Lifted:
    """Name, lift and describe ``gm`` in place; see the module docstring.

    ``reassigned_buffers`` name the buffers forward gave a new tensor; the
    recording returns their new values after the user outputs. Placeholders
    written in place need no output in the training IR: the writes are in the
    graph (``run_decompositions`` turns them into mutation outputs).
    """
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    n_params, n_buffers = len(layout.parameters), len(layout.buffers)
    n_state = n_params + n_buffers
    user_nodes = placeholders[n_state:]

    taken_targets = set(layout.parameters) | set(layout.buffers)
    state_inputs: dict[int, torch.fx.Node] = {}
    for node, fqn in zip(placeholders[:n_state], [*layout.parameters, *layout.buffers]):
        if fqn in layout.tensors:
            state_inputs.setdefault(id(layout.tensors[fqn]), node)
    input_objects = {n: v for n, v in zip(user_input_names, user_input_values) if isinstance(v, torch.Generator)}
    constants = _lift_constants(gm, user_nodes[0] if user_nodes else None, layout, fake_mode, taken_targets,
                                state_inputs, input_objects)

    input_specs: list[InputSpec] = []
    wanted_names: list[str] = []
    for node, fqn in zip(placeholders[:n_params], layout.parameters):
        wanted_names.append("p_" + fqn)
        input_specs.append(InputSpec(InputKind.PARAMETER, TensorArgument(""), fqn))
        _mark_requires_grad(node, layout.tensors.get(fqn))
    for node, fqn in zip(placeholders[n_params:n_state], layout.buffers):
        wanted_names.append("b_" + fqn)
        input_specs.append(InputSpec(InputKind.BUFFER, TensorArgument(""), fqn,
                                     persistent=fqn not in layout.non_persistent))
        _mark_requires_grad(node, layout.tensors.get(fqn))
    for constant in constants:
        wanted_names.append("c_" + constant.target)
        input_specs.append(InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(""), constant.target))
        _mark_requires_grad(constant.placeholder, constant.value)
    first_user = len(input_specs)
    for node, name, value in zip(user_nodes, user_input_names, user_input_values):
        wanted_names.append(name)
        if isinstance(value, torch.Tensor) or isinstance(node.meta.get("val"), torch.SymInt):
            arg = argument_for(node)  # a tensor, or an int the spec made dynamic (a SymInt input)
            _mark_requires_grad(node, value)
        else:  # a Python value the program is specialized on
            node.meta["val"] = value
            arg = ConstantArgument("", value)
        input_specs.append(InputSpec(InputKind.USER_INPUT, arg))

    all_placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    owed = [(node, node_names.graph_name(name)) for node, name in zip(all_placeholders, wanted_names)]
    apply_owed_names(graph, owed[first_user:] + owed[:first_user])  # user inputs are served first
    for spec, node in zip(input_specs, all_placeholders):
        spec.arg = type(spec.arg)(node.name) if not isinstance(spec.arg, ConstantArgument) \
            else ConstantArgument(node.name, spec.arg.value)

    # outputs: what the user returned. In-place writes to buffers and inputs stay in the graph;
    # a reassigned buffer gets its new value copied in (the recording returns those new values
    # after the user outputs).
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    user_values = list(output_node.args[0])
    new_buffer_values = {}
    if reassigned_buffers:
        new_buffer_values = dict(zip(reassigned_buffers, user_values[-len(reassigned_buffers):]))
        user_values = user_values[:-len(reassigned_buffers)]
    buffer_nodes = dict(zip(layout.buffers, placeholders[n_params:n_state]))
    for fqn, value in new_buffer_values.items():
        node = buffer_nodes[fqn]
        if value is node:
            continue  # given back its own tensor: nothing changed
        # the old tensor, if returned, keeps its value (as in eager): copy it before the write
        user_values = [_copy_of(v, node) if v is node else v for v in user_values]
        _write_back(graph, node, value)
    output_specs = [OutputSpec(OutputKind.USER_OUTPUT, argument_for(value)) for value in user_values]
    output_node.args = (tuple(user_values),)

    graph.lint()
    # the passes after lifting edit the graph again: its code is generated once, when the program
    # is made (capture/non_strict.py calls generate_code)
    gm = fx_private.graph_module_with_code_deferred(gm, graph, class_name="GraphModule")
    program_constants = {fqn: c.value for c in constants for fqn in c.fqns}
    return Lifted(gm, ExportGraphSignature(input_specs, output_specs), program_constants)


def sync_output_specs(gm: torch.fx.GraphModule, signature: ExportGraphSignature) -> None:
    """Point each output spec at the value the output node returns now.

    Passes that run after lifting (runtime-assert insertion re-creates the
    ``sym_size`` nodes it deduplicates) may replace an output value by an
    equivalent node; kinds and targets stay, the argument follows the graph.
    """
    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    for spec, value in zip(signature.output_specs, output_node.args[0]):
        if isinstance(value, torch.fx.Node) and getattr(spec.arg, "name", None) != value.name:
            spec.arg = argument_for(value)
