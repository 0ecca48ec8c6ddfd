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
the conv's view), not as a row of hundreds of inputs at the top. What is state
is read from the graph signature's input kinds, not from placeholder names.

Two things keep a deep model's view readable. A run of repeated sibling
calls (``h.0`` .. ``h.47``, same class, nothing of the parent between them)
is drawn as one stacked box (:class:`Run`) that expands in place. Edges that
carry a size or a mask to many boxes (the causal mask feeding every layer)
are marked ``aux``: the layout ignores them and the page hides them unless
asked.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .names import NoNames, SymbolNames

ROOT = ""
MIN_RUN = 3  # repeated sibling calls drawn as one box from this many on
AUX_FANOUT = 3  # a size or mask going to this many boxes is drawn only on request


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
    kind: str  # "node", "module", "run", "in", "out"
    label: str
    detail: str = ""  # hover text
    node: Optional[torch.fx.Node] = None
    group: Optional[str] = None  # for kind == "module": the child's key
    order: float = 0.0  # position in the graph's (topological) order
    search: str = ""  # what the page's search box matches (names, operator, module path)


@dataclass
class Run:
    """Repeated sibling module calls (``h.0`` .. ``h.47``) drawn as one box when collapsed."""

    keys: list[str]  # the member calls' keys, in call order
    label: str  # "h.0 … h.47"
    type_name: str
    size: int  # nodes in all members


@dataclass
class View:
    key: str
    units: list[Unit]
    edges: list[tuple[str, str]]
    aux: set = field(default_factory=set)  # edges drawn only on request (sizes/masks fanning out)
    runs: list[Run] = field(default_factory=list)  # the runs collapsed in this view (empty: none)
    aux_units: set = field(default_factory=set)  # operators that only compute what aux edges carry


def _aux_units(units: list[Unit], edges: list[tuple[str, str]], aux: set) -> set[str]:
    """The operator boxes that exist only to compute a size or mask drawn on request: every edge out
    of them is an aux edge or goes to another such box; an assert that checks only such boxes'
    values belongs with them. They are drawn apart and shown with the aux edges."""
    kinds = {u.id: u for u in units}
    outs: dict[str, list[tuple[str, str]]] = {u.id: [] for u in units}
    ins: dict[str, list[str]] = {u.id: [] for u in units}
    for a, b in edges:
        outs[a].append((a, b))
        ins[b].append(a)

    def is_check(unit_id: str) -> bool:
        unit = kinds[unit_id]
        return unit.kind == "node" and unit.node is not None and not outs[unit_id] and \
            ("assert" in str(unit.node.target) or "constrain" in str(unit.node.target))

    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for u in units:
            if u.id in found or u.kind not in ("node", "in") or (u.kind == "in" and not outs[u.id]):
                continue
            real = [e for e in outs[u.id] if not is_check(e[1])]  # an assert on it goes where it goes
            if real:
                ok = all(e in aux or e[1] in found for e in real)
            else:  # a sink: an assert on values of the size/mask computation
                ok = is_check(u.id) and bool(ins[u.id]) and all(s in found for s in ins[u.id])
            if ok and kinds[u.id].kind in ("node", "in"):
                found.add(u.id)
                changed = True
    return found


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


def node_detail(node: torch.fx.Node, names: SymbolNames = NoNames()) -> str:
    """What the hover text of a node says: name, operator, value (sizes by the user's names) and the
    user's line."""
    lines = [f"{node.name}: {node.op} {node.target}" if node.op != "placeholder" else f"{node.name} (input)"]
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        lines.append(names.shape(val))
    elif val is not None and not isinstance(val, (list, tuple)):
        lines.append(names(val))
    trace = node.meta.get("stack_trace") or ""
    frames = [ln.strip() for ln in trace.strip().splitlines()]
    if len(frames) >= 2:
        lines.append(frames[-2])
        lines.append(frames[-1])
    return "\n".join(lines)


