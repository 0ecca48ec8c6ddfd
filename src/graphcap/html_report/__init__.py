"""``graphcap.report(ep, path)``: one self-contained HTML page about an exported program.

What a deployment engineer asks after an export, on one page that opens
offline: what the graph looks like (drawn per module call, collapsed below
the top level: ``views``), which operators it runs, what it takes and returns
and over which size ranges, what export assumed to get there (every
specialization and guard, with the user's source line, and the runtime
asserts the program checks), how long each export stage took, and — when
given — whether it matches eager across its dynamic range (``graphcap.verify``'s
result) and what a draft export found.
"""
from __future__ import annotations

import os
from html import escape
from pathlib import Path
from typing import Any, Optional, Union

import torch

from ..signature import InputKind
from . import page, sections
from .names import SymbolNames
from .svg import view_svg
from .views import ROOT, ModuleTree


def _tree_html(tree: ModuleTree, key: str, depth: int, open_depth: int, label: str = "(whole program)") -> str:
    group = tree.groups[key]
    parent = tree.groups[group.parent].path if group.parent else ""
    name = group.label[len(parent) + 1:] if parent and group.label.startswith(parent + ".") else group.label
    link = (f'<a data-open="{escape(tree.prefix + key)}" title="{escape(group.label)}">{escape(name if key else label)}'
            f'</a> <small>{escape(group.type_name)} {group.size}</small>')
    if not group.children:
        return f'<div class="leaf">{link}</div>'
    runs = {run.keys[0]: run for run in tree.runs(key)}  # repeated layers: one folded entry
    members = {k for run in runs.values() for k in run.keys}
    parts = []
    for c in group.children:
        if c in runs:
            run = runs[c]
            inner_run = "".join(_tree_html(tree, k, depth + 2, open_depth) for k in run.keys)
            parts.append(f'<details class="run"><summary>{escape(run.label)} <small>{len(run.keys)} × '
                         f'{escape(run.type_name)}</small></summary>{inner_run}</details>')
        elif c not in members:
            parts.append(_tree_html(tree, c, depth + 1, open_depth))
    inner = "".join(parts)
    return f'<details{" open" if depth < open_depth else ""}><summary>{link}</summary>{inner}</details>'


