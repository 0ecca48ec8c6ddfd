"""Keep grad-mode and autocast regions of ``forward`` in the program.

The pre-dispatch recorder writes ``set_grad_enabled(mode)`` (torch's C switch) for
every grad-mode switch (``torch.no_grad()``, ``enable_grad()``,
``set_grad_enabled()``) and an ``_enter_autocast(...)`` / ``_exit_autocast``
pair for every ``torch.autocast`` block. Left as they are, the switches are
absolute: a program traced with grad enabled would turn grad back on at the
end of a ``no_grad`` block even when it is run under ``torch.no_grad()``.

This pass moves each region into a submodule called through a higher-order
operator that sets the mode on entry and restores the caller's on exit, as
torch.export's training IR does:

* ``wrap_with_autocast(device, dtype, enabled, cache, submod, *inputs)`` for
  every outermost autocast block (its inside is processed the same way);
* ``wrap_with_set_grad_enabled(mode, submod, *inputs)`` for every stretch of
  nodes that ran in a grad mode other than the one the trace started in.
  Stretches in the starting mode are left inline, so they follow the mode the
  program is called in.

The switch nodes themselves disappear. Submodules, calls and their outputs
are named and ordered as torch.export names them
(:mod:`graphcap.trace.naming.region_names`). Tensor constants (``get_attr``)
stay in the enclosing graph and are passed in, so lifting still sees them.
"""
from __future__ import annotations

import copy
import operator
from typing import Optional

import torch
import torch.fx

from ...torch_private.dispatch import set_grad_enabled as _SET_GRAD
from ...torch_private.fx import autocast_markers, rename_node, rename_node_reusing
from ...torch_private.higher_order import region_wrappers
from ..naming.region_names import RegionNames, cut_node, name_regions

wrap_with_set_grad_enabled, wrap_with_autocast = region_wrappers()
_ENTER_AUTOCAST, _EXIT_AUTOCAST = autocast_markers()


