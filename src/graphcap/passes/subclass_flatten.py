"""Split tensor-subclass parameters and buffers into their inner tensors, for the inference IR.

The training IR may hold a traceable wrapper subclass (``TwoTensor``, a
quantized weight) as a parameter or buffer: its placeholder's value is the
subclass, and operators on it are recorded whole. The inference IR is plain
ATen on plain tensors, so before the retrace (:mod:`.decompose`) every such
input becomes one input per inner tensor, depth first through nested
subclasses, named as torch names them after it parametrizes the module
(``p2`` → ``parametrizations.p2.original0``, ``...original1``; placeholder
``p_parametrizations_p2_original0``); ``state_dict`` / ``constants`` follow.

The graph handed to the retrace rebuilds each subclass from its new inputs
(``__tensor_unflatten__``) with one Python call, where the subclass
placeholder was. Replaying the program on that rebuilt value runs the
subclass's ``__torch_dispatch__``, so the retrace records the ATen operators
it runs on the inner tensors, and reads of an inner tensor
(``export.access_subclass_inner_tensor``) return a tensor the retrace already
follows. The rebuild call itself leaves nothing in the new graph.

What the inference IR cannot express is refused before any tracing: a
subclass as a user input or a user output (torch has no calling convention
for them after decomposition either), a subclass passed to or returned by a
submodule whose call signature is preserved (that signature would name a
value the inference IR no longer has), or a subclass whose inner values are
not tensors.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import torch
import torch.fx

from ..errors import SubclassDecompositionError
from ..pytree import sanitize_name
from ..signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument, call_graph_of
from ..torch_private.dispatch import is_traceable_wrapper_subclass
from ..trace.naming.node_names import set_node_name

if TYPE_CHECKING:
    from ..program import ExportedProgram

_PREFIX = {InputKind.PARAMETER: "p_", InputKind.BUFFER: "b_", InputKind.CONSTANT_TENSOR: "c_"}


@dataclasses.dataclass(frozen=True)
class SubclassLayout:
    """How to rebuild one subclass value from its inner tensors, listed depth first.

    ``inner`` names each attribute ``__tensor_flatten__`` lists, with the
    layout of that attribute when it is a subclass itself (``None``: a plain
    tensor, one leaf).
    """

    cls: type
    inner: tuple[tuple[str, Optional["SubclassLayout"]], ...]
    meta: Any
    outer_size: tuple
    outer_stride: tuple

    @property
    def n_leaves(self) -> int:
        return sum(1 if sub is None else sub.n_leaves for _, sub in self.inner)

    def rebuild(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        leaf_iter = iter(leaves)
        value = self._build(leaf_iter)
        if next(leaf_iter, None) is not None:
            raise AssertionError(f"{self.cls.__name__} was given more inner tensors than it holds")
        return value

    def _build(self, leaves: Iterator[torch.Tensor]) -> torch.Tensor:
        inner = {name: next(leaves) if sub is None else sub._build(leaves) for name, sub in self.inner}
        return self.cls.__tensor_unflatten__(inner, self.meta, self.outer_size, self.outer_stride)


def split_subclass(value: torch.Tensor, where: str) -> tuple[SubclassLayout, list[torch.Tensor]]:
    """``value``'s layout and its plain inner tensors, depth first."""
    names, meta = value.__tensor_flatten__()
    inner: list[tuple[str, Optional[SubclassLayout]]] = []
    leaves: list[torch.Tensor] = []
    for name in names:
        item = getattr(value, name)
        if is_traceable_wrapper_subclass(item):
            sub, sub_leaves = split_subclass(item, where)
            inner.append((name, sub))
            leaves.extend(sub_leaves)
        elif isinstance(item, torch.Tensor):
            inner.append((name, None))
            leaves.append(item)
        else:
            raise SubclassDecompositionError(
                f"{where} is a {type(value).__name__} whose inner value {name!r} is a "
                f"{type(item).__name__}, not a tensor; the inference IR can only hold tensors.",
                where=where,
                fix="Keep the training-IR program (skip run_decompositions), or keep only tensors "
                    "among the attributes __tensor_flatten__ lists.")
    layout = SubclassLayout(type(value), tuple(inner), meta, tuple(value.size()), tuple(value.stride()))
    return layout, leaves


