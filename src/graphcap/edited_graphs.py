"""A graph the user edited, made a well-formed program again before it is verified.

Users (and torch-style passes) edit a program's graph by hand and rebuild the
program (``ep._update(gm, signature)``, or ``graphcap.from_torch`` of a torch
program they rebuilt). Their new nodes often lack what graphcap's own stages
always record: an ``operator.getitem`` added to reach one result of a
multi-output operator has no ``val``, no ``stack_trace``, no
``nn_module_stack``; and two ``getitem`` nodes may read the same result.

:func:`normalize_edited_graph` fills that in, derived from the nodes the new
ones compute from, never invented:

- ``val`` of a ``getitem`` is the element of its source's value; of an
  operator, its fake result on its inputs' values (left out if that fails:
  the verifier then names the node);
- ``stack_trace``, ``nn_module_stack`` and ``source_fn_stack`` are those of
  the node it reads (a ``getitem``'s source, else its first input that has
  them); a node that reads none has no user line (``stack_trace`` None) and
  runs in the root module's forward;
- ``getitem`` nodes reading the same element of the same node become one
  (the signature and the module call graph follow the kept node's name);
- a placeholder fx's copy renamed (``copy.deepcopy(ep.graph_module)`` suffixes
  an input named like a builtin: ``input`` becomes ``input_1``) gets back the
  name its input spec gives it.

Only rebuilt programs pass through here (and, for the source metadata alone,
a program whose graph was edited in place before ``ep.validate()``,
:func:`fill_source_metadata`). A program graphcap's own stages build is
verified as it is when it is constructed: a node without metadata there is a
graphcap bug that the verifier must name.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from .shape_env_copies import fake_mode_of_graph
from .torch_private import pytree
from .torch_private.ops import OpOverload
from .trace.naming.node_names import set_node_name

_SOURCE_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack")


def normalize_edited_graph(graph_module: torch.fx.GraphModule, graph_signature: Any,
                           module_call_graph: list, *, recompile: bool = True) -> None:
    """Fill in missing metadata and merge duplicate ``getitem`` nodes, in place (see the module
    docstring). ``recompile=False``: regenerate the code only where a merge changed the graph
    (a program's own graph, normalised before a pass, keeps its code)."""
    merged = _restore_copied_input_names(graph_module, graph_signature)
    for gm in graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            merged |= _merge_duplicate_getitems(gm, graph_signature, module_call_graph, top=gm is graph_module)
    root = _root_entry(graph_module)
    for gm in graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            _fill_metadata(gm, root)
    if merged:  # metadata alone does not change the code
        for gm in graph_module.modules():
            if isinstance(gm, torch.fx.GraphModule):
                gm.recompile()
    elif recompile:
        graph_module.recompile()


def _restore_copied_input_names(gm: torch.fx.GraphModule, signature: Any) -> bool:
    """Give back its spec's name to each placeholder that fx's copy suffixed (``input_1`` where the
    spec says ``input`` and no node is called ``input``); whether any was renamed."""
    taken = {node.name for node in gm.graph.nodes}
    renamed = False
    for node, spec in zip(gm.graph.find_nodes(op="placeholder"), signature.input_specs):
        name = getattr(spec.arg, "name", None)
        if not name or node.name == name or name in taken:
            continue
        stem, _, suffix = node.name.rpartition("_")
        if stem == name and suffix.isdigit():
            set_node_name(node, name)
            node.target = name
            taken.add(name)
            renamed = True
    return renamed


def fill_source_metadata(graph_module: torch.fx.GraphModule) -> None:
    """Give each operator node that lacks them the ``stack_trace``, ``nn_module_stack`` and
    ``source_fn_stack`` of the node it reads (see the module docstring), in place; nothing else
    (no ``val``, no merge, no new code). What ``ep.validate()`` does first: a program was verified
    as graphcap built it, so an operator node without them now is one a user or a pass added."""
    root = _root_entry(graph_module)
    for gm in graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            _fill_metadata(gm, root, values=False)


def _merge_duplicate_getitems(gm: torch.fx.GraphModule, signature: Any, call_graph: list, top: bool) -> bool:
    """Whether any ``getitem`` was merged into another."""
    seen: dict[tuple, torch.fx.Node] = {}
    merged = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not operator.getitem or len(node.args) != 2 \
                or not isinstance(node.args[0], torch.fx.Node) or not isinstance(node.args[1], int):
            continue
        key = (node.args[0], node.args[1])
        kept = seen.setdefault(key, node)
        if kept is node:
            continue
        if top:
            signature.replace_all_uses(node.name, kept.name)
            for entry in call_graph:
                if entry.signature is not None:
                    entry.signature.replace_all_uses_with(node, kept)
        node.replace_all_uses_with(kept)
        gm.graph.erase_node(node)
        merged = True
    return merged


def _root_entry(gm: torch.fx.GraphModule) -> Any:
    """The root module's ``nn_module_stack`` entry, if the program was a module's."""
    for node in gm.graph.nodes:
        for key, entry in (node.meta.get("nn_module_stack") or {}).items():
            if isinstance(entry, tuple) and entry[0] == "":
                return key, entry
    return None


def _value_of(node: torch.fx.Node, fake_mode: Any) -> Any:
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        whole = node.args[0].meta.get("val")
        index = node.args[1]
        if isinstance(whole, (list, tuple)) and isinstance(index, int) and -len(whole) <= index < len(whole):
            return whole[index]
        raise LookupError
    if fake_mode is None or not isinstance(node.target, OpOverload):
        raise LookupError
    missing = [a for a in node.all_input_nodes if "val" not in a.meta]
    if missing:
        raise LookupError
    args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda a: a.meta["val"], (node.args, node.kwargs))
    with fake_mode:
        return node.target(*args, **kwargs)


def _fill_metadata(gm: torch.fx.GraphModule, root: Any, values: bool = True) -> None:
    fake_mode = fake_mode_of_graph(gm) if values else None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if values and "val" not in node.meta:
            try:
                node.meta["val"] = _value_of(node, fake_mode)
            except Exception:
                pass  # left without: the verifier names the node
        if all(k in node.meta for k in _SOURCE_KEYS):
            continue
        first = node.args[0] if node.target is operator.getitem and node.args else None
        donors = [first] if isinstance(first, torch.fx.Node) else []
        donors += [a for a in node.all_input_nodes if a.op == "call_function"]
        donor = next((d for d in donors if all(k in d.meta for k in _SOURCE_KEYS)), None)
        if donor is not None:
            for key in _SOURCE_KEYS:
                node.meta.setdefault(key, donor.meta[key] if key == "stack_trace" else
                                     type(donor.meta[key])(donor.meta[key]) if donor.meta[key] is not None
                                     else None)
            continue
        node.meta.setdefault("stack_trace", None)
        node.meta.setdefault("nn_module_stack", {root[0]: root[1]} if root is not None else {})
        node.meta.setdefault("source_fn_stack", [(node.name, str(node.target))])