def _is_grad_switch(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is _SET_GRAD


def _is_enter(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is _ENTER_AUTOCAST


def _is_exit(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is _EXIT_AUTOCAST


def _holds_tensor_constant(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    return node.op == "get_attr" and isinstance(getattr(gm, node.target, None), torch.Tensor)


def _subgraph_at(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Optional[torch.fx.GraphModule]:
    if node.op == "get_attr":
        value = getattr(gm, node.target, None)
        if isinstance(value, torch.fx.GraphModule):
            return value
    return None


def _fresh_name(gm: torch.fx.GraphModule, prefix: str) -> str:
    i = 0
    while hasattr(gm, f"{prefix}_{i}"):
        i += 1
    return f"{prefix}_{i}"


def _keep_name(graph: torch.fx.Graph, node: torch.fx.Node, name: str) -> None:
    """Give ``node`` a name an erased node had (fx never frees names by itself)."""
    rename_node_reusing(graph, node, name)


def extract_region(gm: torch.fx.GraphModule, region: list[torch.fx.Node], hop, leading_args: tuple,
                   anchor: torch.fx.Node, names: Optional[RegionNames] = None) -> Optional[torch.fx.Node]:
    """Move ``region`` (nodes of ``gm``, in graph order) into a new submodule.

    The nodes are replaced by ``hop(*leading_args, submod, *inputs)`` placed
    after the last of them, then one ``getitem`` per value used outside the
    region. As in torch.export, a region with one such value gives the call
    that value's name (its ``getitem`` is a fresh one); with several, each
    ``getitem`` is named like the node it replaces. ``anchor`` gives the call
    its source metadata. Returns the call node (None for an empty region).
    """
    graph = gm.graph
    members = [n for n in region if not _holds_tensor_constant(gm, n)]
    if not members:
        return None
    inside = set(members)
    inputs: list[torch.fx.Node] = []
    for n in members:
        for inp in n.all_input_nodes:
            if inp not in inside and inp not in inputs:
                inputs.append(inp)
    outputs = [n for n in members if any(u not in inside for u in n.users)]
    if names is not None:
        outputs = names.order(outputs)

    sub_graph = torch.fx.Graph()
    holder = torch.nn.Module()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for inp in inputs:
        ph = sub_graph.placeholder(inp.name)
        if "val" in inp.meta:
            ph.meta["val"] = inp.meta["val"]
        env[inp] = ph
    for n in members:
        sub = _subgraph_at(gm, n)
        if sub is not None:
            holder.add_module(n.target, sub)
        env[n] = sub_graph.node_copy(n, lambda a: env[a])
    sub_graph.output(tuple(env[o] for o in outputs))
    submod = torch.fx.GraphModule(holder, sub_graph)

    name = names.attribute if names is not None and not hasattr(gm, names.attribute) else _fresh_name(gm, "submod")
    gm.add_submodule(name, submod)
    with graph.inserting_after(members[-1]):
        attr = graph.get_attr(name)
    if names is not None:
        rename_node(attr, names.node)
    with graph.inserting_after(attr):  # a one-output call is renamed below: leave the hop's name free
        call = graph.create_node("call_function", hop, (*leading_args, attr, *inputs),
                                 name="_region_call" if len(outputs) == 1 else None)
    for key in ("stack_trace", "nn_module_stack"):
        if key in anchor.meta:
            call.meta[key] = copy.copy(anchor.meta[key])
            attr.meta[key] = copy.copy(anchor.meta[key])
    call.meta["val"] = tuple(o.meta.get("val") for o in outputs)

    renames = []
    if len(outputs) == 1:
        renames.append((call, outputs[0].name))
    last = call
    for i, o in enumerate(outputs):
        with graph.inserting_after(last):
            item = graph.call_function(operator.getitem, (call, i))
        item.meta = copy.copy(o.meta)
        o.replace_all_uses_with(item)
        if len(outputs) > 1:
            renames.append((item, o.name))
        elif names is not None:
            rename_node(item, names.single_output_item)
        last = item
    moved_attrs = {n.target for n in members if _subgraph_at(gm, n) is not None}
    for n in reversed(members):
        graph.erase_node(n)
    for item, old in renames:
        _keep_name(graph, item, old)
    still_used = {n.target for n in graph.nodes if n.op == "get_attr"}
    for target in moved_attrs - still_used:
        delattr(gm, target)
    return call


def _modes_before(graph: torch.fx.Graph, ambient: bool) -> dict[torch.fx.Node, bool]:
    """The grad mode in force when each node of ``graph`` runs."""
    mode = ambient
    modes = {}
    for n in graph.nodes:
        modes[n] = mode
        if _is_grad_switch(n):
            mode = bool(n.args[0])
    return modes


def _autocast_names(graph: torch.fx.Graph) -> dict[torch.fx.Node, RegionNames]:
    """torch.export's cut of a graph for autocast — a piece per outermost block
    (enter to exit) and per stretch between blocks — named per block's enter node."""
    piece, depth, after_block = 0, 0, False
    piece_of: dict[torch.fx.Node, int] = {}
    blocks: dict[torch.fx.Node, int] = {}
    for n in graph.nodes:
        if after_block or (depth == 0 and _is_enter(n)):
            piece, after_block = piece + 1, False
        if _is_enter(n):
            if depth == 0:
                blocks[n] = piece
            depth += 1
        elif _is_exit(n):
            depth -= 1
            after_block = depth == 0
        if cut_node(n):
            piece_of[n] = piece
    names = name_regions(graph, piece_of, list(blocks.values()))
    return {enter: names[p] for enter, p in blocks.items()}


def _wrap_autocast(gm: torch.fx.GraphModule, ambient: bool) -> None:
    """Move every outermost autocast block into a ``wrap_with_autocast`` call."""
    graph = gm.graph
    names = _autocast_names(graph)
    while True:
        modes = _modes_before(graph, ambient)
        enter = next((n for n in graph.nodes if _is_enter(n)), None)
        if enter is None:
            return
        region, depth, exit_node = [], 0, None
        node = enter.next
        while node.op != "output":
            if _is_exit(node) and depth == 0 and node.args[0] is enter:
                exit_node = node
                break
            depth += _is_enter(node) - _is_exit(node)
            region.append(node)
            node = node.next
        mode_in = modes[enter]
        mode_out = modes[exit_node] if exit_node is not None else modes[node]
        if exit_node is not None:
            graph.erase_node(exit_node)
        graph.erase_node(enter)
        device, dtype, enabled, cache = (list(enter.args) + [None] * 4)[:4]
        call = extract_region(gm, region, wrap_with_autocast, (device, dtype, enabled, cache), enter,
                              names.get(enter))
        if call is None:
            continue
        submod = getattr(gm, call.args[4].target)
        wrap_regions(submod, mode_in)
        if mode_out != mode_in:  # the block left grad mode changed: keep that switch outside it
            last = call
            while last.next.op == "call_function" and last.next.target is operator.getitem \
                    and last.next.args[0] is call:
                last = last.next
            with graph.inserting_after(last):
                graph.call_function(_SET_GRAD, (mode_out,))


def _wrap_grad(gm: torch.fx.GraphModule, ambient: bool) -> None:
    """Move every stretch run in a mode other than ``ambient`` into a call."""
    graph = gm.graph
    mode, stretch, anchor = ambient, [], None
    stretches: list[tuple[bool, list[torch.fx.Node], torch.fx.Node]] = []
    for n in list(graph.nodes):
        if _is_grad_switch(n) or n.op == "output":
            if stretch and mode != ambient:
                stretches.append((mode, stretch, anchor))
            stretch = []
            if _is_grad_switch(n):
                mode, anchor = bool(n.args[0]), n
            continue
        if n.op != "placeholder":
            stretch.append(n)
    # torch.export's pieces: piece k starts at the k-th switch (piece 0 before the first)
    piece_of, piece = {}, 0
    for n in graph.nodes:
        piece += _is_grad_switch(n)
        if cut_node(n):
            piece_of[n] = piece
    pieces = [piece_of[anchor] for _, _, anchor in stretches]
    names = name_regions(graph, piece_of, pieces)
    for (mode, nodes, anchor), p in zip(stretches, pieces):
        extract_region(gm, nodes, wrap_with_set_grad_enabled, (mode,), anchor, names[p])
    for n in [n for n in graph.nodes if _is_grad_switch(n)]:
        graph.erase_node(n)


def wrap_regions(gm: torch.fx.GraphModule, ambient: Optional[bool] = None) -> torch.fx.GraphModule:
    """Rewrite ``gm`` (and its control-flow subgraphs) in place; see the module docstring.

    ``ambient`` is the grad mode the trace started in (the current one if not
    given): stretches in that mode stay inline.
    """
    if ambient is None:
        ambient = torch.is_grad_enabled()
    graph = gm.graph
    modes = _modes_before(graph, ambient)
    for n in graph.nodes:  # branches and bodies of control-flow operators run in the mode around them
        sub = _subgraph_at(gm, n)
        if sub is not None:
            users = list(n.users)
            wrap_regions(sub, modes[users[0]] if users else modes[n])
    _wrap_autocast(gm, ambient)
    _wrap_grad(gm, ambient)
    graph.lint()
    return gm  # code is regenerated by the caller once all passes ran (subgraph_names.recompile_subgraphs)