def unwrapped_target(target: str, index: int) -> str:
    """The FQN torch gives inner tensor ``index`` of the subclass at ``target`` (``a.w`` →
    ``a.parametrizations.w.original0``)."""
    owner, _, leaf = target.rpartition(".")
    return f"{owner + '.' if owner else ''}parametrizations.{leaf}.original{index}"


def flatten_subclass_state(ep: ExportedProgram) -> ExportedProgram:
    """``ep`` with every subclass parameter/buffer/constant split into plain inputs (``ep`` itself when none).

    The program returned is only for the retrace: its graph rebuilds the
    subclasses with a Python call, which the inference IR will not contain.
    """
    gm = ep.graph_module
    _refuse_subclass_outputs(gm)
    _refuse_preserved_calls_with_subclasses(ep)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = list(ep.graph_signature.input_specs)
    split_at = [i for i, p in enumerate(placeholders) if is_traceable_wrapper_subclass(p.meta.get("val"))]
    if not split_at:
        return ep
    _refuse_unsplittable(ep, placeholders, specs, split_at)

    graph = torch.fx.Graph()
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    out_value = graph.graph_copy(gm.graph, copies)
    old_output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    graph.output(out_value).meta = dict(old_output.meta)
    for old in placeholders:  # fx's copy suffixes an input named like a builtin (``input``)
        if copies[old].name != old.name:
            set_node_name(copies[old], old.name)
            copies[old].target = old.target

    taken = {n.name for n in gm.graph.nodes}
    state_dict = dict(ep.state_dict)
    constants = dict(ep.constants)
    new_specs: list[InputSpec] = []
    rebuilds: list[tuple[torch.fx.Node, list[torch.fx.Node], SubclassLayout]] = []
    for i, (old, spec) in enumerate(zip(placeholders, specs)):
        if i not in split_at:
            new_specs.append(spec)
            continue
        node = copies[old]
        layout, fake_leaves = split_subclass(old.meta["val"], f"graph input {old.name}")
        store = state_dict if _in_state_dict(spec) else constants
        real = store.pop(spec.target)
        real_layout, real_leaves = split_subclass(real, f"{spec.target!r}")
        if real_layout.n_leaves != layout.n_leaves:
            raise AssertionError(f"{spec.target}: the program's value and the stored value split differently")
        leaf_nodes = []
        for k, (fake, tensor) in enumerate(zip(fake_leaves, real_leaves)):
            target = unwrapped_target(spec.target, k)
            name = _free_name(_PREFIX[spec.kind] + sanitize_name(target).lower(), taken)
            with graph.inserting_before(node):
                leaf = graph.placeholder(name)
            leaf.meta.update({key: v for key, v in old.meta.items() if key not in ("val", "tensor_meta")})
            leaf.meta["val"] = fake
            leaf_nodes.append(leaf)
            store[target] = _stored_leaf(real, tensor)
            new_specs.append(InputSpec(spec.kind, TensorArgument(name), target, spec.persistent))
        rebuilds.append((node, leaf_nodes, layout))

    last_placeholder = [n for n in graph.nodes if n.op == "placeholder"][-1]
    for node, leaf_nodes, layout in rebuilds:
        with graph.inserting_after(last_placeholder):
            rebuilt = graph.call_function(_rebuild_function(layout), tuple(leaf_nodes))
        rebuilt.meta = dict(node.meta)
        node.replace_all_uses_with(rebuilt)
        graph.erase_node(node)

    new_gm = torch.fx.GraphModule(gm, graph)
    new_gm.meta.update(gm.meta)
    new_sig = ExportGraphSignature(new_specs, list(ep.graph_signature.output_specs))
    return ep._new_program(new_gm, new_sig, state_dict, ep.range_constraints, call_graph_of(ep),
                           ep.example_inputs, constants, verify=False)


def _in_state_dict(spec: InputSpec) -> bool:
    return spec.kind is InputKind.PARAMETER or (spec.kind is InputKind.BUFFER and spec.persistent is not False)


