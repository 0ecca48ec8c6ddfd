"""The report's tables, each a function from the program (or a result) to an HTML fragment.

Every value put in the page goes through :func:`html.escape`; tables are
plain ``<table>`` markup styled by the page's CSS. The verification result
and the draft report are read by duck typing (see :func:`verification` and
:func:`draft`), so the report depends on no class of theirs.
"""
from __future__ import annotations

import re
from collections import Counter
from html import escape
from typing import Any, Iterable, Optional

import torch

from ..dynamic.assumptions import how_to_keep_dynamic
from ..signature import InputKind
from .names import NoNames, SymbolNames


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


def _value_text(val: Any, names: SymbolNames) -> str:
    if isinstance(val, torch.Tensor):
        return names.shape(val)
    if val is None:
        return ""
    return f"{type(val).__name__} {names(val)}"


def _storage_key(t: Any) -> Any:
    """What makes two state entries one tensor: the same memory (same place, shape, strides and dtype);
    a tensor with no memory of its own (meta, fake) is only itself."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:  # a tensor subclass without a storage
        ptr = 0
    if not ptr:
        return ("object", id(t))
    return (ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def unique_tensors(ep: Any) -> list[tuple[torch.Tensor, list[str]]]:
    """The program's weights (state dict and tensor constants) once each, with every name they go by:
    a tied weight (``lm_head.weight`` is ``transformer.wte.weight``) is one tensor with two names."""
    groups: dict[Any, tuple[torch.Tensor, list[str]]] = {}
    entries = [*ep.state_dict.items(), *[(k, c) for k, c in ep.constants.items() if isinstance(c, torch.Tensor)]]
    for fqn, t in entries:
        if not isinstance(t, torch.Tensor):
            continue
        groups.setdefault(_storage_key(t), (t, []))[1].append(fqn)
    return list(groups.values())


def signature(ep: Any, names: SymbolNames = NoNames()) -> str:
    """Inputs and outputs by the signature's kinds (user input, parameter, buffer, constant...), sizes
    by the user's Dim names; a tied weight's second name says which tensor it shares."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    out_node = next((n for n in ep.graph.nodes if n.op == "output"), None)
    tied_to = {}
    for _, fqns in unique_tensors(ep):
        for other in fqns[1:]:
            tied_to[other] = fqns[0]
    user, state = [], []
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", "")
        node = placeholders.get(name)
        target = spec.target or ""
        kind = spec.kind.name + (f" (tied to {tied_to[target]})" if target in tied_to else "")
        row = [Raw(f"<code>{escape(name)}</code>"), kind, target,
               _value_text(node.meta.get("val") if node is not None else None, names)]
        (user if spec.kind is InputKind.USER_INPUT else state).append(row)
    outs = list(out_node.args[0]) if out_node is not None and out_node.args else []
    out_rows = []
    for i, spec in enumerate(ep.graph_signature.output_specs):
        arg_name = getattr(spec.arg, "name", str(getattr(spec.arg, "value", "")))
        val = outs[i].meta.get("val") if i < len(outs) and isinstance(outs[i], torch.fx.Node) else None
        out_rows.append([Raw(f"<code>{escape(arg_name)}</code>"), spec.kind.name, spec.target or "",
                         _value_text(val, names)])
    parts = ["<h3>User inputs</h3>", table(["placeholder", "kind", "target", "value"], user) if user
             else "<p>None.</p>", "<h3>Outputs</h3>", table(["output", "kind", "target", "value"], out_rows)]
    if state:
        kinds = Counter(spec.kind.name.lower().replace("_", " ") for spec in ep.graph_signature.input_specs
                        if spec.kind is not InputKind.USER_INPUT)
        counted = ", ".join(f"{n} {k}" + ("" if n == 1 else "s") for k, n in kinds.items())
        tied = f"; {len(tied_to)} tied to another: one tensor, two names" if tied_to else ""
        parts += [f"<details><summary>Parameters, buffers and constants ({counted}{tied})</summary>",
                  table(["placeholder", "kind", "target", "value"], state), "</details>"]
    return "".join(parts)


def ranges(ep: Any, names: SymbolNames = NoNames()) -> str:
    """Each symbol by the user's name (and the engine's, which the printed program uses), its range and
    the input sizes that are it."""
    if not ep.range_constraints:
        return "<p>All sizes are static.</p>"
    rows = []
    for sym, vr in ep.range_constraints.items():
        hi = "∞" if str(vr.upper) in ("int_oo", "oo") else str(vr.upper)
        used = ", ".join(names.uses.get(str(sym), [])) or \
            ("a value read from data" if str(sym).startswith("u") else "")
        shown = names.name(sym)
        label = f"<code>{escape(shown)}</code>" + (f" <small>({escape(str(sym))} in the printed program)</small>"
                                                   if shown != str(sym) else "")
        rows.append([Raw(label), names(vr.lower), names(hi), used])
    return table(["dim", "min", "max", "input sizes"], rows)


