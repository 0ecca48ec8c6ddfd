"""Exporting an existing ``fx.GraphModule`` keeps its nodes' metadata.

A graph module handed to ``export`` (a program's ``module()`` exported again,
a ``make_fx`` graph, a graph a pass wrote) already says, node by node, where
each operation came from: ``stack_trace``, ``nn_module_stack``,
``source_fn_stack`` and the user's ``custom`` annotations. Its generated
``forward`` is code nobody wrote, so tracing it the ordinary way would find no
user frame and no module calls, and drop all of that.

Instead its graph is run node by node with each node the "current node" of
``torch.fx.traceback`` (``preserve_node_meta``), so the operators recorded
for it inherit its metadata, as they do in ``run_decompositions``; the
graph module's own ``meta["custom"]`` is carried to the program's graph module
(:func:`carry_graph_meta`). A graph module whose nodes carry none of it runs
its ``forward`` as any module does. Hooks on the graph module itself run around the replay, in the
module's own call.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch
import torch.fx
import torch.fx.traceback as fx_traceback

from .. import auto_flatten
from ..pytree import qualified_name
from ..torch_private.fx import pytree_specs_of
from ..torch_private.modules import forward_hook_functions

_SOURCE_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack", "custom")

REPLAY_FILE = __file__
"""The replay's own frame is graphcap's, never a user frame: a node whose source node has no
``stack_trace`` records only the frames below it (a submodule's ``forward``), as torch's does."""


def _carries_metadata(gm: torch.fx.GraphModule) -> bool:
    # symbolic_trace records nn_module_stack on call_module / call_method nodes
    return any(node.op in ("call_function", "call_method", "call_module")
               and any(node.meta.get(k) for k in _SOURCE_KEYS) for node in gm.graph.nodes)


def _has_hooks(root: torch.fx.GraphModule) -> bool:
    """Forward hooks or pre-hooks on the graph module itself (``module()``'s own input check,
    marked ``graphcap_input_check``, aside: the graph checks the inputs too). The replay runs the
    graph, not the module's call, so it would leave a user's hook out of the program (as
    torch.export does); with hooks, the replay runs inside the module's own call."""
    return any(not getattr(hook, "graphcap_input_check", False) for hook in forward_hook_functions(root))


def replaying_call(root: Any) -> Optional[Callable[..., Any]]:
    """A call that runs ``root``'s graph with its node metadata current, or None when ``root`` is
    not a graph module whose nodes carry any (see the module docstring)."""
    if not isinstance(root, torch.fx.GraphModule) or not _carries_metadata(root):
        return None
    in_spec, out_spec = pytree_specs_of(root)

    signature = inspect.signature(root.forward)  # the generated forward's (the replay may stand in for it)
    names = list(signature.parameters)

    def replay(*args: Any, **kwargs: Any) -> Any:
        if in_spec is not None and in_spec.num_children == 2:
            # as the generated forward does: its arguments by name, the first ones positional
            bound = signature.bind(*args, **kwargs).arguments
            values = [bound.get(n) for n in names]
            n_positional = in_spec.child(0).num_children
            keys = in_spec.child(1).context
            flat = auto_flatten.flatten_by_spec(
                (values[:n_positional], dict(zip(keys, values[n_positional:]))), in_spec)
        else:
            flat = [*args, *kwargs.values()]
        with fx_traceback.preserve_node_meta():
            out = torch.fx.Interpreter(root).run(*flat, enable_io_processing=False)
        if out_spec is not None:
            return auto_flatten.unflatten(list(out) if isinstance(out, (list, tuple)) else [out], out_spec)
        return out

    replay.__name__ = "forward"  # its operators are the module's forward's
    if not _has_hooks(root):
        return replay

    def replay_with_hooks(*args: Any, **kwargs: Any) -> Any:
        # the module's own call runs its hooks around the replay, standing in for its forward
        # for this one call (the instance attribute is taken back after)
        had = "forward" in root.__dict__
        previous = root.__dict__.get("forward")
        root.__dict__["forward"] = replay
        try:
            return root(*args, **kwargs)
        finally:
            if had:
                root.__dict__["forward"] = previous
            else:
                del root.__dict__["forward"]

    replay_with_hooks.__name__ = "forward"
    return replay_with_hooks


def carry_graph_meta(source: Any, gm: torch.fx.GraphModule, input_specs: list) -> None:
    """What the recorder cannot carry from an exported graph module to the program: the graph
    module's own ``meta["custom"]``, and the ``custom`` annotations of its inputs (a lifted
    parameter's from the attribute read of the same FQN, a user input's from the placeholder at
    its position) and of its output."""
    if not isinstance(source, torch.fx.GraphModule):
        return
    if source.meta.get("custom"):
        gm.meta["custom"] = dict(source.meta["custom"])
    old_inputs = [n for n in source.graph.nodes if n.op == "placeholder"]
    reads = {n.target: n for n in source.graph.nodes if n.op == "get_attr"}
    new_inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    user = iter(old_inputs)
    for node, spec in zip(new_inputs, input_specs):
        old = next(user, None) if spec.kind.name == "USER_INPUT" else reads.get(spec.target)
        if old is not None and old.meta.get("custom") and "custom" not in node.meta:
            node.meta["custom"] = dict(old.meta["custom"])
    _root_in_every_module_stack(source, gm)
    old_out = next((n for n in reversed(source.graph.nodes) if n.op == "output"), None)
    new_out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if old_out is not None and new_out is not None and old_out.meta.get("custom"):
        new_out.meta.setdefault("custom", dict(old_out.meta["custom"]))


def _root_in_every_module_stack(source: torch.fx.GraphModule, gm: torch.fx.GraphModule) -> None:
    """Every operator runs in the exported module's own forward, as in any program: a stack carried
    from a graph that records none (make_fx) or only submodule calls under their paths
    (symbolic_trace: ``{'l': ('l', Linear)}``) gets the root's entry first and torch.export's keys
    (``L__self__l``). Stacks that already name the root (a program's ``module()``) stay as they are."""
    from .module_paths import call_key
    root_entry = (call_key(""), ("", qualified_name(type(source))))
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        if any(path == "" for path, _ in stack.values()):
            continue
        entries = [root_entry] + [(key if key.startswith(call_key("")) else call_key(path), (path, cls))
                                  for key, (path, cls) in stack.items()]
        node.meta["nn_module_stack"] = dict(entries)
