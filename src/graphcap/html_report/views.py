"""The program's graph cut into one small picture per module call.

A zoo model has hundreds of nodes; one picture of all of them is a wall. The
report instead shows, for each module call recorded in ``nn_module_stack``, a
*view*: the operators the module runs itself and one box per child module
call, with the values that come from outside drawn as input ports and the
values used outside as output ports. The root view is the whole program with
every top-level module collapsed to a box; clicking a box opens the child's
view. Each view stays small however big the model is.

Parameters, buffers and constants are drawn where they are used: in the view
of the deepest module call that contains all their users (a conv's weight in
the conv's view), not as a row of hundreds of inputs at the top.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

ROOT = ""


@dataclass
class Group:
    """One module call: its ``nn_module_stack`` key, FQN, class and place in the tree."""

    key: str
    path: str
    type_name: str
    parent: Optional[str]
    children: list[str] = field(default_factory=list)
    nodes: list[torch.fx.Node] = field(default_factory=list)  # the nodes it runs itself
    size: int = 0  # nodes in its whole subtree

    @property
    def label(self) -> str:
        call = self.key.rsplit("@", 1)[1] if "@" in self.key else None
        name = self.path or "(root)"
        return f"{name} (call {int(call) + 1})" if call and call.isdigit() else name


@dataclass
class Unit:
    """A box of a view: an operator node, a child module call, or a port to the outside."""

    id: str
    kind: str  # "node", "module", "in", "out"
    label: str
    detail: str = ""  # hover text
    node: Optional[torch.fx.Node] = None
    group: Optional[str] = None  # for kind == "module": the child's key
    order: float = 0.0  # position in the graph's (topological) order


@dataclass
class View:
    key: str
    units: list[Unit]
    edges: list[tuple[str, str]]


def _short_type(qualname: Any) -> str:
    text = qualname if isinstance(qualname, str) else getattr(qualname, "__name__", str(qualname))
    return text.rsplit(".", 1)[-1]


def _stack_keys(node: torch.fx.Node) -> list[tuple[str, str, str]]:
    """(key, path, class) of each module call ``node`` ran in, outermost first, the root left out."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for key, entry in stack.items():
        path, type_name = (entry[0], entry[1]) if isinstance(entry, tuple) else (str(entry), "")
        if path == "" and not out:
            continue  # the exported module itself: the root view
        out.append((key, path, _short_type(type_name)))
    return out


def node_label(node: torch.fx.Node) -> str:
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return name.replace(".default", "")
    return node.name


def node_detail(node: torch.fx.Node) -> str:
    """What the hover text of a node says: name, operator, value and the user's line."""
    lines = [f"{node.name}: {node.op} {node.target}" if node.op != "placeholder" else f"{node.name} (input)"]
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        lines.append(f"{str(val.dtype).replace('torch.', '')}{list(val.shape)}")
    elif val is not None and not isinstance(val, (list, tuple)):
        lines.append(str(val))
    trace = node.meta.get("stack_trace") or ""
    frames = [ln.strip() for ln in trace.strip().splitlines()]
    if len(frames) >= 2:
        lines.append(frames[-2])
        lines.append(frames[-1])
    return "\n".join(lines)