def _user_line(stack_trace: str) -> str:
    lines = [ln.strip() for ln in (stack_trace or "").strip().splitlines()]
    return " · ".join(lines[-2:]) if len(lines) >= 2 else (lines[0] if lines else "")


_DEFAULTS = {"layout": torch.strided}


def _metadata_condition(node: torch.fx.Node, names: SymbolNames) -> str:
    """``_assert_tensor_metadata(x, dtype=..., device=...)`` as the condition it checks."""
    subject = node.args[0].name if node.args and isinstance(node.args[0], torch.fx.Node) else "the tensor"
    fields = dict(zip(("size", "stride", "dtype", "device", "layout"), node.args[1:]))
    fields.update(node.kwargs)
    said = [f"{k} {names(str(v).replace('torch.', ''))}" for k, v in fields.items()
            if v is not None and _DEFAULTS.get(k) != v]
    return f"{subject} has " + (", ".join(said) if said else "the metadata it was traced with")


def _scalar_condition(node: torch.fx.Node, names: SymbolNames) -> str:
    """An ``_assert_scalar`` / ``_assert_async`` condition: its message, else the expression it checks."""
    msg = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], str) else node.kwargs.get("msg")
    if isinstance(msg, str) and msg:
        return names(msg)
    cond = node.args[0] if node.args else None
    if isinstance(cond, torch.fx.Node):
        val = cond.meta.get("val")
        return names(val) if val is not None else cond.name
    return names(cond)


def _range_condition(node: torch.fx.Node, names: SymbolNames) -> str:
    """``sym_constrain_range(u0, min=0, max=10)`` as ``0 <= u0 <= 10`` (by name)."""
    value = node.args[0] if node.args else None
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
    subject = names(val) if val is not None else getattr(value, "name", "the value")
    lo = node.kwargs.get("min", node.args[1] if len(node.args) > 1 else None)
    hi = node.kwargs.get("max", node.args[2] if len(node.args) > 2 else None)
    if "for_size" in str(node.target):
        lo = 0 if lo is None else lo
    text = subject
    if lo is not None:
        text = f"{lo} <= {text}"
    if hi is not None:
        text = f"{text} <= {hi}"
    return text


def runtime_asserts(ep: Any, names: SymbolNames = NoNames()) -> list[list[Any]]:
    """The checks the program makes when it runs, each with the condition it checks: size asserts
    (``_assert_scalar``), value ranges (``sym_constrain_range``) and the dtype/device checks that keep
    a traced ``x.to(...)`` meaning what it meant (``_assert_tensor_metadata``)."""
    rows = []
    for graph in _all_graphs(ep.graph_module):
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            name = str(node.target)
            if "_assert_tensor_metadata" in name:
                kind, cond = "tensor check", _metadata_condition(node, names)
            elif "sym_constrain_range" in name:
                kind, cond = "runtime assert", _range_condition(node, names)
            elif "_assert_scalar" in name or "_assert_async" in name:
                kind, cond = "runtime assert", _scalar_condition(node, names)
            else:
                continue
            if not cond.strip():
                cond = f"{node.name} ({_op_name(node.target)})"  # never an empty condition cell
            named = {n for n in names.names.values() if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", cond)}
            dims = ", ".join(sorted({names.name(m) for m in re.findall(r"\b[su]\d+\b", str(cond))} | named))
            rows.append([kind, dims, Raw(f"<code>{escape(cond)}</code>"),
                         _user_line(node.meta.get("stack_trace", ""))])
    return rows


def assumptions(ep: Any, names: SymbolNames = NoNames()) -> str:
    """What export assumed (``ep.export_assumptions``: specializations, relations, narrowed ranges,
    guards, each with the user's line) and the checks the program makes when it runs. Every row has
    its condition."""
    recorded = getattr(ep, "export_assumptions", None)
    rows = []
    for a in recorded or []:
        field = a.get if isinstance(a, dict) else lambda k, d=None, a=a: getattr(a, k, d)  # records or their data
        where = field("where") or ("(inside torch)" if field("framework") else "")
        text = names(field("text") or "")
        if not text.strip():
            continue  # a record without its condition says nothing: no empty row
        rows.append([field("kind") or "", names(field("dim") or ""), Raw(f"<code>{escape(text)}</code>"), where,
                     names(how_to_keep_dynamic(a))])
    rows += [[*row, "checked when the program runs"] for row in runtime_asserts(ep, names)]
    note = "" if recorded is not None else \
        "<p class=\"note\">This program does not carry its export's assumptions (it was loaded from a file or " \
        "rebuilt by a pass); the checks it makes at run time are read from the graph.</p>"
    if not rows:
        return note + ("<p>No runtime asserts in the graph.</p>" if recorded is None else
                       "<p>None: no size was specialized and no guard was needed beyond the signature.</p>")
    return note + table(["kind", "dims", "condition", "where (user source)", "to keep it dynamic"], rows)


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
