"""The names a user knows a program's symbols by: ``batch`` and ``seq``, not ``s77`` and ``s53``.

The shape engine numbers its symbols (``s77``); the user wrote
``Dim("batch")``. Whatever a user reads (errors, ``graphcap inspect``, the
report) prints symbols through :func:`dim_names`:

- a symbol that stands for a ``Dim`` of the spec is that Dim's name. Export
  records them as plain data on the program (``ep.export_dim_names``, symbol
  text -> Dim name), so a file that saves that dict keeps them;
- any other symbol (a ``Dim.AUTO``/``Dim.DYNAMIC`` dim, or a program loaded
  without the record) is named by the first user input dimension that is
  exactly it (``input_ids.shape[1]``), or the int input it is (``n``);
- a value read from tensor data (``u0``) keeps its symbol here; its source
  expression and line are told by :mod:`graphcap.dynamic.data_values`.

The printed program (``print(ep)``) keeps torch's symbols, as torch.export
prints them, so printed programs stay comparable with torch's.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

import sympy


def recorded_dim_names(roots: Any) -> dict[str, str]:
    """The record export keeps on the program: symbol text -> the Dim's name, for the spec's Dims
    (``roots``: :class:`graphcap.dynamic.symbols.RootSymbol` list; hints are named by their input)."""
    return {str(r.symbol): r.name for r in roots or () if getattr(r, "hint", None) is None}


def input_dimension_names(ep: Any) -> dict[sympy.Symbol, str]:
    """Each symbol that is exactly a user input's dimension (or int input) -> that dimension's name."""
    from ..signature import InputKind
    names: dict[sympy.Symbol, str] = {}
    nodes = {n.name: n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    for spec in ep.graph_signature.input_specs:
        if spec.kind is not InputKind.USER_INPUT:
            continue
        node = nodes.get(getattr(spec.arg, "name", None))
        val = node.meta.get("val") if node is not None else None
        if val is None:
            continue
        label = node.name
        if hasattr(val, "shape"):
            for d, size in enumerate(val.shape):
                expr = getattr(getattr(size, "node", None), "expr", None)
                if isinstance(expr, sympy.Symbol):
                    names.setdefault(expr, f"{label}.shape[{d}]")
        else:
            expr = getattr(getattr(val, "node", None), "expr", None)
            if isinstance(expr, sympy.Symbol):
                names.setdefault(expr, label)
    return names


def dim_names(ep: Any) -> dict[sympy.Symbol, str]:
    """Each symbol of ``ep``'s shapes -> the name the user knows it by.

    The spec's Dim names where the export recorded them (``ep.export_dim_names``),
    else the user input dimension the symbol is (``x.shape[0]``, or ``n`` for an int
    input). Symbols with neither (values read from data, ``u0``) are left out.

    Example:
        >>> ep = graphcap.export(m, (x,), dynamic_shapes={"x": {0: Dim("batch")}})
        >>> dim_names(ep)
        {s77: 'batch'}
    """
    recorded: Mapping[str, str] = getattr(ep, "export_dim_names", None) or {}
    symbols: dict[str, sympy.Symbol] = {str(s): s for s in getattr(ep, "range_constraints", {}) or {}}
    derived = input_dimension_names(ep)
    for s in derived:
        symbols.setdefault(str(s), s)
    out: dict[sympy.Symbol, str] = {}
    for text, sym in symbols.items():
        name = recorded.get(text) or derived.get(sym)
        if name is not None:
            out[sym] = name
    return out


_SYMBOL = re.compile(r"\b([su]\d+)\b")


def with_dim_names(text_or_expr: Any, names: Mapping[Any, str]) -> str:
    """``text_or_expr`` (a sympy expression or a message) with each named symbol written by its name:
    ``2*s77 + 1`` -> ``2*batch + 1``. Other text is left as it is."""
    by_text = {str(k): v for k, v in names.items()}
    if not by_text:
        return str(text_or_expr)
    if isinstance(text_or_expr, sympy.Basic):
        sub = {s: sympy.Symbol(by_text[str(s)]) for s in text_or_expr.free_symbols if str(s) in by_text}
        return str(text_or_expr.xreplace(sub))
    return _SYMBOL.sub(lambda m: by_text.get(m.group(1), m.group(1)), str(text_or_expr))


def names_of_roots(roots: Any) -> dict[str, str]:
    """Symbol text -> user name for every root of a trace (Dims by name, hints by input path)."""
    out: dict[str, str] = {}
    for r in roots or ():
        if getattr(r, "hint", None) is None:
            out[str(r.symbol)] = r.name
        elif r.uses:
            out[str(r.symbol)] = _readable_path(r.uses[0].arg_path) or r.name
    return out


def _readable_path(arg_path: Optional[str]) -> str:
    """``['x'].shape[0]`` (the spec walker's path) as ``x.shape[0]``."""
    if not arg_path:
        return ""
    m = re.match(r"^\['([A-Za-z_][A-Za-z_0-9]*)'\](.*)$", arg_path)
    return m.group(1) + m.group(2) if m else arg_path


def name_symbols_in_error(e: BaseException, names: Mapping[str, str]) -> None:
    """Add to a graphcap error whose "what" quotes torch's text with symbols (``shape '[s77, 2, 3]'
    is invalid``) the same text in the user's Dim names, on a line of its own; the quoted text stays
    as torch wrote it (code matches it). The fix, graphcap's own text, reads in Dim names. The
    "where" (the user's own source line) is left as the user wrote it."""
    from ..errors import GraphcapError, _compose
    if not names or not isinstance(e, GraphcapError):
        return
    renamed = []
    for line in (e.what or "").splitlines():
        named = with_dim_names(line, names)
        if named != line:
            first = next(i for i, (a, b) in enumerate(zip(line, named)) if a != b)
            start = line.rfind(": ", 0, first)
            renamed.append(named[start + 2 if start >= 0 else 0:])
    fix = with_dim_names(e.fix, names) if e.fix else e.fix
    if not renamed and fix == e.fix:
        return
    what = e.what + ("\nIn your Dim names: " + " ".join(renamed) if renamed else "")
    e.what, e.fix = what, fix
    message = _compose(what, e.where, fix)
    e.args = (message,)
    for attr in ("msg", "message"):
        if hasattr(e, attr):
            setattr(e, attr, message)
