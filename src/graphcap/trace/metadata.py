"""Node metadata the IR promises: ``val``, ``stack_trace``, ``nn_module_stack``,
``source_fn_stack``.

The recorder already leaves ``val`` (fake tensors), ``stack_trace`` (the user
frames) and ``nn_module_stack`` (module path → (FQN, class)) on operator nodes.
This pass makes the set complete and uniform, in control-flow subgraphs too:
placeholders and the output carry no source information; every operator
node has all four keys; and ``source_fn_stack`` names, for each node, the
module or function the user called that produced it (as strings: torch's
branch capture leaves operator objects there, which are replaced).
"""
from __future__ import annotations

import torch
import torch.fx


def _source_fn_stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """The user-level calls behind ``node``, outermost first.

    One entry per submodule on the node's module stack (its attribute name and
    class), then the torch function or tensor method the user called
    (``('linear_1', 'builtin_function_or_method.linear')``).
    """
    stack = [(fqn.rsplit(".", 1)[-1], cls) for fqn, cls in node.meta.get("nn_module_stack", {}).values() if fqn]
    torch_fn = node.meta.get("torch_fn")
    stack.append((torch_fn[0], torch_fn[1]) if torch_fn is not None else (node.name, str(node.target)))
    return stack


def _recorded_by_branch_capture(stack: object) -> bool:
    """A ``source_fn_stack`` torch's branch capture wrote: it holds operator objects
    (``('cond', <CondOp>)``) where graphcap's holds their names."""
    return isinstance(stack, list) and any(
        not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(e, str) for e in entry))
        for entry in stack)


def finalize(gm: torch.fx.GraphModule) -> None:
    """Complete the metadata of ``gm`` and of its control-flow subgraphs alike."""
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            _finalize_graph(sub)
    _place_unowned_nodes_in_root(gm)


def _place_unowned_nodes_in_root(gm: torch.fx.GraphModule) -> None:
    """Operator nodes no module call produced (the input-size reads runtime asserts add
    at the top of the graph) belong to the root module's forward: they get its entry.

    An empty module stack is no stack at all to consumers such as ``unflatten``, which
    place every node in the module its stack's innermost entry names.
    """
    root = next((entry for node in gm.graph.nodes
                 for key, entry in (node.meta.get("nn_module_stack") or {}).items()
                 if isinstance(entry, tuple) and entry[0] == ""), None)
    if root is None:
        return  # a function, not a module, was exported: there is no root to name
    for node in gm.graph.nodes:
        if node.op == "call_function" and not node.meta.get("nn_module_stack"):
            node.meta["nn_module_stack"] = {"": root}


def _finalize_graph(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            node.meta.pop("stack_trace", None)
            node.meta.pop("nn_module_stack", None)
            node.meta.pop("torch_fn", None)
            continue
        node.meta.setdefault("val", None)
        if node.op == "call_function":
            node.meta.setdefault("nn_module_stack", {})
            node.meta.setdefault("stack_trace", None)
            if "source_fn_stack" not in node.meta or _recorded_by_branch_capture(node.meta["source_fn_stack"]):
                node.meta["source_fn_stack"] = _source_fn_stack(node)
