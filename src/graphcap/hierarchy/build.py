"""Cutting the flat graph into one graph per module call, and wiring the calls.

Each call scope (:mod:`.scopes`) becomes a graph whose nodes are the ones
that ran inside it; the calls it made become calls of the child modules. What
a call's graph needs from outside becomes its inputs, except what its module
reaches itself:

- its own parameters, buffers and constants, read as attributes
  (``self.weight``), under any name the tensor had below the module;
- control-flow branch graphs, attached to the module that runs them;
- sizes of its inputs (``sym_size``), recomputed inside rather than passed, so
  a submodule's signature is its tensors, as in eager.

What it computes that is used outside becomes its outputs (one value bare,
several as a tuple). A preserved call (``preserve_module_call_signature``)
takes and returns exactly its recorded signature instead (:mod:`.preserved`).

Within a graph, the nodes and child calls are emitted in dependency order,
ties broken by where they ran in the flat graph, which keeps in-place updates
in the order the program made them.
"""
from __future__ import annotations

import heapq
import operator
import warnings
from typing import Any, Optional, Union

import torch

from ..errors import GraphcapError
from .modules import CallView, SubmoduleGraph
from .preserved import _NOT_CONSTANT, PreservedCallSite, PreservedModule, SubmoduleSignatureError
from .scopes import CallScope
from .state import StateEntry, reachable_name

_SYM_TYPES = (torch.SymInt, torch.SymBool, torch.SymFloat, int, bool, float)


class UnflattenError(GraphcapError, ValueError):
    """The program's module calls cannot be rebuilt as nested calls."""


def _carry_value(new: torch.fx.Node, old: torch.fx.Node) -> None:
    """``new`` stands for ``old`` in a call's graph: it carries ``old``'s value and, where ``old``
    has one, its ``tensor_meta`` (what shape-reading passes look up, as in the flat program)."""
    new.meta["val"] = old.meta.get("val")
    if "tensor_meta" in old.meta:
        new.meta["tensor_meta"] = old.meta["tensor_meta"]


def _relative(parent_fqn: str, fqn: str) -> Optional[str]:
    if parent_fqn == "":
        return fqn
    return fqn[len(parent_fqn) + 1:] if fqn.startswith(parent_fqn + ".") else None