def _count(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _crumbs(tree: ModuleTree, key: str, trail: list[tuple[str, str]], tools: str = "") -> str:
    """Links back up: the views that led to this subgraph (``trail``), then the module chain."""
    parts = [f'<a data-open="{escape(k)}">{escape(n)}</a>' for k, n in trail]
    parent_path = ""
    for g in tree.breadcrumb(key):
        if g.key == ROOT and trail:
            continue
        name = "program" if g.key == ROOT else g.label[len(parent_path) + 1:] \
            if parent_path and g.label.startswith(parent_path + ".") else g.label  # "h.5" in transformer
        parent_path = g.path
        parts.append(f'<a data-open="{escape(tree.prefix + g.key)}">{escape(name)}</a>')
    group = tree.groups[key]
    what = f" — {escape(group.type_name)}, {_count(group.size)}" if key else f" — {_count(group.size)}"
    return f'<div class="crumbs">{" › ".join(parts)}{what}{tools}</div>'


def _trees(ep: Any, names: SymbolNames) -> list[tuple[ModuleTree, list[tuple[str, str]]]]:
    """The program's module tree, then one per control-flow subgraph (branches, loop bodies),
    each with the breadcrumb trail that leads to it."""
    out: list[tuple[ModuleTree, list[tuple[str, str]]]] = []
    state = frozenset(getattr(s.arg, "name", None) for s in ep.graph_signature.input_specs
                      if s.kind is not InputKind.USER_INPUT)

    def add(module: Any, prefix: str, trail: list[tuple[str, str]], state_names: frozenset) -> None:
        subs = {n.target: f"{prefix}{n.target}/" for n in module.graph.nodes
                if n.op == "get_attr" and isinstance(getattr(module, n.target, None), torch.fx.GraphModule)}
        out.append((ModuleTree(module.graph, prefix, subs, state_names, names), trail))
        for target, sub_prefix in subs.items():  # a subgraph's inputs are operands: no state of its own
            add(getattr(module, target), sub_prefix, (trail or [("", "program")]) + [(sub_prefix, target)],
                frozenset())

    add(ep.graph_module, "", [], state)
    return out


def first_view(tree: ModuleTree, share: float = 0.8) -> str:
    """The view the page opens on: the root, or down the chain of module calls that each hold most
    of the program (``GPT2LMHeadModel`` -> ``transformer``), to the first one that shows structure."""
    key = ROOT
    while True:
        group = tree.groups[key]
        big = [c for c in group.children if tree.groups[c].size >= share * group.size]
        if len(big) != 1:
            return key
        key = big[0]


def _view_html(tree: ModuleTree, key: str, trail: list[tuple[str, str]], marker: str,
               first: str = ROOT) -> tuple[str, int]:
    """One view's markup and the number of boxes it first shows. A view with runs of repeated
    calls holds two drawings: collapsed (shown) and expanded (shown on request)."""
    full = tree.prefix + key
    hidden = "" if full == first else " hidden"
    view = tree.view(key)
    svg, drawn = view_svg(view, marker)
    body = svg
    if view.runs:
        expanded = tree.view(key, collapse=False)
        members = {f"m:{k}" for run in view.runs for k in run.keys}
        svg_all, _ = view_svg(expanded, marker + "x", searchable=members)
        runs = ", ".join(f"{r.label} ({len(r.keys)} × {r.type_name})" for r in view.runs)
        body = (f'<div class="variant collapsed">{svg}</div><div class="variant expanded" hidden>{svg_all}</div>')
        toggle = (f'<button type="button" class="expand" data-expand="1" title="{escape(runs)}">expand repeated '
                  f'blocks</button>')
    else:
        toggle = ""
    label = (trail[-1][1] + "/" if trail else "") + (tree.groups[key].label if key else "program")
    return (f'<div class="view" data-key="{escape(full)}" data-label="{escape(label)}"{hidden}>'
            f'{_crumbs(tree, key, trail, toggle)}'
            f'<div class="canvas">{body}</div></div>', drawn)


def graph_section(ep: Any, open_depth: int = 1, max_views: int = 2000, names: Optional[SymbolNames] = None) -> str:
    """The graph: one view per module call (the root shown first) and per control-flow subgraph,
    the module tree beside them, and the tools to move around a big one (search, zoom, the
    size/mask edges toggle)."""
    trees = _trees(ep, names or SymbolNames(ep))
    first = first_view(trees[0][0])
    views, count, total = [], 0, 0
    for tree, trail in trees:
        for key in tree.keys():
            total += 1
            if count >= max_views:
                continue
            views.append(_view_html(tree, key, trail, f"arrow{count}", first)[0])
            count += 1
    note = "" if count == total else f"<p class=\"note\">Only the first {max_views} views are drawn.</p>"
    tree_html = _tree_html(trees[0][0], ROOT, 0, open_depth)
    subs = [f'<div class="leaf"><a data-open="{escape(t.prefix)}">{escape(t.prefix.rstrip("/"))}</a> '
            f'<small>subgraph {t.groups[ROOT].size}</small></div>' for t, _ in trees[1:]]
    if subs:
        tree_html += "<details open><summary>control-flow subgraphs</summary>" + "".join(subs) + "</details>"
    return (f"<p>Each module call is a box: click it (or its name in the tree) to open it; a stack of boxes is a "
            f"run of repeated layers (click to expand). Hover a box for its value and source line; drag to pan, "
            f"Ctrl+wheel or the buttons to zoom.</p>{page.LEGEND}{note}{page.TOOLBAR}"
            f"<div class=\"graphbox\"><div class=\"tree\">{tree_html}</div>"
            f"<div class=\"views\" data-first=\"{escape(first)}\">{''.join(views)}</div></div>")


def _facts(ep: Any) -> list[tuple[str, str]]:
    nodes = list(ep.graph.nodes)
    ops = sum(n.op == "call_function" for n in nodes)
    weights = sections.unique_tensors(ep)  # a tied weight (one tensor, several names) counts once
    numel = sum(t.numel() for t, _ in weights)
    nbytes = sum(t.numel() * t.element_size() for t, _ in weights)
    tied = sum(len(fqns) > 1 for _, fqns in weights)
    return [("nodes", str(len(nodes))), ("operators", str(ops)), ("weights", f"{numel:,} values, "
            f"{nbytes / 2 ** 20:.1f} MiB in {len(weights)} tensor{'' if len(weights) == 1 else 's'}"
            + (f" ({tied} tied)" if tied else "")),
            ("dynamic symbols", str(len(ep.range_constraints))), ("IR", getattr(ep, "dialect", "TRAINING"))]


def render(ep: Any, *, verification: Any = None, draft_report: Any = None, title: Optional[str] = None,
           open_depth: int = 1) -> str:
    """The report's HTML text (see :func:`report`)."""
    title = title or "graphcap report"
    names = SymbolNames(ep)
    parts = [("graph", "Graph", graph_section(ep, open_depth, names=names)),
             ("signature", "Signature", sections.signature(ep, names)),
             ("ranges", "Range constraints", sections.ranges(ep, names)),
             ("assumptions", "Specializations and guards", sections.assumptions(ep, names)),
             ("operators", "Operators", sections.histogram(ep)),
             ("timings", "Export stages", sections.timings(ep))]
    if verification is not None:
        parts.append(("verification", "Verification against eager", sections.verification(verification)))
    if draft_report is not None:
        parts.append(("draft", "Draft export report", sections.draft(draft_report)))
    parts.append(("program", "Program", f"<details><summary>The printed program</summary>"
                                        f"<pre class=\"program\">{escape(str(ep))}</pre></details>"))
    return page.document(title, _facts(ep), parts)


def report(ep: Any, path: Union[str, os.PathLike], *, verification: Any = None, draft_report: Any = None,
           title: Optional[str] = None, open_depth: int = 1, method: Optional[str] = None) -> Path:
    """Write the HTML report of ``ep`` to ``path`` and return the path.

    The page is self-contained (opens offline); it is written beside ``path``
    and renamed into place, so a failure leaves no half-written page.

    Args:
        ep: the :class:`graphcap.ExportedProgram` to describe.
        path: where to write the page (str or ``os.PathLike``).
        verification: ``graphcap.verify``'s result, or any object with ``as_dict()`` /
            ``to_dict()`` in its layout (``passed``, ``input_sets``, ``refusals``), or
            with ``rows()`` returning a list of dicts; None leaves the section out.
        draft_report: a draft export's report: an object with ``failures`` (each with a
            ``failure_type`` or ``kind`` and a text), or ``as_dict()``/``to_dict()``, or
            just text; None leaves the section out.
        title: the page title (default "graphcap report").
        open_depth: how many levels of the module tree start unfolded (the graph itself
            always starts at the top level, child modules collapsed to boxes).
        method: for a multi-method program (``graphcap.export_methods``), the method to
            describe (the same as ``report(progs[method], ...)``; the title names it).

    Returns:
        The path written, as a :class:`pathlib.Path`.

    Raises:
        OSError: the page cannot be written at ``path``.

    Example:
        >>> ep = graphcap.draft_export(model, args)
        >>> page = graphcap.report(ep, "report.html", draft_report=ep.report,
        ...                        verification=graphcap.verify(ep, model))
    """
    from ..multi_method import method_program
    if method is not None and title is None:
        title = f"graphcap report: method {method}"
    ep = method_program(ep, method, "graphcap.report")
    out = Path(path)
    text = render(ep, verification=verification, draft_report=draft_report, title=title, open_depth=open_depth)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out