class ModuleTree:
    """The module calls of a graph and which nodes each runs; builds the views."""

    def __init__(self, graph: torch.fx.Graph, prefix: str = "", subgraphs: Optional[dict] = None):
        """``prefix`` makes this tree's view keys unique in a page that also draws control-flow
        subgraphs; ``subgraphs`` maps a ``get_attr`` target to the view key of that subgraph
        (its node is then drawn as a box that opens it)."""
        self.prefix = prefix
        self.subgraphs = subgraphs or {}
        self.nodes = list(graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.groups: dict[str, Group] = {ROOT: Group(ROOT, "", "", None)}
        self.group_of: dict[torch.fx.Node, str] = {}
        for node in self.nodes:
            if node.op in ("call_function", "call_method", "call_module"):
                parent = ROOT
                for key, path, type_name in _stack_keys(node):
                    if key not in self.groups:
                        self.groups[key] = Group(key, path, type_name, parent)
                        self.groups[parent].children.append(key)
                    parent = key
                self.group_of[node] = parent
        for node in self.nodes:  # inputs and subgraph attributes: where their users are
            if node not in self.group_of:
                self.group_of[node] = self._common_group(node) if node.op in ("placeholder", "get_attr") else ROOT
        for node, key in self.group_of.items():
            self.groups[key].nodes.append(node)
            while key is not None:
                self.groups[key].size += 1
                key = self.groups[key].parent

    def _chain(self, key: str) -> list[str]:
        chain = []
        while key is not None:
            chain.append(key)
            key = self.groups[key].parent
        return chain[::-1]

    def _common_group(self, node: torch.fx.Node) -> str:
        """The deepest module call containing every user of ``node``; the root for user inputs."""
        users = [self.group_of.get(u) for u in node.users]
        if not users or any(u is None for u in users):
            return ROOT
        if node.op == "placeholder" and not node.name.startswith(("p_", "b_", "c_")):
            return ROOT
        chains = [self._chain(u) for u in users]
        common = ROOT
        for level in zip(*chains):
            if len(set(level)) != 1:
                break
            common = level[0]
        return common

    def breadcrumb(self, key: str) -> list[Group]:
        return [self.groups[k] for k in self._chain(key)]

    def _inside(self, key: str) -> dict[torch.fx.Node, str]:
        """Every node in ``key``'s subtree -> the id of the unit of ``key``'s view that holds it."""
        out: dict[torch.fx.Node, str] = {}
        for node in self.groups[key].nodes:
            out[node] = f"n:{node.name}"

        def walk(child_key: str, unit_id: str) -> None:
            for node in self.groups[child_key].nodes:
                out[node] = unit_id
            for grandchild in self.groups[child_key].children:
                walk(grandchild, unit_id)

        for child in self.groups[key].children:
            walk(child, f"m:{child}")
        return out

    def view(self, key: str) -> View:
        inside = self._inside(key)
        units: dict[str, Unit] = {}
        group = self.groups[key]
        for node in group.nodes:
            if node.op == "placeholder" and not node.users:
                continue  # an unused input (a buffer no operator reads): nothing to draw
            if node.op == "get_attr" and node.target in self.subgraphs:  # a branch / body: opens its view
                units[f"n:{node.name}"] = Unit(f"n:{node.name}", "module", node.name,
                                               f"{node.name}: subgraph (click to open)",
                                               node=node, group=self.subgraphs[node.target], order=self.index[node])
                continue
            units[f"n:{node.name}"] = Unit(f"n:{node.name}", "node", node_label(node), node_detail(node), node=node,
                                           order=self.index[node])
        for child_key in group.children:
            child = self.groups[child_key]
            # where the call starts: its first operator (its weights are placeholders, listed first)
            subtree = self._subtree_nodes(child_key)
            ops = [self.index[n] for n in subtree if n.op not in ("placeholder", "get_attr")]
            first = min(ops or [self.index[n] for n in subtree])
            short = child.label[len(group.path) + 1:] if group.path and child.label.startswith(group.path + ".") \
                else child.label  # layer1.0.conv1 is "conv1" in layer1.0's view
            nodes = "1 node" if child.size == 1 else f"{child.size} nodes"
            units[f"m:{child_key}"] = Unit(f"m:{child_key}", "module", short,
                                           f"{child.label}: {child.type_name}, {nodes} (click to open)",
                                           group=self.prefix + child_key, order=first)
        edges: dict[tuple[str, str], None] = {}
        for node, unit_id in inside.items():
            for src in node.all_input_nodes:
                src_unit = inside.get(src)
                if src_unit is None:
                    src_unit = f"in:{src.name}"
                    units.setdefault(src_unit, Unit(src_unit, "in", src.name, node_detail(src), node=src, order=-1))
                if src_unit != unit_id:
                    edges[(src_unit, unit_id)] = None
            for user in node.users:
                if user not in inside:
                    out_unit = f"out:{node.name}"
                    units.setdefault(out_unit, Unit(out_unit, "out", node.name, f"{node.name}, used outside",
                                                    node=node, order=len(self.nodes)))
                    edges[(unit_id, out_unit)] = None
        ordered = sorted(units.values(), key=lambda u: u.order)
        return View(key, ordered, list(edges))

    def _subtree_nodes(self, key: str) -> list[torch.fx.Node]:
        out = list(self.groups[key].nodes)
        for child in self.groups[key].children:
            out += self._subtree_nodes(child)
        return out

    def keys(self) -> list[str]:
        """Every module call with something in it, parents before children."""
        out = []

        def walk(key: str) -> None:
            out.append(key)
            for child in self.groups[key].children:
                walk(child)

        walk(ROOT)
        return out