def _walk(obj: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


class GraphCutter:
    """Builds every call's graph below the root; see the module docstring."""

    def __init__(self, ep, graph: torch.fx.Graph, state: dict[torch.fx.Node, StateEntry],
                 modules: dict[str, SubmoduleGraph], signatures: dict[str, Any]):
        self.ep = ep
        self.state = state
        self.modules = modules  # canonical module per FQN
        self.signatures = signatures  # preserved call name -> ModuleCallSignature
        self.order = {node: i for i, node in enumerate(graph.nodes)}
        self.by_name = {node.name: node for node in graph.nodes}

    # -- what a call needs --------------------------------------------------
    def _servable(self, node: torch.fx.Node, fqn: str) -> bool:
        if node in self.state:
            return reachable_name(self.state[node], fqn) is not None
        return node.op == "get_attr"

    @staticmethod
    def _sym_like(node: torch.fx.Node) -> bool:
        stack = node.meta.get("nn_module_stack") or {}
        return node.op == "call_function" and isinstance(node.meta.get("val"), _SYM_TYPES) \
            and all(isinstance(e, tuple) and e[0] == "" for e in stack.values())

    def _clonable(self, node: torch.fx.Node, available: set, fqn: str, seen: Optional[set] = None) -> bool:
        """A size computation with no module of its own whose inputs the call has anyway."""
        if not self._sym_like(node):
            return False
        seen = seen if seen is not None else set()
        if node in seen:
            return True
        seen.add(node)
        return all(a in available or self._servable(a, fqn) or self._clonable(a, available, fqn, seen)
                   for a in node.all_input_nodes)

    def needs(self, scope: CallScope, members: set) -> tuple[list[torch.fx.Node], set[torch.fx.Node]]:
        """(inputs in graph order, size computations to recompute inside) of a call."""
        deps = {a for m in members for a in m.all_input_nodes if a not in members}
        deps = {d for d in deps if not self._servable(d, scope.fqn)}
        plain = {d for d in deps if not self._sym_like(d)}
        cloned: dict = {d: None for d in deps - plain if self._clonable(d, plain, scope.fqn)}
        cloned.update(self.size_reads(deps - plain - set(cloned), plain))
        inputs = sorted(deps - set(cloned), key=self.order.__getitem__)
        return inputs, cloned

    @staticmethod
    def size_reads(wanted: set, available: set) -> dict:
        """Sizes a call needs that equal a dimension of one of its own tensor inputs (the
        sequence length of GPT-2's hidden states, read at the top from input_ids): node ->
        (input, dim), to be read inside the call instead of passed to it."""
        dims: dict[str, tuple] = {}
        for node in sorted(available, key=lambda n: n.name):
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                for d, size in enumerate(val.shape):
                    if isinstance(size, torch.SymInt):
                        dims.setdefault(str(size.node.expr), (node, d))
        out = {}
        for node in wanted:
            val = node.meta.get("val")
            source = dims.get(str(val.node.expr)) if isinstance(val, torch.SymInt) else None
            if source is not None:
                out[node] = source
        return out

    def produces(self, members: set) -> list[torch.fx.Node]:
        used_outside = {m for m in members if any(u not in members for u in m.users)}
        return sorted(used_outside, key=self.order.__getitem__)

    # -- emitting one call's graph -----------------------------------------------
    def emit(self, scope: CallScope, obj: torch.nn.Module, inputs: list[Optional[torch.fx.Node]],
             returns: Union[list[Any], None], cloned: dict, arg_names: Optional[list[str]] = None,
             output_tuple: bool = False) -> torch.fx.Graph:
        """The graph of ``scope`` run by ``obj``: placeholders for ``inputs`` (None for a
        recorded constant), then its nodes and child calls, returning ``returns``."""
        g = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        taken: set[str] = set()
        for i, node in enumerate(inputs):
            name = arg_names[i] if arg_names else (node.name if node is not None else f"arg{i}")
            while name in taken:  # one value passed twice (sub(a, y=a)): each argument its own name
                name = f"{name}_{i}"
            taken.add(name)
            ph = g.placeholder(name)
            if node is not None:
                _carry_value(ph, node)
                env.setdefault(node, ph)

        def value(a: torch.fx.Node) -> torch.fx.Node:
            found = env.get(a)
            if found is not None:
                return found
            if a in self.state:
                name = reachable_name(self.state[a], scope.fqn)
                if name is None:
                    raise UnflattenError(f"Module call '{scope.call_name}' reads '{self.state[a].target}', "
                                         f"which is neither its own state nor passed to it.")
                env[a] = g.get_attr(name)
                _carry_value(env[a], a)
            elif a.op == "get_attr":
                attr = "_graph_" + a.target.replace(".", "_")
                obj.__dict__[attr] = _walk(self.ep.graph_module, a.target)
                env[a] = g.get_attr(attr)
            elif a in cloned and cloned[a] is not None:
                source, dim = cloned[a]
                env[a] = g.call_function(torch.ops.aten.sym_size.int, (value(source), dim))
                _carry_value(env[a], a)
            elif a in cloned:
                env[a] = g.node_copy(a, value)
            else:
                raise UnflattenError(
                    f"Module call '{scope.call_name or '<root>'}' needs '{a.name}' before it is computed: "
                    f"the program interleaves this call with code outside it in a way that cannot be "
                    f"rebuilt as one call.", fix="Unflatten a program exported without that interleaving, "
                    "or use ep.module() (flat).")
            return env[a]

        # the module's own state first, in the program's order, as a module reads its attributes
        own = {a for n in scope.nodes if n.op == "call_function" for a in n.all_input_nodes
               if a in self.state and a not in env and reachable_name(self.state[a], scope.fqn) is not None}
        for a in sorted(own, key=self.order.__getitem__):
            value(a)

        for item in self._in_dependency_order(scope):
            if isinstance(item, CallScope):
                self._emit_call(scope, obj, item, g, env, value)
            else:
                env[item] = g.node_copy(item, value)

        if returns is None:
            return g
        results = [value(r) if isinstance(r, torch.fx.Node) else r for r in returns]
        g.output(tuple(results) if output_tuple or len(results) != 1 else results[0])
        return g

    def _in_dependency_order(self, scope: CallScope) -> list:
        """The scope's own operator nodes and child calls, dependencies first."""
        items: list[Any] = [n for n in scope.nodes if n.op == "call_function"]
        owner: dict[torch.fx.Node, Any] = {n: n for n in items}
        position: dict[int, int] = {id(n): self.order[n] for n in items}
        for child in scope.children:
            members = child.members()
            items.append(child)
            position[id(child)] = min(self.order[m] for m in members)
            for m in members:
                owner[m] = child
        deps: dict[int, set[int]] = {}
        users: dict[int, list[Any]] = {id(i): [] for i in items}
        for item in items:
            nodes = item.members() if isinstance(item, CallScope) else {item}
            found = {id(owner[a]) for n in nodes for a in n.all_input_nodes if a in owner and owner[a] is not item}
            deps[id(item)] = found
            for d in found:
                users[d].append(item)
        ready = [(position[id(i)], n, i) for n, i in enumerate(items) if not deps[id(i)]]
        heapq.heapify(ready)
        out = []
        counter = len(items)
        while ready:
            _, _, item = heapq.heappop(ready)
            out.append(item)
            for user in users[id(item)]:
                deps[id(user)].discard(id(item))
                if not deps[id(user)]:
                    counter += 1
                    heapq.heappush(ready, (position[id(user)], counter, user))
        if len(out) != len(items):
            stuck = [i.call_name for i in items if isinstance(i, CallScope) and i not in out]
            raise UnflattenError(f"The calls {stuck} inside '{scope.call_name or '<root>'}' depend on each "
                                 f"other's results in a cycle: they are interleaved in the program and cannot "
                                 f"be rebuilt as separate calls.", fix="Use ep.module() (flat).")
        return out

    # -- one child call ---------------------------------------------------------
    def _emit_call(self, parent: CallScope, obj: torch.nn.Module, child: CallScope, g: torch.fx.Graph,
                   env: dict, value) -> None:
        members = child.members()
        signature = self.signatures.get(child.call_name)
        if signature is not None and isinstance(self.modules.get(child.fqn), PreservedModule):
            why = self._emit_preserved(parent, obj, child, members, signature, g, env, value)
            if why is None:
                return
            rel = _relative(parent.fqn, child.fqn)
            if rel is not None:  # a replacement could not run this call: refuse it rather than ignore it
                holder = g.create_node("get_attr", rel, name=_node_name(rel))
                g.call_function(NotReplaced(child.fqn, child.call_name, why), (holder,))
        inputs, cloned = self.needs(child, members)
        returns = self.produces(members)
        canonical = self.modules[child.fqn]
        callee, access = self._callee(parent, obj, child)
        graph = self.emit(child, callee, inputs, returns, cloned)
        if callee is not canonical and canonical.graph is not None and same_computation(graph, canonical.graph) \
                and _relative(parent.fqn, child.fqn) is not None:
            self._forget(obj, access)  # the same code as the module's first call: call the module
            callee, access = canonical, _relative(parent.fqn, child.fqn)
        else:
            callee.set_graph(graph)
        call = g.create_node("call_module", access, tuple(value(i) for i in inputs), name=_node_name(access))
        call.meta["val"] = _results_val(returns)
        _uplift_common_meta(call, members, graph)
        if len(returns) == 1:
            env[returns[0]] = call
        else:
            for i, r in enumerate(returns):
                env[r] = g.call_function(operator.getitem, (call, i))
                _carry_value(env[r], r)

    @staticmethod
    def _forget(obj: torch.nn.Module, access: str) -> None:
        holder_path, _, name = access.rpartition(".")
        _walk(obj, holder_path).__dict__.pop(name, None)

    def _callee(self, parent: CallScope, obj: torch.nn.Module, child: CallScope) -> tuple[SubmoduleGraph, str]:
        """The module that runs ``child`` (its FQN's module for a first call, else a view of it)
        and the attribute path by which ``obj`` reaches it."""
        canonical = self.modules[child.fqn]
        first = child.index == 0 and canonical.graph is None and not isinstance(canonical, PreservedModule)
        callee = canonical if first else CallView(canonical, child.fqn, child.index, canonical._class_name)
        rel = _relative(parent.fqn, child.fqn)
        if rel is None:  # called from a module that does not hold it
            access = "_call_" + "".join(c if c.isalnum() else "_" for c in child.call_name)
            obj.__dict__[access] = callee
            return callee, access
        if first:
            return callee, rel
        holder_path, _, leaf = rel.rpartition(".")
        name = f"{leaf}@{child.index}" if child.index else f"{leaf}@call"
        holder = _walk(obj, holder_path)
        holder.__dict__[name] = callee
        return callee, f"{holder_path}.{name}" if holder_path else name

    def _emit_preserved(self, parent, obj, child, members, signature, g, env, value) -> Optional[str]:
        """The call of a preserved submodule; None when emitted, else (with a warning) why the
        program does not let it be cut at its recorded signature."""
        found: dict[str, list[Optional[torch.fx.Node]]] = {}
        for side, args in (("input", signature.inputs), ("output", signature.outputs)):
            found[side] = [self.by_name.get(getattr(a, "name", "")) for a in args]
            lost = [a.name for a, n in zip(args, found[side]) if getattr(a, "name", "") and n is None]
            if lost:
                return self._not_preserved(child, f"its {side} '{lost[0]}' is not in the graph")
        arg_nodes = found["input"]
        constants = [_NOT_CONSTANT if n is not None else getattr(a, "value", None)
                     for a, n in zip(signature.inputs, arg_nodes)]
        outputs = [n if n is not None else getattr(a, "value", None)
                   for a, n in zip(signature.outputs, found["output"])]
        available = {n for n in arg_nodes if n is not None}
        deps = {a for m in members for a in m.all_input_nodes if a not in members}
        sizes = self.size_reads({d for d in deps if d not in available}, available)
        missing = [d for d in deps if d not in available and not self._servable(d, child.fqn)
                   and d not in sizes and not self._clonable(d, available, child.fqn)]
        if missing:
            return self._not_preserved(child, f"it also reads {sorted(d.name for d in missing)}, "
                                              f"which are not among its recorded inputs")
        extra = [r for r in self.produces(members) if r not in outputs]
        if extra:
            return self._not_preserved(child, f"values it computes ({sorted(r.name for r in extra)}) are "
                                              f"used outside it but are not among its recorded outputs")
        cloned: dict = {}

        def recompute(d: torch.fx.Node) -> None:  # a size computation and the sizes it reads
            if d in cloned or d in available or self._servable(d, child.fqn):
                return
            cloned[d] = sizes.get(d) or self.size_reads({d}, available).get(d)
            if cloned[d] is None:
                for a in d.all_input_nodes:
                    recompute(a)

        for d in deps:
            recompute(d)
        module = self.modules[child.fqn]
        graph = self.emit(child, module, arg_nodes, outputs, cloned, output_tuple=True)
        first_of: dict[torch.fx.Node, int] = {}
        same_as = [first_of.setdefault(n, i) if n is not None else None for i, n in enumerate(arg_nodes)]
        same_as = [j if j != i else None for i, j in enumerate(same_as)]
        module.add_call(child.call_name, signature.in_spec, constants, signature.out_spec, graph, {}, same_as)
        rel = _relative(parent.fqn, child.fqn)
        if rel is None:
            rel = "_call_" + "".join(c if c.isalnum() else "_" for c in child.fqn)
            obj.__dict__[rel] = module
        expected = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in outputs]
        site = PreservedCallSite(child.fqn, child.call_name, signature.in_spec, signature.out_spec, expected)
        target = g.create_node("get_attr", rel, name=_node_name(rel))
        def size_outside(n: torch.fx.Node) -> None:
            # a size the call takes that the program computed inside it (``x.shape[0]`` read
            # where the callee first used it): the caller computes it from what it has
            if n in env or n not in members or not isinstance(n.meta.get("val"), _SYM_TYPES) \
                    or n.op != "call_function":
                return
            for a in n.all_input_nodes:
                size_outside(a)
            env[n] = g.node_copy(n, value)

        for n in arg_nodes:
            if n is not None:
                size_outside(n)
        flat = [value(n) if n is not None else c for n, c in zip(arg_nodes, constants)]
        call = g.call_function(site, (target, *flat))
        call.meta["val"] = tuple(expected)
        for i, out in enumerate(outputs):
            if isinstance(out, torch.fx.Node) and out in members:
                env[out] = g.call_function(operator.getitem, (call, i))
                _carry_value(env[out], out)
        # the module at the FQN may be a replacement that reassigns its state (``self.n = ...``):
        # code after the call reads that state anew, as eager code reads ``self.sub.n`` after it
        for node in [a for a in env if a in self.state and reachable_name(self.state[a], child.fqn) is not None]:
            del env[node]
        return None

    @staticmethod
    def _not_preserved(child: CallScope, why: str) -> str:
        warnings.warn(f"unflatten: the call '{child.call_name}' of preserved submodule '{child.fqn}' is "
                      f"rebuilt without its recorded signature because {why}; it runs as exported, and "
                      f"running it after replacing the submodule raises an error.", stacklevel=4)
        return why