def _stored_leaf(original: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    """An inner tensor as state: a parameter's inner tensors are parameters that train like it did."""
    if isinstance(original, torch.nn.Parameter):
        return torch.nn.Parameter(leaf.detach(), requires_grad=original.requires_grad)
    return leaf


def _free_name(wanted: str, taken: set[str]) -> str:
    name, n = wanted, 0
    while name in taken:
        n += 1
        name = f"{wanted}_{n}"
    taken.add(name)
    return name


def _rebuild_function(layout: SubclassLayout):
    """A graph target that rebuilds one subclass value from its inner tensors."""

    def rebuild_subclass(*leaves: torch.Tensor) -> torch.Tensor:
        return layout.rebuild(leaves)

    rebuild_subclass.__qualname__ = f"rebuild_{layout.cls.__name__}"
    return rebuild_subclass


def _refuse_unsplittable(ep: ExportedProgram, placeholders: list[torch.fx.Node], specs: list[InputSpec],
                         split_at: list[int]) -> None:
    declared = {s.target for s in ep.graph_signature.output_specs if s.target is not None}
    for i in split_at:
        spec, node = specs[i], placeholders[i]
        if spec.kind is InputKind.USER_INPUT:
            raise SubclassDecompositionError(
                f"It looks like {node.name} is a tensor subclass ({type(node.meta['val']).__name__}) "
                f"passed as a user input; the inference IR takes plain tensors only, and a caller "
                f"could not pass the subclass's inner tensors in its place.",
                where=f"graph input {node.name}",
                fix="Keep the training-IR program (skip run_decompositions), or pass the inner "
                    "tensors as separate inputs and build the subclass inside forward.")
        if spec.kind not in _PREFIX or spec.target in declared or node.name in declared:
            raise SubclassDecompositionError(
                f"It looks like {node.name} is a tensor subclass held as {spec.kind.name} "
                f"{spec.target!r}, which run_decompositions cannot split into inner tensors.",
                where=f"graph input {node.name}",
                fix="Keep the training-IR program (skip run_decompositions).")


def _refuse_subclass_outputs(gm: torch.fx.GraphModule) -> None:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned: list[torch.fx.Node] = []
    torch.fx.node.map_arg(output.args, returned.append)
    for value in returned:
        if is_traceable_wrapper_subclass(value.meta.get("val")):
            raise SubclassDecompositionError(
                f"The program returns {value.name}, a tensor subclass "
                f"({type(value.meta['val']).__name__}); the inference IR returns plain tensors only, "
                f"and its callers would get the inner tensors instead of the value forward returns.",
                where=f"node {value.name}",
                fix="Keep the training-IR program (skip run_decompositions), or return its inner "
                    "tensors (the attributes its __tensor_flatten__ lists) from forward.")


def _refuse_preserved_calls_with_subclasses(ep: ExportedProgram) -> None:
    """A preserved submodule call (``preserve_module_call_signature``) that takes or returns a subclass is refused."""
    nodes = {n.name: n for n in ep.graph_module.graph.nodes}
    for entry in call_graph_of(ep):
        if not entry.fqn or entry.signature is None:
            continue
        for arg in [*entry.signature.inputs, *entry.signature.outputs]:
            node = nodes.get(getattr(arg, "name", None))
            if node is None or not is_traceable_wrapper_subclass(node.meta.get("val")):
                continue
            source = node
            # a dtype/device conversion at the call boundary names the value it converts
            while source.op == "call_function" and getattr(source.target, "overloadpacket", None) \
                    is torch.ops.aten.to and isinstance(source.args[0], torch.fx.Node):
                source = source.args[0]
            raise SubclassDecompositionError(
                f"It looks like {source.name} is a tensor subclass. The call of submodule "
                f"{entry.fqn!r}, whose signature is preserved, passes or returns it; the inference IR "
                f"splits subclasses into their inner tensors, so that signature cannot be kept.",
                where=f"module call {entry.fqn} (value {node.name})",
                fix=f"Drop {entry.fqn!r} from preserve_module_call_signature, or keep the training-IR "
                    f"program (skip run_decompositions).")