def is_size_or_mask(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value is a size (a Python or symbolic number) or a mask (a bool tensor, or a
    tensor the program names a mask)."""
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return True
    return isinstance(val, torch.Tensor) and (val.dtype is torch.bool or "mask" in node.name.lower())


class ModuleTree:
    """The module calls of a graph and which nodes each runs; builds the views."""

    def __init__(self, graph: torch.fx.Graph, prefix: str = "", subgraphs: Optional[dict] = None,
                 state_names: frozenset = frozenset(), names: SymbolNames = NoNames()):
        """``prefix`` makes this tree's view keys unique in a page that also draws control-flow
        subgraphs; ``subgraphs`` maps a ``get_attr`` target to the view key of that subgraph
        (its node is then drawn as a box that opens it); ``state_names`` are the placeholders the
        signature calls parameters, buffers or constants (drawn where they are used);
        ``names`` prints sizes with the user's Dim names."""
        self.prefix = prefix
        self.subgraphs = subgraphs or {}
        self.state_names = state_names
        self.names = names
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
        if node.op == "placeholder" and node.name not in self.state_names:
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

    def runs(self, key: str) -> list[Run]:
        """Runs of repeated child calls of ``key``: at least ``MIN_RUN`` consecutive entries ``P.0``,
        ``P.1``, ... of a ``ModuleList``/``Sequential``, of one class and as many nodes each (the same
        layer repeated; ResNet's ``layer1`` .. ``layer4`` differ and are not a run), with none of
        ``key``'s own operators between them (so that one box stands for all of them soundly)."""
        group = self.groups[key]
        own = sorted(self.index[n] for n in group.nodes if n.op not in ("placeholder", "get_attr"))
        out: list[Run] = []
        current: list[str] = []

        def numbered(child_key: str) -> Optional[tuple[str, int, str, int]]:
            """(container path, index, class, node count) of an entry of a ModuleList/Sequential."""
            child = self.groups[child_key]
            m = re.fullmatch(r"(.*\.)(\d+)", child.path)
            if "@" in child_key or not m:
                return None
            return m.group(1), int(m.group(2)), child.type_name, child.size

        def close() -> None:
            if len(current) >= MIN_RUN:
                first, last = self.groups[current[0]], self.groups[current[-1]]
                out.append(Run(list(current), f"{self._entry(group, first)} … {self._entry(group, last)}",
                               first.type_name, sum(self.groups[k].size for k in current)))
            current.clear()

        for child_key in group.children:
            info = numbered(child_key)
            if current and info is not None:
                prev = numbered(current[-1])
                span = self._span(current[-1])[1], self._span(child_key)[0]
                between = any(span[0] < i < span[1] for i in own)
                if prev is not None and (prev[0], prev[1] + 1, prev[2], prev[3]) == info and not between:
                    current.append(child_key)
                    continue
            close()
            if info is not None:
                current.append(child_key)
        close()
        return out

    def _span(self, key: str) -> tuple[int, int]:
        """First and last graph position of the operators a call runs."""
        idx = [self.index[n] for n in self._subtree_nodes(key) if n.op not in ("placeholder", "get_attr")]
        return (min(idx), max(idx)) if idx else (0, 0)

    @staticmethod
    def _short(parent: Group, child: Group) -> str:
        """``layer1.0.conv1`` is ``conv1`` in ``layer1.0``'s view."""
        return child.label[len(parent.path) + 1:] if parent.path and child.label.startswith(parent.path + ".") \
            else child.label

    @classmethod
    def _entry(cls, parent: Group, child: Group) -> str:
        """A container entry's name in its parent's view, with the container's name when the entry's
        own is a bare index (``body.0`` in the view of ``body``, not ``0``)."""
        short = cls._short(parent, child)
        return f"{child.path.split('.')[-2]}.{short}" if short.isdigit() and "." in child.path else short

    def view(self, key: str, collapse: bool = True) -> View:
        """``key``'s view; with ``collapse`` its runs of repeated children are one box each."""
        inside = self._inside(key)
        units: dict[str, Unit] = {}
        group = self.groups[key]
        names = self.names
        for node in group.nodes:
            if node.op == "placeholder" and not node.users:
                continue  # an unused input (a buffer no operator reads): nothing to draw
            if node.op == "get_attr" and node.target in self.subgraphs:  # a branch / body: opens its view
                units[f"n:{node.name}"] = Unit(f"n:{node.name}", "module", node.name,
                                               f"{node.name}: subgraph (click to open)",
                                               node=node, group=self.subgraphs[node.target], order=self.index[node],
                                               search=node.name)
                continue
            label = node_label(node)
            units[f"n:{node.name}"] = Unit(f"n:{node.name}", "node", label, node_detail(node, names), node=node,
                                           order=self.index[node],
                                           search=f"{node.name} {label} {node.target} {group.path}")
        for child_key in group.children:
            child = self.groups[child_key]
            # where the call starts: its first operator (its weights are placeholders, listed first)
            subtree = self._subtree_nodes(child_key)
            ops = [self.index[n] for n in subtree if n.op not in ("placeholder", "get_attr")]
            first = min(ops or [self.index[n] for n in subtree])
            nodes = "1 node" if child.size == 1 else f"{child.size} nodes"
            units[f"m:{child_key}"] = Unit(f"m:{child_key}", "module", self._short(group, child),
                                           f"{child.label}: {child.type_name}, {nodes} (click to open)",
                                           group=self.prefix + child_key, order=first,
                                           search=f"{child.label} {child.type_name}")
        runs = self.runs(key) if collapse else []
        merged: dict[str, str] = {}  # member unit -> run unit
        for run in runs:
            run_id = f"r:{run.keys[0]}"
            members = [units.pop(f"m:{k}") for k in run.keys]
            units[run_id] = Unit(run_id, "run", run.label,
                                 f"{len(run.keys)} × {run.type_name}, {run.size} nodes (click to expand)",
                                 group=self.prefix + key, order=members[0].order,
                                 search=" ".join(u.search for u in members))
            merged.update({u.id: run_id for u in members})
        edges: dict[tuple[str, str], list[torch.fx.Node]] = {}
        for node, unit_id in inside.items():
            unit_id = merged.get(unit_id, unit_id)
            for src in node.all_input_nodes:
                src_unit = inside.get(src)
                if src_unit is None:
                    src_unit = f"in:{src.name}"
                    units.setdefault(src_unit, Unit(src_unit, "in", src.name, node_detail(src, names), node=src,
                                                    order=-1))
                src_unit = merged.get(src_unit, src_unit)
                if src_unit != unit_id:
                    edges.setdefault((src_unit, unit_id), []).append(src)
            for user in node.users:
                if user not in inside:
                    out_unit = f"out:{node.name}"
                    units.setdefault(out_unit, Unit(out_unit, "out", node.name, f"{node.name}, used outside",
                                                    node=node, order=len(self.nodes)))
                    edges.setdefault((unit_id, out_unit), []).append(node)
        ordered = sorted(units.values(), key=lambda u: u.order)
        fanning = self._fanning(key, inside)
        aux = {e for e, carried in edges.items() if all(n in fanning for n in carried)}
        return View(key, ordered, list(edges), aux, runs, _aux_units(ordered, list(edges), aux))

    def _fanning(self, key: str, inside: dict[torch.fx.Node, str]) -> set[torch.fx.Node]:
        """Values that are sizes or masks and fan out in ``key``'s uncollapsed view (a size to two
        boxes or more, a mask to two module calls or to ``AUX_FANOUT`` boxes): their edges cross the
        picture without saying much."""
        out = set()
        for node in {src for n in inside for src in n.all_input_nodes}:
            if not is_size_or_mask(node):
                continue
            targets = {inside.get(u) for u in node.users if u in inside}
            targets.discard(inside.get(node))
            size = not isinstance(node.meta.get("val"), torch.Tensor)
            blocks = sum(1 for t in targets if t is not None and t.startswith("m:"))
            if len(targets) >= AUX_FANOUT or (size or blocks >= 2) and len(targets) >= 2:
                out.add(node)
        return out

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