class NotReplaced:
    """Checks, before a preserved submodule's call that had to be rebuilt without its recorded
    signature, that the submodule was not replaced: that call runs the exported code, so with
    a replacement it would silently compute something else than the replacement does."""

    def __init__(self, fqn: str, call_name: str, why: str):
        self.fqn = fqn
        self.call_name = call_name
        self.why = why
        self.__name__ = "check_not_replaced_" + "".join(c if c.isalnum() else "_" for c in call_name)
        self.__module__ = __name__

    def __call__(self, module: torch.nn.Module) -> None:
        if isinstance(module, PreservedModule):
            return
        raise SubmoduleSignatureError(
            f"Submodule '{self.fqn}' was replaced by {type(module).__name__}, but the program's call "
            f"'{self.call_name}' of it could not keep its recorded signature ({self.why}), so it cannot "
            f"call a replacement; running it would ignore the replacement and give other numbers.",
            where=f"unflattened module, call '{self.call_name}'",
            fix="Export with the submodule's interface kept apart from the code around it, or swap "
                "the submodule in the eager model and export again.")


def _node_name(target: str) -> str:
    """The node name fx would derive from ``target``, kept clear of ``self`` (the generated
    forward's first argument: a submodule may well be called ``self``, as in BERT)."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in target)
    return name + "_1" if name == "self" else name


def same_computation(a: torch.fx.Graph, b: torch.fx.Graph) -> bool:
    """Whether two graphs run the same operators on the same inputs, names aside."""
    def shape(graph: torch.fx.Graph) -> list:
        index = {n: i for i, n in enumerate(graph.nodes)}
        def rename(arg: Any) -> Any:
            return torch.fx.node.map_arg(arg, lambda n: ("%", index[n]))
        return [(n.op, n.target if n.op != "placeholder" else None, rename(n.args), rename(n.kwargs))
                for n in graph.nodes]
    try:
        return shape(a) == shape(b)
    except Exception:
        return False


def _results_val(returns: list) -> Any:
    """A call's ``val``: its one result's, or the tuple of its results' (as the call returns them)."""
    vals = [r.meta.get("val") if isinstance(r, torch.fx.Node) else r for r in returns]
    return vals[0] if len(vals) == 1 else tuple(vals)


def _uplift_common_meta(call: torch.fx.Node, members: set, graph: torch.fx.Graph) -> None:
    """Annotations (``fx.traceback.annotate``) shared by everything a call ran move to the call."""
    values = [m.meta.get("custom") for m in members if m.op == "call_function"]
    if not values or not values[0] or any(v != values[0] for v in values[1:]):
        return
    call.meta["custom"] = dict(values[0])
    for node in graph.nodes:
        node.meta.pop("custom", None)
