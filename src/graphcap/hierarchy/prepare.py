"""The program's flat graph, copied and made ready to be cut into module calls.

Rewrites that do not change what the graph computes:

- *in-place results name their target.* ``add_ = b_buf.add_(1)`` returns
  ``b_buf`` itself; later readers of ``add_`` are made to read ``b_buf``.
  Then a buffer updated inside a submodule and read outside it is read as the
  buffer (each module reaches its own state), not as an extra output of the
  submodule, which would change the submodule's call signature.
- *a conversion that converts nothing is its input* (``x.to(x.dtype)`` returns ``x``):
  its readers read the input, so a call that made it shares nothing extra with the code after it.
- *updates listed as outputs become writes.* In the inference IR a buffer or
  input update is an output of the graph (``BUFFER_MUTATION``); it becomes an
  ``aten.copy_`` into the buffer or input right after the value is computed,
  inside the deepest call that can reach that buffer, so the update lands in
  the right submodule's buffer and happens in the module that made it.
  A buffer updated by several calls (a submodule called three times, each
  call adding to its buffer) has, in the inference IR, one value per call:
  each call reads the previous call's value and computes the next, and only
  the last is an output. Each call's last value is written to the buffer at
  the end of that call too, and the next call reads the buffer, as in eager;
  so a call reads and writes its module's state, and a preserved submodule
  can be swapped for an eager one that keeps its own state. Code after the
  call that reads the last value reads the buffer (or input) too.
"""
from __future__ import annotations

from typing import Any

import torch

from ..signature import MUTATION_OUTPUT_KINDS, InputKind, OutputKind
from ..torch_private.ops import schema_of


