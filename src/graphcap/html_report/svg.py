"""One view of the graph (``views.View``) as inline SVG markup.

Operators are coloured by what they do (compute-heavy, normalization,
activation, shape/view, control flow, assertion), module calls are drawn as
double-bordered boxes that open the child's view when clicked
(``data-open`` is read by the page's script), ports to the outside are
dashed pills. Every box has a ``<title>`` (the browser's hover text) with
the node's value and the user's source line.
"""
from __future__ import annotations

from html import escape

import torch

from .layout import Drawing, layout
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
    if unit.kind == "module":
        text = max(len(unit.label), len(_module_subtitle(unit)))
        return max(90.0, text * CHAR_W + 24), MODULE_H
    if unit.kind in ("in", "out"):
        return max(50.0, len(unit.label) * (CHAR_W - 0.6) + 18), PORT_H
    return max(56.0, len(unit.label) * CHAR_W + 18), NODE_H


def _module_subtitle(unit: Unit) -> str:
    detail = unit.detail.split(": ", 1)[-1].split(" (click")[0]
    return detail


def _box(unit: Unit, x: float, y: float, w: float, h: float) -> str:
    title = f"<title>{escape(unit.detail or unit.label)}</title>"
    left = x - w / 2
    if unit.kind == "module":
        return (f'<g class="unit module" data-open="{escape(unit.group or "")}" tabindex="0">{title}'
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
    return (f'<g class="unit node {css}">{title}'
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
    val = unit.node.meta.get("val") if unit.node is not None and unit.kind != "module" else None
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def view_svg(view: View, marker_id: str = "arrow") -> str:
    """The SVG element drawing ``view``; ``marker_id`` must be unique in the page (a marker inside a
    hidden view does not draw for the others)."""
    sizes = {}
    for unit in view.units:
        w, h = _size(unit)
        sizes[unit.id] = (w, h, unit.order)
    drawing: Drawing = layout(sizes, view.edges)
    by_id = {u.id: u for u in view.units}
    parts = []
    for a, _, pts in drawing.edges:
        css = "edge sym" if _is_size_value(by_id[a]) else "edge"  # sizes drawn light: tensors stand out
        parts.append(f'<path class="{css}" d="{_path(pts)}" marker-end="url(#{marker_id})"/>')
    for a, b in drawing.back_edges:
        src, dst = drawing.boxes[a], drawing.boxes[b]
        parts.append(f'<path class="edge back" d="{_path([(src.x, src.y + src.height), (dst.x, dst.y)])}" '
                     f'marker-end="url(#{marker_id})"/>')
    for box in drawing.boxes.values():
        parts.append(_box(by_id[box.id], box.x, box.y, box.width, box.height))
    w, h = max(drawing.width, 120), max(drawing.height, 40)
    return (f'<svg class="graph" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" role="img">'
            f'<defs><marker id="{marker_id}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>'
            + "".join(parts) + "</svg>")
