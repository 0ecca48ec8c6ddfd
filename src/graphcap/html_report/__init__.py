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

from . import page, sections
from .svg import view_svg
from .views import ROOT, ModuleTree


def _tree_html(tree: ModuleTree, key: str, depth: int, open_depth: int) -> str:
    group = tree.groups[key]
    parent = tree.groups[group.parent].path if group.parent else ""
    name = group.label[len(parent) + 1:] if parent and group.label.startswith(parent + ".") else group.label
    link = (f'<a data-open="{escape(key)}" title="{escape(group.label)}">{escape(name if key else "(whole program)")}'
            f'</a> <small>{escape(group.type_name)} {group.size}</small>')
    if not group.children:
        return f'<div class="leaf">{link}</div>'
    inner = "".join(_tree_html(tree, c, depth + 1, open_depth) for c in group.children)
    return f'<details{" open" if depth < open_depth else ""}><summary>{link}</summary>{inner}</details>'


def _count(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _crumbs(tree: ModuleTree, key: str) -> str:
    parts = []
    for g in tree.breadcrumb(key):
        name = "program" if g.key == ROOT else g.label.rsplit(".", 1)[-1] if "." in g.label else g.label
        parts.append(f'<a data-open="{escape(g.key)}">{escape(name)}</a>')
    group = tree.groups[key]
    what = f" — {escape(group.type_name)}, {_count(group.size)}" if key else f" — {_count(group.size)}"
    return f'<div class="crumbs">{" › ".join(parts)}{what}</div>'


def graph_section(ep: Any, open_depth: int = 1, max_views: int = 2000) -> str:
    """The graph: one view per module call (the root shown first), and the module tree beside it."""
    tree = ModuleTree(ep.graph)
    keys = tree.keys()[:max_views]
    views = []
    for i, key in enumerate(keys):
        hidden = "" if key == ROOT else " hidden"
        views.append(f'<div class="view" data-key="{escape(key)}"{hidden}>{_crumbs(tree, key)}'
                     f'{view_svg(tree.view(key), f"arrow{i}")}</div>')
    note = "" if len(keys) == len(tree.keys()) else \
        f"<p class=\"note\">Only the first {max_views} module views are drawn.</p>"
    return (f"<p>Each module call is a box: click it (or its name in the tree) to open it. Hover a box "
            f"for its value and source line.</p>{page.LEGEND}{note}"
            f"<div class=\"graphbox\"><div class=\"tree\">{_tree_html(tree, ROOT, 0, open_depth)}</div>"
            f"<div class=\"views\">{''.join(views)}</div></div>")


def _facts(ep: Any) -> list[tuple[str, str]]:
    nodes = list(ep.graph.nodes)
    ops = sum(n.op == "call_function" for n in nodes)
    weights = [*ep.state_dict.values(), *[c for c in ep.constants.values() if hasattr(c, "numel")]]
    numel = sum(t.numel() for t in weights)
    nbytes = sum(t.numel() * t.element_size() for t in weights)
    return [("nodes", str(len(nodes))), ("operators", str(ops)), ("weights", f"{numel:,} values, "
            f"{nbytes / 2 ** 20:.1f} MiB"), ("dynamic symbols", str(len(ep.range_constraints))),
            ("IR", getattr(ep, "dialect", "TRAINING"))]


def render(ep: Any, *, verification: Any = None, draft_report: Any = None, title: Optional[str] = None,
           open_depth: int = 1) -> str:
    """The report's HTML text (see :func:`report`)."""
    title = title or "graphcap report"
    parts = [("graph", "Graph", graph_section(ep, open_depth)),
             ("signature", "Signature", sections.signature(ep)),
             ("ranges", "Range constraints", sections.ranges(ep)),
             ("assumptions", "Specializations and guards", sections.assumptions(ep)),
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
           title: Optional[str] = None, open_depth: int = 1) -> Path:
    """Write the HTML report of ``ep`` to ``path`` and return the path.

    ``verification``: ``graphcap.verify``'s result, or any object with ``as_dict()`` / ``to_dict()`` in
    its layout (``passed``, ``input_sets``, ``refusals``), or with ``rows()`` returning a list of dicts.
    ``draft_report``: a draft export's report: an object with ``failures`` (each with a
    ``failure_type`` and a text), or ``as_dict()``/``to_dict()``, or just text.
    ``open_depth``: how many levels of the module tree start unfolded (the graph itself always
    starts at the top level, child modules collapsed to boxes).
    """
    out = Path(path)
    text = render(ep, verification=verification, draft_report=draft_report, title=title, open_depth=open_depth)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out
