"""Carry the module call graph's signatures through the retrace of run_decompositions.

A signature (the root's, and every ``preserve_module_call_signature`` entry)
names the graph nodes that hold a module call's inputs and outputs. The
retrace makes a new graph with new names (``ones`` becomes ``full``, and an
old name may now belong to another value), so the names are not looked up
again: every old node a signature names is watched while the old graph is
replayed, the value it produced is returned by the traced function as an extra
output, and the node make_fx recorded for that output is the new holder. Those
extra outputs are taken off the graph again before the program is built; the
passes in between (which rewrite uses) keep them up to date for free.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx

from ..signature import ConstantArgument, ModuleCallEntry, ModuleCallSignature, SymIntArgument
from ..torch_private.functional import FunctionalTensor
from ..trace.size_nodes import size_node


def _is_named_value(arg: Any) -> bool:
    return not isinstance(arg, ConstantArgument) and isinstance(getattr(arg, "name", None), str)


class CallGraphCarry:
    """Watches the old nodes the signatures name; maps them to the retraced graph's nodes."""

    def __init__(self, gm: torch.fx.GraphModule, entries: list[ModuleCallEntry]):
        by_name = {n.name: n for n in gm.graph.nodes}
        watched: dict[torch.fx.Node, None] = {}
        for entry in entries:
            if entry.signature is not None:
                for arg in [*entry.signature.inputs, *entry.signature.outputs]:
                    if _is_named_value(arg) and arg.name in by_name:
                        watched[by_name[arg.name]] = None
        self.watched = list(watched)
        self.values: dict[torch.fx.Node, Any] = {}
        self.new: dict[str, Any] = {}
        self._gm: Optional[torch.fx.GraphModule] = None

    def reset(self) -> None:
        self.values = {}

    def record(self, node: torch.fx.Node, value: Any) -> None:
        """The value ``node`` produced, as it is when the node runs (later writes do not count)."""
        if node in self.values or node not in self.watched:
            return
        if isinstance(value, FunctionalTensor):
            value = value.from_functional()
        self.values[node] = value

    def extra_outputs(self) -> list:
        return [self.values.get(n) for n in self.watched]

    def take(self, gm: torch.fx.GraphModule) -> None:
        """Remove the extra outputs from ``gm``; remember which new node holds each watched value."""
        self._gm = gm
        if not self.watched:
            return
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        values = list(output.args[0])
        k = len(self.watched)
        for old, new in zip(self.watched, values[-k:]):
            if old in self.values:  # a node the replay never reached keeps its name
                self.new[old.name] = new
        output.args = (tuple(values[:-k]),)
        gm.recompile()

    def _carried(self, arg: Any) -> Any:
        if not _is_named_value(arg) or arg.name not in self.new:
            return arg
        new = self.new[arg.name]
        if isinstance(new, torch.fx.Node) and isinstance(arg, SymIntArgument) and self._gm is not None \
                and isinstance(new.meta.get("val"), torch.SymInt):
            # a size passed to a preserved call that nothing else uses: the clean-up after the
            # retrace dropped its node; compute it again from the input sizes
            found = size_node(self._gm.graph, new.meta["val"], new)
            return SymIntArgument(found.name) if found is not None else arg
        if isinstance(new, torch.fx.Node):
            return type(arg)(new.name)
        if isinstance(new, (int, float, bool, str)) or new is None:
            return ConstantArgument(arg.name, new)  # the retrace specialized it
        return arg

    def call_graph(self, entries: list[ModuleCallEntry], user_outputs: list) -> list[ModuleCallEntry]:
        """``entries`` with every signature argument renamed to its holder in the new graph."""
        carried = []
        nodes_before = len(self._gm.graph.nodes) if self._gm is not None else 0
        for entry in entries:
            sig: Optional[ModuleCallSignature] = entry.signature
            if sig is not None:
                # the root entry lists the user outputs only if it did before (programs
                # captured now leave the root's lists empty, as torch.export does)
                outputs = ((user_outputs if sig.outputs else []) if entry.fqn == ""
                           else [self._carried(a) for a in sig.outputs])
                sig = ModuleCallSignature([self._carried(a) for a in sig.inputs], list(outputs), sig.in_spec,
                                          sig.out_spec, sig.forward_arg_names)
            carried.append(ModuleCallEntry(entry.fqn, sig))
        if self._gm is not None and len(self._gm.graph.nodes) != nodes_before:
            self._gm.recompile()  # sizes computed again (_carried)
        return carried