def write_parameter(param: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A program's new parameter value written back as eager's ``no_grad`` update did."""
    with torch.no_grad():
        return param.copy_(value)


def copy_graph(ep) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    output = graph.graph_copy(ep.graph, mapping)
    graph.output(output)
    for old, new in mapping.items():
        new.meta = dict(old.meta)
    return graph


def _returns_its_first_argument(node: torch.fx.Node) -> bool:
    schema = schema_of(node.target)
    if node.op != "call_function" or schema is None or not schema.arguments or len(schema.returns) != 1:
        return False
    written, returned = schema.arguments[0].alias_info, schema.returns[0].alias_info
    return bool(written is not None and written.is_write and returned is not None
                and returned.before_set == written.before_set)


def name_inplace_targets(graph: torch.fx.Graph) -> None:
    """Readers of an in-place result on a placeholder read the placeholder (see the module docstring)."""
    for node in graph.nodes:
        if not _returns_its_first_argument(node) or not node.args:
            continue
        base = node.args[0]
        if isinstance(base, torch.fx.Node) and base.op == "placeholder":
            node.replace_all_uses_with(base)


_CONVERSIONS = ("to.dtype", "to.device", "to.dtype_layout", "to.other")


def _returns_its_input(node: torch.fx.Node) -> bool:
    """An ``x.to(...)`` that converts nothing returns ``x`` itself (the same tensor object)."""
    if node.op != "call_function" or getattr(node.target, "__name__", None) not in _CONVERSIONS \
            or getattr(node.target, "namespace", None) != "aten" or node.kwargs.get("copy") \
            or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    out, src = node.meta.get("val"), node.args[0].meta.get("val")
    return isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and out.dtype == src.dtype \
        and out.device == src.device and out.layout == src.layout and out.shape == src.shape \
        and out.stride() == src.stride()


def read_no_op_conversions_as_their_input(graph: torch.fx.Graph) -> None:
    """Readers of a conversion that converts nothing read its input: it is the same tensor, and a
    call that made it (``a = x.to(torch.float32)`` on a float32 ``x``) does not then seem to pass
    a value of its own to code outside it."""
    for node in graph.nodes:
        if _returns_its_input(node):
            node.replace_all_uses_with(node.args[0])


def _stack_reaching(stack: dict, names: list[str]) -> dict:
    """The outer part of a module stack whose calls can all reach one of ``names``."""
    kept = {}
    for key, entry in stack.items():
        fqn = entry[0] if isinstance(entry, tuple) else ""
        if fqn and not any(n.startswith(fqn + ".") for n in names):
            break
        kept[key] = entry
    return kept


def writes_from_outputs(ep, graph: torch.fx.Graph, state_names: dict[torch.fx.Node, list[str]]) -> list[Any]:
    """Turn update outputs into in-graph writes; returns the user outputs (see module docstring)."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    by_target = {}
    for node, spec in zip(placeholders, ep.graph_signature.input_specs):
        by_target[(spec.kind is InputKind.USER_INPUT, spec.target if spec.kind is not InputKind.USER_INPUT
                   else spec.arg.name)] = node
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    values = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    user_values = []
    for value, spec in zip(values, ep.graph_signature.output_specs):
        if spec.kind not in MUTATION_OUTPUT_KINDS:
            user_values.append(value)
            continue
        dest = by_target.get((spec.kind is OutputKind.USER_INPUT_MUTATION, spec.target))
        if dest is None or value is dest or not isinstance(value, torch.fx.Node):
            continue
        write = write_parameter if spec.kind is OutputKind.PARAMETER_MUTATION else torch.ops.aten.copy_.default
        with graph.inserting_after(value):
            copy_node = graph.call_function(write, (dest, value))
        stack = value.meta.get("nn_module_stack") or {}
        if spec.kind is not OutputKind.USER_INPUT_MUTATION:
            stack = _stack_reaching(stack, state_names.get(dest, [spec.target]))
        copy_node.meta.update(val=value.meta.get("val"), nn_module_stack=dict(stack))
        _read_written_value_outside_as_target(value, dest, copy_node)
        if spec.kind is OutputKind.BUFFER_MUTATION:
            _write_versions_between_calls(graph, dest, value, state_names.get(dest, [spec.target]))
    output.args = (tuple(user_values),)
    _writes_in_graph(graph, state_names)
    return user_values


def _writes_in_graph(graph: torch.fx.Graph, state_names: dict[torch.fx.Node, list[str]]) -> None:
    """A buffer's new value written by the graph itself (the training IR writes a reassigned
    buffer, ``self.n = self.n + 1``, with a ``copy_`` at the end) is handled as an update
    output is: the write moves right after the value is computed, in the call that computed
    it, each call's last value is written at the end of that call, and code after the call
    reads the buffer. Left as it is when the buffer's old value (or another write) comes
    after the new value is computed: moving the write would change what that reads."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for write in [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.copy_.default]:
        dest, value = write.args[0], write.args[1]
        if not (isinstance(dest, torch.fx.Node) and dest in state_names and isinstance(value, torch.fx.Node)
                and value.op == "call_function") or write.users:
            continue
        if any(order[u] > order[value] for u in dest.users if u is not write):
            continue
        names = state_names[dest]
        value.append(write)
        write.meta["nn_module_stack"] = dict(_stack_reaching(value.meta.get("nn_module_stack") or {}, names))
        _read_written_value_outside_as_target(value, dest, write)
        _write_versions_between_calls(graph, dest, value, names)
        order = {n: i for i, n in enumerate(graph.nodes)}


def _read_written_value_outside_as_target(value: torch.fx.Node, dest: torch.fx.Node, write: torch.fx.Node) -> None:
    """Code outside the call that computed a buffer's (or input's) last value reads it as the
    buffer (the input) once the call has written it back, as eager code outside reads
    ``self.sub.buf`` after the call. Then the value is not an extra result of the call, and a
    preserved submodule keeps its signature: an eager replacement updates its own buffer, and
    the code after it reads that. The program's outputs keep the value itself: a returned
    tensor must not change when a later call writes the buffer again."""
    inside = _call_path(value)
    value.replace_all_uses_with(dest, delete_user_cb=lambda user: user is not write and user.op != "output"
                                and _call_path(user) != inside)


def _call_path(node: torch.fx.Node) -> tuple:
    return tuple((node.meta.get("nn_module_stack") or {}).keys())


def _version_chain(dest: torch.fx.Node, final: torch.fx.Node) -> list[torch.fx.Node]:
    """The buffer's values from its first update to ``final``, oldest first, or [] when the
    chain cannot be read. A functionalized update (``add_`` became ``add``, a write through a
    view became ``*_scatter``) takes the value it updates as its first argument, and keeps its
    shape and dtype; the chain follows first arguments back to the buffer's placeholder."""
    want = dest.meta.get("val")
    chain = []
    node = final
    while node is not dest:
        val = node.meta.get("val")
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node) \
                or not isinstance(val, torch.Tensor) or not isinstance(want, torch.Tensor) \
                or val.shape != want.shape or val.dtype != want.dtype:
            return []
        chain.append(node)
        node = node.args[0]
    return chain[::-1]


def _write_versions_between_calls(graph: torch.fx.Graph, dest: torch.fx.Node, final: torch.fx.Node,
                                  names: list[str]) -> None:
    """Write each call's last value of buffer ``dest`` back at the end of that call (see the
    module docstring). A value that is read after the next call has updated the buffer again is
    left as it is (writing it back would change what that reader sees)."""
    chain = _version_chain(dest, final)
    order = {n: i for i, n in enumerate(graph.nodes)}
    for value, successor in zip(chain, chain[1:]):
        if _call_path(value) == _call_path(successor):
            continue
        if any(order[u] > order[successor] for u in value.users):
            continue
        with graph.inserting_after(value):
            copy_node = graph.call_function(torch.ops.aten.copy_.default, (dest, value))
        copy_node.meta.update(val=value.meta.get("val"),
                              nn_module_stack=dict(_stack_reaching(value.meta.get("nn_module_stack") or {}, names)))
        value.replace_all_uses_with(dest, delete_user_cb=lambda user, copy_node=copy_node, value=value:
                                    user is not copy_node and _call_path(user) != _call_path(value))
