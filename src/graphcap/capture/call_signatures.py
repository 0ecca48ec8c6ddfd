"""Module call signatures kept for ``preserve_module_call_signature``.

For each submodule named by the user, the structure (pytree specs) of its
inputs and outputs and the graph values that flow in and out of it, so that a
later unflatten (or a runtime that swaps the submodule) knows its calling
convention. Hooks record them while the program is traced.

A module called more than once gets one signature per call, under the call's
name as the node metadata writes it: ``sub`` for the first call, ``sub@1`` for
the second, and so on (``graphcap.trace.module_paths``). A module shared under
two names is preserved only for the calls made through the name the user gave.

The program's call graph lists the root, then every submodule of the module
tree (with its signature if preserved and called, else None), then the further
calls (``sub@1`` ...) of preserved modules, in the order they ran — the
layout torch.export gives it, which torch's ``unflatten`` reads.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence

import torch
from torch.fx.experimental import proxy_tensor

from ..errors import ExportInputError
from ..signature import ConstantArgument, ModuleCallEntry, ModuleCallSignature, SymIntArgument, TensorArgument
from ..torch_private import pytree
from ..torch_private.fx import current_make_fx_tracer
from ..torch_private.modules import children_of
from ..trace import module_paths, size_nodes
from . import progress


def _graph_value(value: Any) -> Any:
    """The node that made a traced value, if any, else the value itself.

    Nodes, not names, are kept: lifting renames placeholders after tracing.
    """
    tracer = getattr(current_make_fx_tracer(), "fx_tracer", None)
    if isinstance(value, torch.Tensor) and tracer is not None:
        slot = proxy_tensor.get_proxy_slot(value, tracer, None)
        if slot is not None:
            return slot.proxy.node
    if isinstance(value, torch.SymInt) and tracer is not None and value.node.is_symbolic():
        # a size computed by the caller (``sub(x, x.shape[0] - 1)``): the node that made it,
        # so the signature names a value of the graph, not an expression no graph defines
        slot = proxy_tensor.get_proxy_slot(value, tracer, None)
        proxy = slot.force() if slot is not None and hasattr(slot, "force") else slot
        node = getattr(proxy, "node", None)
        if isinstance(node, torch.fx.Node):
            return node
    return value


def _argument(value: Any) -> Any:
    if isinstance(value, torch.SymInt) and not value.node.is_symbolic():
        value = int(value)
    if isinstance(value, torch.fx.Node):
        if isinstance(value.meta.get("val"), torch.SymInt):
            return SymIntArgument(value.name)
        return TensorArgument(value.name)
    return ConstantArgument("", None if isinstance(value, torch.Tensor) else value)


class CallRecorder:
    """Context manager that hooks the named submodules during one trace.

    A front end that calls no submodule while recording (strict capture replays
    dynamo's graph) reports each call's start and end to :meth:`boundary` of the
    recorder :func:`active_recorder` returns instead."""

    def __init__(self, root: Optional[torch.nn.Module], fqns: Sequence[str], replays_graph: bool = False):
        self._root = root
        self._handles: list[Any] = []
        self._calls: dict[str, dict[str, Any]] = {}  # call name -> what its hooks saw, in call order
        self._counts: dict[str, int] = {}  # calls per preserved FQN, where the tracer keeps no module stack
        self._tree = module_tree(root) if root is not None else []
        self._modules = preserved_modules(root, fqns, self._tree, replays_graph=replays_graph)
        self._fqns = list(self._modules)

    def __enter__(self):
        # modules entered of modules total, on a terminal, for exports that take a while
        self._progress = progress.start((m for _, m in self._tree), type(self._root).__name__)
        for fqn, mod in self._modules.items():
            self._handles.append(mod.register_forward_pre_hook(self._pre(fqn), with_kwargs=True))
            self._handles.append(mod.register_forward_hook(self._post(fqn), with_kwargs=True))
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        progress.stop(self._progress)
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _call_name(self, fqn: str, starting: bool) -> Optional[str]:
        """Name of the running call of the module preserved as ``fqn``; None when the
        call went through another name of a shared module."""
        name = module_paths.current_call_name()
        if name is None:  # no module stack to read: number the calls here
            count = self._counts.get(fqn, 0)
            if starting:
                self._counts[fqn] = count + 1
            else:
                count -= 1
            return fqn if count <= 0 else f"{fqn}@{count}"
        return name if module_paths.split_call_name(name)[0] == fqn else None

    def _pre(self, fqn: str):
        def hook(module, args, kwargs):
            name = self._call_name(fqn, starting=True)
            if name is not None:
                self._entered(name, (args, kwargs))
        return hook

    def _post(self, fqn: str):
        def hook(module, args, kwargs, output):
            name = self._call_name(fqn, starting=False)
            if name is not None:
                self._left(name, output)
        return hook

    def _entered(self, name: str, args_kwargs: Any) -> None:
        leaves, spec = pytree.tree_flatten(args_kwargs)
        self._calls[name] = {"inputs": [_graph_value(v) for v in leaves], "in_spec": spec}

    def _left(self, name: str, output: Any) -> None:
        if name in self._calls:
            leaves, spec = pytree.tree_flatten(output)
            self._calls[name].update(outputs=[_graph_value(v) for v in leaves], out_spec=spec)

    def boundary(self, call_name: str, fqn: str, entering: bool, values: Any) -> None:
        """A front end reports that the call ``call_name`` of the submodule at ``fqn`` starts
        with ``values`` (its ``(args, kwargs)``) or ends with them (its output). Calls of a
        module not preserved, or made through another name of a shared module, are not kept."""
        if fqn not in self._modules or module_paths.split_call_name(call_name)[0] != fqn:
            return
        if entering:
            self._entered(call_name, values)
        else:
            self._left(call_name, values)

    def _signature(self, name: str, graph: Optional[torch.fx.Graph]) -> Optional[ModuleCallSignature]:
        found = self._calls.get(name)
        if found is None or "out_spec" not in found:
            return None  # never called (or the call raised)

        def argument(value: Any) -> Any:
            if graph is not None and isinstance(value, torch.fx.Node) \
                    and isinstance(value.meta.get("val"), torch.SymInt):
                # the tracer may have dropped or merged the node that made a size
                value = size_nodes.size_node(graph, value.meta["val"], value) or value
            return _argument(value)

        return ModuleCallSignature([argument(v) for v in found["inputs"]],
                                   [argument(v) for v in found["outputs"]],
                                   found["in_spec"], found["out_spec"])

    def entries(self, graph: Optional[torch.fx.Graph] = None) -> list[ModuleCallEntry]:
        """The call graph after the root's entry: the module tree, then further calls. With the
        program's ``graph``, every size a signature names is a node of it (:mod:`..trace.size_nodes`)."""
        tree = [fqn for fqn, _ in self._tree if fqn]
        listed = set(tree)
        out = [ModuleCallEntry(fqn, self._signature(fqn, graph)) for fqn in tree]
        further = ((name, self._signature(name, graph)) for name in self._calls if name not in listed)
        out += [ModuleCallEntry(name, sig) for name, sig in further if sig is not None]
        return out


def preserved_modules(root: Optional[torch.nn.Module], fqns: Sequence[str],
                      tree: Optional[list[tuple[str, torch.nn.Module]]] = None,
                      replays_graph: bool = False, stacklevel: int = 6) -> dict[str, torch.nn.Module]:
    """The submodules ``preserve_module_call_signature`` names, by FQN; an error naming the
    paths that are not submodules of ``root`` (a warning, and the paths left out, where ``root``
    is a graph module traced before: ``stacklevel`` points it at the user's export call)."""
    fqns = list(fqns or ())
    if not fqns:
        return {}
    if root is None:
        raise ExportInputError(
            "preserve_module_call_signature names submodules, but the exported program is a "
            "plain function with no submodules.", fix="Pass preserve_module_call_signature=().")
    modules = dict(tree if tree is not None else module_tree(root))
    missing = [f for f in fqns if f not in modules or f == ""]
    if missing and replays_graph:
        # a graph module exported again (a program's module()): its submodules' calls are
        # inlined in its graph, so there is no call whose signature could be recorded
        warnings.warn(f"preserve_module_call_signature names {missing}, which {type(root).__name__} "
                      f"(a graph module whose graph was traced before) does not call as submodules; "
                      f"their call signatures are not recorded, so unflatten of this program "
                      f"cannot swap them.", stacklevel=stacklevel)
        fqns = [f for f in fqns if f not in missing]
    elif missing:
        raise ExportInputError(
            f"preserve_module_call_signature names {missing}, which are not submodules of "
            f"{type(root).__name__}.",
            fix=f"Use paths as in model.named_modules(); some that exist: {list(modules)[1:6]}.")
    return {f: modules[f] for f in fqns}


def active_recorder() -> Optional[CallRecorder]:
    """The call recorder of the trace running now, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


_ACTIVE: list[CallRecorder] = []  # the recorders entered and not yet left (one per running trace)


def module_tree(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """Every (FQN, module) of ``root``'s tree, the root first, a module under each of its
    names (as ``named_modules(remove_duplicate=False)``), depth first in registration
    order; a module holding one of its ancestors is not followed into (torch's walk would
    not end)."""
    out: list[tuple[str, torch.nn.Module]] = []

    def visit(module: torch.nn.Module, fqn: str, path: tuple) -> None:
        out.append((fqn, module))
        for name, child in children_of(module).items():
            if child is not None and id(child) not in path:
                visit(child, f"{fqn}.{name}" if fqn else name, path + (id(child),))

    visit(root, "", (id(root),))
    return out
