"""A layered (top-to-bottom) drawing of a small directed graph, in plain Python.

The classic recipe, kept short: each box gets a layer (its longest path from
a source; a source sits just above its first user, so a weight is drawn next
to the operator that reads it); edges that skip layers get invisible bend
points, one per layer crossed; boxes in a layer are ordered by a few sweeps of
the barycenter heuristic (fewer crossings); then x positions move towards the
average of their neighbours, pushed apart where they overlap. Edges against
the graph's order (a cycle between module boxes, which a module called in
pieces can make) are drawn but do not take part in layering.

Good enough for the tens of boxes of one module's view; linear in the boxes
and edges per sweep.
"""
from __future__ import annotations

from dataclasses import dataclass, field

H_GAP = 24
V_GAP = 34
MARGIN = 16


@dataclass
class Box:
    id: str
    width: float
    height: float
    order: float
    x: float = 0.0  # centre
    y: float = 0.0  # top
    layer: int = 0
    dummy: bool = False


@dataclass
class Drawing:
    boxes: dict[str, Box]
    edges: list[tuple[str, str, list[tuple[float, float]]]]  # (src, dst, points)
    width: float
    height: float
    back_edges: list[tuple[str, str]] = field(default_factory=list)


def layout(sizes: dict[str, tuple[float, float, float]], edges: list[tuple[str, str]]) -> Drawing:
    """Place boxes ``id -> (width, height, order)`` and route ``edges`` between them."""
    boxes = {i: Box(i, w, h, o) for i, (w, h, o) in sizes.items()}
    forward = [(a, b) for a, b in edges if boxes[a].order < boxes[b].order]
    back = [(a, b) for a, b in edges if boxes[a].order >= boxes[b].order]
    preds: dict[str, list[str]] = {i: [] for i in boxes}
    succs: dict[str, list[str]] = {i: [] for i in boxes}
    for a, b in forward:
        preds[b].append(a)
        succs[a].append(b)
    for box in sorted(boxes.values(), key=lambda b: b.order):  # order is topological for forward edges
        box.layer = max((boxes[p].layer + 1 for p in preds[box.id]), default=0)
    for box in sorted(boxes.values(), key=lambda b: -b.order):  # sources just above their first user
        if not preds[box.id] and succs[box.id]:
            box.layer = max(0, min(boxes[s].layer for s in succs[box.id]) - 1)

    # bend points for edges that skip layers
    chains: list[tuple[str, str, list[str]]] = []
    lpreds: dict[str, list[str]] = {i: [] for i in boxes}
    lsuccs: dict[str, list[str]] = {i: [] for i in boxes}
    for a, b in forward:
        path = [a]
        for layer in range(boxes[a].layer + 1, boxes[b].layer):
            d = f"~{a}>{b}@{layer}"
            boxes[d] = Box(d, 4, 0, (boxes[a].order + boxes[b].order) / 2, layer=layer, dummy=True)
            lpreds[d], lsuccs[d] = [], []
            path.append(d)
        path.append(b)
        for u, v in zip(path, path[1:]):
            lsuccs[u].append(v)
            lpreds[v].append(u)
        chains.append((a, b, path[1:-1]))

    n_layers = max((b.layer for b in boxes.values()), default=0) + 1
    layers: list[list[Box]] = [[] for _ in range(n_layers)]
    for box in sorted(boxes.values(), key=lambda b: b.order):
        layers[box.layer].append(box)

    def place_in_order() -> None:
        for row in layers:
            x = 0.0
            for box in row:
                box.x = x + box.width / 2
                x += box.width + H_GAP

    place_in_order()
    for sweep in range(6):  # barycenter ordering, alternately downwards and upwards
        down = sweep % 2 == 0
        rows = layers[1:] if down else layers[-2::-1]
        for row in rows:
            for box in row:
                near = lpreds[box.id] if down else lsuccs[box.id]
                if near:
                    box.x = sum(boxes[n].x for n in near) / len(near)
            row.sort(key=lambda b: b.x)
            x = 0.0
            for box in row:
                box.x = x + box.width / 2
                x += box.width + H_GAP

    for sweep in range(8):  # x towards the neighbours' average, order kept, overlaps pushed apart
        for row in layers if sweep % 2 == 0 else layers[::-1]:
            for box in row:
                near = lpreds[box.id] + lsuccs[box.id]
                if near:
                    box.x = (box.x + sum(boxes[n].x for n in near) / len(near)) / 2
            _separate(row)
    left = min((b.x - b.width / 2 for b in boxes.values()), default=0)
    y = float(MARGIN)
    for row in layers:
        height = max((b.height for b in row), default=0)
        for box in row:
            box.x += MARGIN - left
            box.y = y + (height - box.height) / 2
        y += height + V_GAP
    width = max((b.x + b.width / 2 for b in boxes.values()), default=0) + MARGIN

    routed = []
    for a, b, bends in chains:
        src, dst = boxes[a], boxes[b]
        pts = [(src.x, src.y + src.height)] + [(boxes[d].x, boxes[d].y) for d in bends] + [(dst.x, dst.y)]
        routed.append((a, b, pts))
    real = {i: b for i, b in boxes.items() if not b.dummy}
    return Drawing(real, routed, width, y - V_GAP + MARGIN, back)


def _separate(row: list[Box]) -> None:
    """Push boxes of a row apart (keeping their order) so that none overlap, then shift the row
    back as a whole so that on average the boxes stay where they wanted to be (pushing only
    rightwards would drift wide rows to the right)."""
    if not row:
        return
    wanted = sum(b.x for b in row) / len(row)
    for a, b in zip(row, row[1:]):
        need = a.x + a.width / 2 + H_GAP + b.width / 2
        if b.x < need:
            b.x = need
    shift = sum(b.x for b in row) / len(row) - wanted
    for b in row:
        b.x -= shift
