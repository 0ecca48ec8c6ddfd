"""Turn a raw recording into the lifted graph and its signature.

After recording, the graph's placeholders are anonymous (``arg0_1``) and
tensor constants sit in ``get_attr`` nodes. Lifting:

1. moves each constant tensor into a placeholder named ``c_<name>`` placed
   after the buffers (module attributes keep their attribute path as name;
   tensors made in forward become ``lifted_tensor_<i>``);
2. names every placeholder: ``p_<fqn>``, ``b_<fqn>``, then the user inputs by
   argument name and pytree path;
3. adds one output per mutated buffer or user input, before the user outputs;
4. writes the graph signature that describes all of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from ..errors import UnsupportedError
from ..pytree import sanitize_name
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind,
                         OutputSpec, SymBoolArgument, SymFloatArgument, SymIntArgument,
                         TensorArgument)


@dataclass
class StateLayout:
    """What the first placeholders of a recording stand for."""

    parameters: list[str]
    buffers: list[str]
    non_persistent: set[str]
    constant_attrs: dict[int, str]  # id(tensor attribute of a module) → its path


@dataclass
class Lifted:
    graph_module: torch.fx.GraphModule
    signature: ExportGraphSignature
    constants: dict[str, torch.Tensor]


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


def _name(node: torch.fx.Node, name: str) -> None:
    """Rename a placeholder; its target is the parameter name in generated code."""
    node._rename(sanitize_name(name.replace(".", "_")))
    node.target = node.name


def _lift_constants(gm: torch.fx.GraphModule, first_user_input: Optional[torch.fx.Node],
                    layout: StateLayout, fake_mode: FakeTensorMode) -> list[tuple[torch.fx.Node, str, torch.Tensor]]:
    """Replace ``get_attr`` constants by placeholders; returns (node, target, tensor)."""
    lifted: dict[int, tuple[torch.fx.Node, str, torch.Tensor]] = {}
    anonymous = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target)
        if not isinstance(value, torch.Tensor):
            continue  # submodules of control-flow operators stay as they are
        if id(value) not in lifted:
            target = layout.constant_attrs.get(id(value))
            if target is None:
                target = f"lifted_tensor_{anonymous}"
                anonymous += 1
            insert_before = first_user_input or next(n for n in gm.graph.nodes if n.op != "placeholder")
            with gm.graph.inserting_before(insert_before):
                ph = gm.graph.placeholder(target)
            ph.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
            lifted[id(value)] = (ph, target, value)
        node.replace_all_uses_with(lifted[id(value)][0])
        gm.graph.erase_node(node)
        delattr(gm, node.target)
    return list(lifted.values())


def lift(gm: torch.fx.GraphModule, layout: StateLayout, user_input_names: list[str],
         user_input_values: list[Any], mutated: set[int], fake_mode: FakeTensorMode) -> Lifted:
    """Name, lift and describe ``gm`` in place; see the module docstring."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    n_params, n_buffers = len(layout.parameters), len(layout.buffers)
    n_state = n_params + n_buffers
    user_nodes = placeholders[n_state:]

    constants = _lift_constants(gm, user_nodes[0] if user_nodes else None, layout, fake_mode)

    # names: p_/b_/c_ prefixes, then user inputs by argument path
    input_specs: list[InputSpec] = []
    for node, fqn in zip(placeholders[:n_params], layout.parameters):
        _name(node, "p_" + fqn)
        input_specs.append(InputSpec(InputKind.PARAMETER, TensorArgument(node.name), fqn))
    for node, fqn in zip(placeholders[n_params:n_state], layout.buffers):
        _name(node, "b_" + fqn)
        input_specs.append(InputSpec(InputKind.BUFFER, TensorArgument(node.name), fqn,
                                     persistent=fqn not in layout.non_persistent))
    for node, target, _ in constants:
        _name(node, "c_" + target)
        input_specs.append(InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(node.name), target))
    for node, name, value in zip(user_nodes, user_input_names, user_input_values):
        _name(node, name)
        if isinstance(value, torch.Tensor) or isinstance(node.meta.get("val"), torch.SymInt):
            arg = argument_for(node)  # a tensor, or an int the spec made dynamic (a SymInt input)
        else:  # a Python value the program is specialized on
            node.meta["val"] = value
            arg = ConstantArgument(node.name, value)
        input_specs.append(InputSpec(InputKind.USER_INPUT, arg))

    # outputs: mutations first, then what the user returned
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    user_values = list(output_node.args[0])
    output_specs: list[OutputSpec] = []
    mutation_values = []
    for idx in sorted(mutated):
        node = placeholders[idx]
        if idx < n_params:
            raise UnsupportedError(
                f"The program writes in place to parameter {layout.parameters[idx]!r}.",
                where=f"graph input {node.name}",
                fix="Parameters are inputs of an exported program and may not change. Keep the "
                    "state in a buffer (register_buffer) if it has to be updated in forward.")
        if idx < n_state:
            output_specs.append(OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(node.name),
                                           layout.buffers[idx - n_params]))
        else:
            output_specs.append(OutputSpec(OutputKind.USER_INPUT_MUTATION, TensorArgument(node.name),
                                           node.name))
        mutation_values.append(node)
    for value in user_values:
        output_specs.append(OutputSpec(OutputKind.USER_OUTPUT, argument_for(value)))
    output_node.args = (tuple(mutation_values + user_values),)

    graph.lint()
    gm = torch.fx.GraphModule(gm, graph, class_name="GraphModule")
    return Lifted(gm, ExportGraphSignature(input_specs, output_specs),
                  {target: value for _, target, value in constants})


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
