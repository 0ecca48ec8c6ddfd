"""One view of the graph (``views.View``) as inline SVG markup.

Operators are coloured by what they do (compute-heavy, normalization,
activation, shape/view, control flow, assertion), module calls are drawn as
double-bordered boxes that open the child's view when clicked
(``data-open`` is read by the page's script), ports to the outside are
dashed pills, a run of repeated calls is a stack of cards that expands the
view (``data-expand``). Every box has a ``<title>`` (the browser's hover text)
with the node's value and the user's source line, and a ``data-s`` text the
page's search box matches. Edges the view marks ``aux`` (sizes and masks
fanning out) take no part in the layout and carry the class ``aux``, which
the page hides unless asked.
"""
from __future__ import annotations

from html import escape
from typing import Optional

import torch

from .layout import layout
from .views import Unit, View

CHAR_W = 7.0
NODE_H = 26
MODULE_H = 42
PORT_H = 22

_CATEGORIES = [  # (words in the operator's name, css class)
    (("conv", "linear", "matmul", "mm", "bmm", "addmm", "einsum", "attention", "embedding", "baddbmm"), "op-compute"),
    (("norm",), "op-norm"),
    (("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "hardswish", "hardsigmoid", "elu", "mish"), "op-act"),
    (("view", "reshape", "permute", "transpose", "expand", "flatten", "unsqueeze", "squeeze", "slice", "select",
      "cat", "stack", "split", "chunk", "contiguous", "clone", "sym_size", "t.", "unbind", "narrow"), "op-shape"),
    (("cond", "while_loop", "map", "scan", "wrap_with"), "op-control"),
    (("assert", "_check", "sym_constrain"), "op-assert"),
]


def op_class(label: str) -> str:
    name = label.lower() + "."
    for words, css in _CATEGORIES:
        if any(w in name for w in words):
            return css
    return "op-other"


def _size(unit: Unit) -> tuple[float, float]:
    if unit.kind in ("module", "run"):
        text = max(len(unit.label), len(_module_subtitle(unit)))
        return max(90.0, text * CHAR_W + 24), MODULE_H
    if unit.kind in ("in", "out"):
        return max(50.0, len(unit.label) * (CHAR_W - 0.6) + 18), PORT_H
    return max(56.0, len(unit.label) * CHAR_W + 18), NODE_H


def _module_subtitle(unit: Unit) -> str:
    detail = unit.detail.split(": ", 1)[-1].split(" (click")[0]
    return detail


def _box(unit: Unit, x: float, y: float, w: float, h: float, searchable: bool = True) -> str:
    title = f"<title>{escape(unit.detail or unit.label)}</title>"
    left = x - w / 2
    find = f' data-s="{escape(unit.search.lower())}"' if searchable and unit.search else ""
    if unit.kind == "run":
        cards = "".join(f'<rect class="card" x="{left + d:.1f}" y="{y - d:.1f}" width="{w:.1f}" height="{h}" rx="6"/>'
                        for d in (8, 4))
        return (f'<g class="unit module run" data-expand="1" tabindex="0"{find}>{title}{cards}'
                f'<rect x="{left:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" rx="6"/>'
                f'<text x="{x:.1f}" y="{y + 17:.1f}">{escape(unit.label)}</text>'
                f'<text class="sub" x="{x:.1f}" y="{y + 32:.1f}">{escape(_module_subtitle(unit))}</text></g>')
    if unit.kind == "module":
        return (f'<g class="unit module" data-open="{escape(unit.group or "")}" tabindex="0"{find}>{title}'
                f'<rect x="{left:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" rx="6"/>'
                f'<rect class="inner" x="{left + 3:.1f}" y="{y + 3:.1f}" width="{w - 6:.1f}" height="{h - 6}" rx="4"/>'
                f'<text x="{x:.1f}" y="{y + 17:.1f}">{escape(unit.label)}</text>'
                f'<text class="sub" x="{x:.1f}" y="{y + 32:.1f}">{escape(_module_subtitle(unit))}</text></g>')
    if unit.kind in ("in", "out"):
        return (f'<g class="unit port port-{unit.kind}">{title}'
                f'<rect x="{left:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" rx="{h / 2}"/>'
                f'<text x="{x:.1f}" y="{y + 15:.1f}">{escape(unit.label)}</text></g>')
    node = unit.node
    css = "op-input" if node is not None and node.op in ("placeholder", "get_attr") else \
        "op-output" if node is not None and node.op == "output" else op_class(unit.label)
    return (f'<g class="unit node {css}"{find}>{title}'
            f'<rect x="{left:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" rx="4"/>'
            f'<text x="{x:.1f}" y="{y + 17:.1f}">{escape(unit.label)}</text></g>')


def _path(points: list[tuple[float, float]]) -> str:
    """A smooth vertical curve through ``points``."""
    (x0, y0), rest = points[0], points[1:]
    d = f"M{x0:.1f},{y0:.1f}"
    px, py = x0, y0
    for x, y in rest:
        mid = (py + y) / 2
        d += f" C{px:.1f},{mid:.1f} {x:.1f},{mid:.1f} {x:.1f},{y:.1f}"
        px, py = x, y
    return d


def _is_size_value(unit: Unit) -> bool:
    """Whether the unit's value is a size or other Python number (``sym_size``, size arithmetic)."""
    val = unit.node.meta.get("val") if unit.node is not None and unit.kind not in ("module", "run") else None
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


AUX_GAP = 60  # between the drawing and the size/mask computations drawn to its right


def view_svg(view: View, marker_id: str = "arrow", searchable: Optional[set] = None) -> tuple[str, int]:
    """The SVG element drawing ``view`` and the number of boxes it first shows; ``marker_id`` must be
    unique in the page (a marker inside a hidden view does not draw for the others). ``searchable``
    (unit ids, default all) are the boxes the search box finds here (a box drawn in two variants of
    a view is found in one).

    The view's main boxes are laid out without the aux edges; the boxes that only compute what
    those carry (``view.aux_units``) are laid out on their own to the right, in a group the page
    shows with the aux edges. The SVG is sized to the main drawing (``data-w``/``data-h``) and
    to both (``data-wall``/``data-hall``)."""
    aux_units = view.aux_units if len(view.aux_units) < len(view.units) else set()
    by_id = {u.id: u for u in view.units}

    def sizes_of(ids: set, inside: bool) -> dict:
        out = {}
        for unit in view.units:
            if (unit.id in ids) == inside:
                w, h = _size(unit)
                out[unit.id] = (w, h + (8 if unit.kind == "run" else 0), unit.order)
        return out

    def plain(a: str, b: str) -> bool:
        return (a, b) not in view.aux and (a in aux_units) == (b in aux_units)

    main = layout(sizes_of(aux_units, False), [(a, b) for a, b in view.edges if plain(a, b) and a not in aux_units])
    side = layout(sizes_of(aux_units, True), [(a, b) for a, b in view.edges if plain(a, b) and a in aux_units]) \
        if aux_units else None
    shift = main.width + AUX_GAP
    boxes = dict(main.boxes)
    if side is not None:
        for box in side.boxes.values():
            box.x += shift
            boxes[box.id] = box

    def top(box_id: str) -> float:
        return boxes[box_id].y + (8 if by_id[box_id].kind == "run" else 0)

    main_parts, side_parts, aux_parts = [], [], []
    for drawing, parts, dx in ((main, main_parts, 0.0), (side, side_parts, shift)):
        if drawing is None:
            continue
        for a, _, pts in drawing.edges:
            css = "edge sym" if _is_size_value(by_id[a]) else "edge"  # sizes drawn light: tensors stand out
            pts = [(x + dx, y) for x, y in pts] if dx else pts
            parts.append(f'<path class="{css}" d="{_path(pts)}" marker-end="url(#{marker_id})"/>')
        for a, b in drawing.back_edges:
            src = boxes[a]
            parts.append(f'<path class="edge back" d="{_path([(src.x, src.y + src.height), (boxes[b].x, top(b))])}" '
                         f'marker-end="url(#{marker_id})"/>')
    for a, b in view.edges:
        if not plain(a, b):
            src = boxes[a]
            aux_parts.append(f'<path class="edge aux" d="{_path([(src.x, src.y + src.height), (boxes[b].x, top(b))])}"'
                             f' marker-end="url(#{marker_id})"/>')
    for box_id, box in boxes.items():
        unit = by_id[box_id]
        html = _box(unit, box.x, top(box_id), box.width, box.height - (8 if unit.kind == "run" else 0),
                    searchable is None or box_id in searchable)
        (side_parts if box_id in aux_units else main_parts).append(html)
    w, h = max(main.width, 120), max(main.height, 40)
    w_all = max(w, shift + side.width) if side is not None else w
    h_all = max(h, side.height) if side is not None else h
    label = (f'<text class="auxlabel" x="{shift + 8:.0f}" y="12">sizes and masks</text>' if side is not None else "")
    svg = (f'<svg class="graph" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" '
           f'data-w="{w:.0f}" data-h="{h:.0f}" data-wall="{w_all:.0f}" data-hall="{h_all:.0f}" role="img">'
           f'<defs><marker id="{marker_id}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>'
           + "".join(main_parts)
           + (f'<g class="auxpart">{label}{"".join(side_parts)}</g>' if side is not None else "")
           + "".join(aux_parts) + "</svg>")
    return svg, len(main.boxes)
