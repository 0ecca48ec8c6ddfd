"""The report's tables, each a function from the program (or a result) to an HTML fragment.

Every value put in the page goes through :func:`html.escape`; tables are
plain ``<table>`` markup styled by the page's CSS. The verification result
and the draft report are read by duck typing (see :func:`verification` and
:func:`draft`), so the report depends on no class of theirs.
"""
from __future__ import annotations

from collections import Counter
from html import escape
from typing import Any, Iterable, Optional

import torch

from ..signature import InputKind


def table(headers: list[str], rows: Iterable[list[Any]], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, Raw) else escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class Raw(str):
    """Markup already escaped (a cell that holds a bar or a badge)."""


def bar(fraction: float, text: str) -> Raw:
    pct = max(0.0, min(1.0, fraction)) * 100
    return Raw(f'<div class="bar"><span style="width:{pct:.1f}%"></span><em>{escape(text)}</em></div>')


def badge(ok: bool, yes: str = "pass", no: str = "FAIL") -> Raw:
    return Raw(f'<span class="badge {"ok" if ok else "bad"}">{escape(yes if ok else no)}</span>')


def _all_graphs(gm: torch.fx.GraphModule) -> Iterable[torch.fx.Graph]:
    yield gm.graph
    for _, sub in gm.named_modules():
        if sub is not gm and isinstance(sub, torch.fx.GraphModule):
            yield sub.graph


def operator_counts(ep: Any) -> Counter:
    """Operators of the program, control-flow subgraphs included."""
    counts: Counter = Counter()
    for graph in _all_graphs(ep.graph_module):
        for node in graph.nodes:
            if node.op == "call_function":
                counts[_op_name(node.target)] += 1
    return counts


def _op_name(target: Any) -> str:
    """``aten.conv2d.default`` for an operator, the function's name for a Python callable."""
    namespace = getattr(target, "namespace", None)  # operators (and higher-order ones) have one
    if namespace is not None:
        return str(target) if "." in str(target) else f"{namespace}.{target}"
    return getattr(target, "__name__", str(target))


def histogram(ep: Any) -> str:
    counts = operator_counts(ep)
    if not counts:
        return "<p>No operators.</p>"
    top = max(counts.values())
    rows = [[Raw(f"<code>{escape(op)}</code>"), bar(n / top, str(n))] for op, n in counts.most_common()]
    return f"<p>{sum(counts.values())} operator calls, {len(counts)} distinct.</p>" + \
        table(["operator", "count"], rows, "hist")


def _value_text(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).replace('torch.', '')}[{', '.join(str(s) for s in val.shape)}]"
    if val is None:
        return ""
    return f"{type(val).__name__} {val}"


def signature(ep: Any) -> str:
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    out_node = next((n for n in ep.graph.nodes if n.op == "output"), None)
    in_rows = []
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", "")
        node = placeholders.get(name)
        in_rows.append([Raw(f"<code>{escape(name)}</code>"), spec.kind.name, spec.target or "",
                        _value_text(node.meta.get("val") if node is not None else None)])
    outs = list(out_node.args[0]) if out_node is not None and out_node.args else []
    out_rows = []
    for i, spec in enumerate(ep.graph_signature.output_specs):
        arg_name = getattr(spec.arg, "name", str(getattr(spec.arg, "value", "")))
        val = outs[i].meta.get("val") if i < len(outs) and isinstance(outs[i], torch.fx.Node) else None
        out_rows.append([Raw(f"<code>{escape(arg_name)}</code>"), spec.kind.name, spec.target or "", _value_text(val)])
    user = [r for r, s in zip(in_rows, ep.graph_signature.input_specs) if s.kind is InputKind.USER_INPUT]
    state = [r for r, s in zip(in_rows, ep.graph_signature.input_specs) if s.kind is not InputKind.USER_INPUT]
    parts = ["<h3>User inputs</h3>", table(["placeholder", "kind", "target", "value"], user) if user
             else "<p>None.</p>", "<h3>Outputs</h3>", table(["output", "kind", "target", "value"], out_rows)]
    if state:
        parts += [f"<details><summary>Parameters, buffers and constants ({len(state)})</summary>",
                  table(["placeholder", "kind", "target", "value"], state), "</details>"]
    return "".join(parts)


def _symbol_uses(ep: Any) -> dict[str, list[str]]:
    uses: dict[str, list[str]] = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or not isinstance(val, torch.Tensor):
            continue
        for d, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt):
                uses.setdefault(str(size), []).append(f"{node.name}.shape[{d}]")
    return uses


def ranges(ep: Any) -> str:
    if not ep.range_constraints:
        return "<p>All sizes are static.</p>"
    uses = _symbol_uses(ep)
    rows = []
    for sym, vr in ep.range_constraints.items():
        hi = "∞" if str(vr.upper) in ("int_oo", "oo") else str(vr.upper)
        used = ", ".join(uses.get(str(sym), [])) or ("a value read from data" if str(sym).startswith("u") else "")
        rows.append([Raw(f"<code>{escape(str(sym))}</code>"), str(vr.lower), hi, used])
    return table(["symbol", "min", "max", "input sizes"], rows)


def _user_line(stack_trace: str) -> str:
    lines = [ln.strip() for ln in (stack_trace or "").strip().splitlines()]
    return " · ".join(lines[-2:]) if len(lines) >= 2 else (lines[0] if lines else "")


def runtime_asserts(ep: Any) -> list[list[Any]]:
    rows = []
    for graph in _all_graphs(ep.graph_module):
        for node in graph.nodes:
            name = str(node.target)
            if node.op == "call_function" and ("_assert" in name or "sym_constrain_range" in name):
                msg = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], str) else name
                rows.append(["runtime assert", "", msg, _user_line(node.meta.get("stack_trace", ""))])
    return rows


