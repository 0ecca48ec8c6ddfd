"""How torch.export names a grad-mode or autocast region, so graphcap names it alike.

torch.export cuts a graph into numbered pieces at every mode switch (piece
0 before the first), moves each piece into a submodule, puts back inline the
pieces that need no wrapper, and turns the others into a wrapper call. What
users then read in the printed program follows from that cut:

* the submodule of the region that is piece ``k`` is ``submod_<k>``, and the
  ``get_attr`` nodes fetching the regions' submodules are numbered on from
  the last piece (``submod_3 = self.submod_1`` in a graph cut in pieces 0-2);
* a region's outputs are listed in the order the rest of the graph first
  uses them;
* a region with one output gives the call that output's name and reads it
  with a fresh ``getitem``, numbered after the ``getitem`` nodes the cut made
  for pieces with several outputs.

The pieces themselves are computed by :mod:`graphcap.trace.control_flow.regions`,
which owns the rule for where a region starts and ends; this module only
derives names and orders.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch.fx


@dataclass
class RegionNames:
    attribute: str  # the submodule's attribute name
    node: str  # the get_attr node's name
    single_output_item: str  # the getitem of a region with one output
    output_rank: dict[torch.fx.Node, int] = field(default_factory=dict)  # order of first use

    def order(self, outputs: list[torch.fx.Node]) -> list[torch.fx.Node]:
        return sorted(outputs, key=lambda n: self.output_rank.get(n, len(self.output_rank)))


def _outputs_by_first_use(graph: torch.fx.Graph, piece_of: dict[torch.fx.Node, int]) -> dict[int, list]:
    """Each piece's values used outside it, in the order of their first such use."""
    outputs: dict[int, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        for value in node.all_input_nodes:
            piece = piece_of.get(value)
            if piece is not None and piece_of.get(node) != piece and value not in outputs.setdefault(piece, []):
                outputs[piece].append(value)
    return outputs


def name_regions(graph: torch.fx.Graph, piece_of: dict[torch.fx.Node, int],
                 regions: list[int]) -> dict[int, RegionNames]:
    """Names for the regions that are pieces ``regions`` (ascending) of ``graph``,
    cut as ``piece_of`` says (every node but placeholders, constants and the output)."""
    last = max(piece_of.values(), default=0)
    outputs = _outputs_by_first_use(graph, piece_of)
    made_by_cut = sum(len(outs) for outs in outputs.values() if len(outs) > 1)
    names: dict[int, RegionNames] = {}
    single = 0
    for i, piece in enumerate(regions):
        outs = outputs.get(piece, [])
        item = "getitem"
        if len(outs) == 1:
            n = made_by_cut + single
            item = f"getitem_{n}" if n else "getitem"
            single += 1
        names[piece] = RegionNames(f"submod_{piece}", f"submod_{last + 1 + i}", item,
                                   {v: rank for rank, v in enumerate(outs)})
    return names


def cut_node(node: torch.fx.Node) -> bool:
    """Does ``node`` belong to a piece? Inputs, ``get_attr`` nodes (copied into every
    piece that reads them) and the output do not."""
    return node.op not in ("placeholder", "get_attr", "output")