def assumptions(ep: Any) -> str:
    recorded = getattr(ep, "export_assumptions", None)
    rows = []
    for a in recorded or []:
        where = a.where or ("(inside torch)" if a.framework else "")
        rows.append([a.kind, a.dim, Raw(f"<code>{escape(a.text)}</code>"), where])
    rows += runtime_asserts(ep)
    note = "" if recorded is not None else \
        "<p class=\"note\">This program does not carry its export's assumptions (it was loaded from a file or " \
        "rebuilt by a pass); runtime asserts are read from the graph.</p>"
    if not rows:
        return note + ("<p>No runtime asserts in the graph.</p>" if recorded is None else
                       "<p>None: no size was specialized and no guard was needed beyond the signature.</p>")
    return note + table(["kind", "dims", "condition", "where (user source)"], rows)


def timings(ep: Any) -> str:
    seconds: Optional[dict] = getattr(ep, "export_timings", None)
    if not seconds:
        return "<p>Not recorded (the program was loaded from a file or rebuilt by a pass).</p>"
    total = sum(seconds.values())
    rows = [[stage, bar(s / total if total else 0, f"{s * 1000:.1f} ms")] for stage, s in seconds.items()]
    rows.append([Raw("<b>total</b>"), Raw(f"<b>{total * 1000:.1f} ms</b>")])
    return table(["stage", "time"], rows, "timings")


def _as_data(obj: Any) -> Any:
    for name in ("as_dict", "to_dict"):
        fn = getattr(obj, name, None)
        if callable(fn):
            return fn()
    return obj


def verification(result: Any) -> str:
    """The verification table. ``result`` is anything with ``as_dict()`` / ``to_dict()`` in the layout of
    ``graphcap.verify``'s result (``passed``, ``input_sets``, ``refusals``), anything with ``rows()``
    (a list of dicts, one per row), or a list of dicts; other objects are shown as their text."""
    rows_fn = getattr(result, "rows", None)
    data = rows_fn() if callable(rows_fn) else _as_data(result)
    if isinstance(data, dict) and "input_sets" in data:
        return _verification_layout(data)
    if isinstance(data, list) and all(isinstance(r, dict) for r in data) and data:
        headers = list(dict.fromkeys(k for r in data for k in r))
        return table(headers, ([r.get(h, "") for h in headers] for r in data))
    return f"<pre>{escape(str(result))}</pre>"


def _num(x: Any) -> str:
    return "-" if x is None else ("0" if x == 0 else f"{x:.2e}")


def _verification_layout(data: dict) -> str:
    sets = data.get("input_sets", [])
    refusals = data.get("refusals", [])
    head = (f"<p>{badge(bool(data.get('passed')), 'everything matches', 'differs from eager')} "
            f"{sum(bool(s.get('passed')) for s in sets)}/{len(sets)} input sets match eager, "
            f"{sum(bool(r.get('passed')) for r in refusals)}/{len(refusals)} wrong inputs refused.</p>")
    rows = []
    for i, s in enumerate(sets, 1):
        outs = s.get("outputs", [])
        abs_err = max((o.get("max_abs_error") or 0 for o in outs), default=None)
        rel_err = max((o.get("max_rel_error") or 0 for o in outs), default=None)
        shapes = "  ".join(f"{k} {v}" for k, v in (s.get("shapes") or {}).items())
        sizes = ", ".join(f"{k}={v}" for k, v in (s.get("sizes") or {}).items())
        rows.append([i, s.get("label", ""), sizes, shapes, _num(abs_err), _num(rel_err),
                     Raw(badge(bool(s.get("passed")), "match", "DIFFERS") +
                         (f" {escape(str(s['error']))}" if s.get("error") else ""))])
    parts = [head, table(["#", "input set", "sizes", "input shapes", "max abs err", "max rel err", "result"], rows)]
    if refusals:
        parts.append("<h3>Wrong inputs refused before computing</h3>")
        parts.append(table(["wrong input", "result", "message"],
                           ([r.get("label", ""), badge(bool(r.get("refused")), "refused", "NOT REFUSED"),
                             r.get("message", "")] for r in refusals)))
    if data.get("skipped"):
        parts.append("<p class=\"note\">Skipped: " + escape("; ".join(map(str, data["skipped"]))) + "</p>")
    return "".join(parts)


def draft(report: Any) -> str:
    """The draft export report: its ``failures`` (each with ``failure_type`` and a text), else its
    ``as_dict()`` / ``to_dict()`` data, else its text."""
    failures = getattr(report, "failures", None)
    parts = []
    if failures is not None:
        failures = list(failures)
        if not failures:
            parts.append(f"<p>{badge(True, 'no problems found')}</p>")
        rows = []
        for f in failures:
            kind = getattr(f, "failure_type", None) or getattr(f, "kind", None) or type(f).__name__
            kind = getattr(kind, "name", kind)  # torch's FailureType is an enum
            rows.append([str(kind), Raw(f"<pre>{escape(str(f))}</pre>")])
        if rows:
            parts.append(f"<p>{badge(False, '', f'{len(rows)} problem(s) worked around')}</p>")
            parts.append(table(["problem", "details"], rows))
        refined = getattr(report, "refined_dynamic_shapes", None)
        if refined is not None:
            parts.append(f"<p>Exported with the refined spec:</p><pre>{escape(repr(refined))}</pre>")
        return "".join(parts)
    data = _as_data(report)
    if isinstance(data, dict):
        return table(["field", "value"], ([k, Raw(f"<pre>{escape(str(v))}</pre>")] for k, v in data.items()))
    return f"<pre>{escape(str(report))}</pre>"
