"""Runtime-assert messages that say which input, which source line and which range.

torch's pass writes each runtime assert as ``Runtime assertion failed for
expression u0 <= 10 on node 'le_1'``: an internal symbol and a graph node.
When one fails in ``ep.module()``, the error keeps torch's words first (code
that matches them still does) and then says, in the user's terms, what
failed:

- a value read from data (``u0``) is told by the code that read it: the
  user's line (``n = y.item()``; ``if x.sum() > 0:``), the user inputs it is
  computed from (``y``), the condition in the user's names (``n <= 10``, or
  ``x.sum() > 0`` must be true) and the range the program was exported for;
- dims in the condition are told by their Dim names (``batch``).

The graphs keep torch's message (``print(ep)``, ``ep.module().print_readable()``
read as torch.export's); the longer message is given to the exception as it
passes ``module()``'s call.
"""
from __future__ import annotations

import ast
import linecache
import re
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch

_TORCH_MESSAGE = re.compile(r"^Runtime assertion failed for expression (.+) on node '([^']+)'$")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class DataValue:
    """Where a value read from data comes from, in the user's terms."""

    words: str  # "n" / "y.item()" / "x.sum() > 0"
    is_truth: bool  # a tensor used as a condition: the value is its truth (0 or 1)
    inputs: list[str]  # user inputs it is computed from
    where: str  # 'File "m.py", line 4, in forward (`n = y.item()`)'


def innermost_frame(stack_trace: Optional[str]) -> Optional[tuple[str, int, str]]:
    """The innermost frame of a node's stack trace (file, line, function)."""
    frames = _FRAME.findall(stack_trace or "")
    if not frames:
        return None
    file, line, fn = frames[-1]
    return file, int(line), fn


def _describe(stack_trace: Optional[str]) -> Optional[tuple[str, bool, str]]:
    """(words, is_truth, where) for the value read at the node's user line."""
    from ..trace.data_checks import _data_reads, _statement
    frame = innermost_frame(stack_trace)
    if frame is None:
        return None
    file, lineno, fn = frame
    code = linecache.getline(file, lineno).strip()
    where = f'File "{file}", line {lineno}, in {fn}' + (f" (`{code}`)" if code else "")
    stmt, source = _statement(file, lineno)
    if stmt is None:
        return (f"the value read from data on line {lineno}", False, where)
    exprs = [stmt.test] if isinstance(stmt, (ast.If, ast.While, ast.Assert)) else \
        [stmt.value] if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)) and stmt.value else []
    reads = [r for e in exprs for r in _data_reads(e)]
    if len(reads) == 1:
        text = ast.get_source_segment(source, reads[0]) or code
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.value is reads[0]:
            text = stmt.targets[0].id  # n = y.item(): the user calls it n
        return text, False, where
    if not reads and isinstance(stmt, (ast.If, ast.While, ast.Assert)):
        return ast.get_source_segment(source, stmt.test) or code, True, where
    return f"the value read from data on line {lineno}", False, where


def _user_inputs_of(node: torch.fx.Node, user_inputs: set[str]) -> list[str]:
    seen: set[torch.fx.Node] = set()
    found: list[str] = []
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            if n.name in user_inputs and n.name not in found:
                found.append(n.name)
            continue
        todo.extend(n.all_input_nodes)
    return sorted(found)


@dataclass
class _Origin:
    stack_trace: Optional[str]
    inputs: list[str]


def _origins(ep: Any) -> dict[sympy.Symbol, _Origin]:
    """Each value read from data in ``ep`` (``u0``) -> the stack trace of the node that read it and the
    user inputs it is computed from (cheap: no source is read)."""
    from ..signature import InputKind
    user_inputs = {getattr(s.arg, "name", None) for s in ep.graph_signature.input_specs
                   if s.kind is InputKind.USER_INPUT}
    out: dict[sympy.Symbol, _Origin] = {}
    for mod in ep.graph_module.modules():
        if not isinstance(mod, torch.fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            for sym in (node.meta.get("unbacked_bindings") or {}):
                if sym not in out and node.meta.get("stack_trace"):
                    out[sym] = _Origin(node.meta.get("stack_trace"), _user_inputs_of(node, user_inputs))
    return out


def _unpacked_names(stack_trace: Optional[str]) -> Optional[list[str]]:
    """The names a line such as ``s, e = se.tolist()`` (or ``i, j = a.item(), b.item()``) unpacks
    the values it reads into, in order; None for any other line."""
    from ..trace.data_checks import _data_reads, _statement
    frame = innermost_frame(stack_trace)
    if frame is None:
        return None
    stmt, _ = _statement(frame[0], frame[1])
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (ast.Tuple, ast.List))):
        return None
    value = stmt.value
    tolist = isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr == "tolist" and not value.args
    reads_each = isinstance(value, ast.Tuple) and len(value.elts) == len(stmt.targets[0].elts) \
        and all(_data_reads(e) == [e] for e in value.elts)
    if not (tolist or reads_each):
        return None
    names: list[str] = []

    def walk(target: ast.expr) -> bool:
        if isinstance(target, ast.Name):
            names.append(target.id)
            return True
        if isinstance(target, (ast.Tuple, ast.List)):
            return all(walk(e) for e in target.elts)
        return False

    return names if walk(stmt.targets[0]) else None


def _read_order(sym: Any) -> tuple[int, str]:
    """Symbols in the order the trace read them (``u2`` before ``u10``)."""
    m = re.fullmatch(r"[a-z]+(\d+)", str(sym))
    return (int(m.group(1)) if m else -1, str(sym))


def _described(origins: dict[sympy.Symbol, _Origin]) -> dict[sympy.Symbol, DataValue]:
    out = {}
    for sym, origin in origins.items():
        described = _describe(origin.stack_trace)
        if described is not None:
            words, truth, where = described
            out[sym] = DataValue(words, truth, origin.inputs, where)
    _tell_apart(out, origins)
    return out


def _tell_apart(values: dict[sympy.Symbol, DataValue], origins: dict[sympy.Symbol, _Origin]) -> None:
    """Give values read on one line different words, in place.

    Several values can come from one line (``s, e = se.tolist()``, a helper called on the line
    that reads twice). Told by the same words, a condition relating them would read as one value
    compared with itself (``u0 <= u1`` as ``x <= x``; ``Eq(u0, u1)`` even collapses to True). The
    names a ``tolist()`` is unpacked into are used where they match the values read; otherwise
    each value is numbered in the order the program reads it."""
    groups: dict[str, list[sympy.Symbol]] = {}
    for sym, v in values.items():
        groups.setdefault(v.words, []).append(sym)
    for words, syms in groups.items():
        if len(syms) < 2:
            continue
        syms.sort(key=_read_order)
        traces = {origins[s].stack_trace for s in syms}
        names = _unpacked_names(next(iter(traces))) if len(traces) == 1 else None
        if names is not None and len(names) == len(syms) and len(set(names)) == len(names):
            for sym, name in zip(syms, names):
                values[sym].words = name
            continue
        for i, sym in enumerate(syms, 1):
            values[sym].words = f"{words} (value {i} of {len(syms)} read there)"


def data_values(ep: Any) -> dict[sympy.Symbol, DataValue]:
    """Each value read from data in ``ep`` (``u0``) -> the code that read it, and its inputs."""
    return _described(_origins(ep))


def _truth(expr: Any, sym: Any) -> Optional[bool]:
    """Whether ``expr`` says the truth value ``sym`` is true (True), false (False), or neither (None)."""
    if expr in (sympy.Eq(sym, 1), sympy.Ne(sym, 0), sympy.Ge(sym, 1), sympy.Gt(sym, 0)):
        return True
    if expr in (sympy.Eq(sym, 0), sympy.Ne(sym, 1), sympy.Le(sym, 0), sympy.Lt(sym, 1)):
        return False
    return None


def _parse(text: str, symbols: dict[str, sympy.Symbol]) -> Optional[Any]:
    try:
        return sympy.sympify(text, locals={k: v for k, v in symbols.items()})
    except Exception:  # an expression sympy cannot read back: keep torch's message
        return None


def _range_words(vr: Any) -> str:
    lo, hi = getattr(vr, "lower", None), getattr(vr, "upper", None)
    hi_text = "no upper bound" if hi is None or str(hi) in ("oo", "int_oo") else str(hi)
    return f"[{lo}, {hi_text}]"


def explain(message: str, values: dict[sympy.Symbol, DataValue], dim_names: dict[Any, str],
            ranges: dict[Any, Any]) -> Optional[str]:
    """torch's message followed by what failed in the user's terms; None when there is nothing to add."""
    from ..trace.data_checks import python_condition
    m = _TORCH_MESSAGE.match(message)
    if m is None:
        return None
    symbols = {str(s): s for s in [*values, *dim_names]}
    expr = _parse(m.group(1), symbols)
    if expr is None or not getattr(expr, "free_symbols", None):
        return None
    data = [s for s in expr.free_symbols if s in values]
    parts: list[str] = []
    if len(data) == 1 and values[data[0]].is_truth:
        sym = data[0]
        v = values[sym]
        truth = _truth(expr, sym)
        if truth is None:
            return None
        parts.append(f"the program needs `{v.words}` to be {'true' if truth else 'false'}, as it was for the "
                     f"example it was exported with, and these inputs make it {'false' if truth else 'true'}")
    elif data:
        names = {**{s: values[s].words for s in data}, **{s: n for s, n in dim_names.items()}}
        parts.append(f"the program needs {python_condition(expr, names)}, and these inputs break it")
    else:  # sizes only: the input checks refuse those first, and torch's message is matched to its end
        return None
    for sym in sorted(data, key=str):
        v = values[sym]
        inputs = (" from input " + ", ".join(v.inputs)) if v.inputs else ""
        told = f"`{v.words}` is read{inputs} at {v.where}"
        vr = ranges.get(sym)
        if vr is not None and not v.is_truth:
            told += f"; the program was exported for it in {_range_words(vr)}"
        parts.append(told)
    return f"{message}: " + ". ".join(parts) + "."


@dataclass
class AssertExplainer:
    """What ``module()`` keeps to explain a failed runtime assert: torch's messages, where each
    value read from data comes from, the Dim names and ranges. The user's source is read only
    when an assert fails."""

    messages: frozenset
    origins: dict
    names: dict
    ranges: dict

    def explain(self, message: str) -> Optional[str]:
        if message not in self.messages:
            return None
        return explain(message, _described(self.origins), self.names, self.ranges)


def explanations(ep: Any) -> Optional[AssertExplainer]:
    """The explainer of ``ep``'s runtime asserts (its subgraphs included), or None when none of them
    checks a value read from data.

    ``ep.module()`` raises with the longer message when one fails; the graphs keep torch's text,
    so printed programs and modules read as torch.export's."""
    from .symbol_names import dim_names as names_of
    messages = frozenset(
        node.args[1] for mod in ep.graph_module.modules() if isinstance(mod, torch.fx.GraphModule)
        for node in mod.graph.nodes
        if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default
        and len(node.args) > 1 and isinstance(node.args[1], str) and _TORCH_MESSAGE.match(node.args[1]))
    if not messages:
        return None
    origins = _origins(ep)
    if not origins:
        return None
    return AssertExplainer(messages, origins, names_of(ep), dict(ep.range_constraints))


def explain_failure(e: BaseException, explainer: Optional[AssertExplainer]) -> None:
    """Give a failed runtime assert (torch's ``RuntimeError``, raised by ``_assert_scalar``) the
    message of :class:`AssertExplainer`, in place: same exception, same traceback."""
    if explainer is None or type(e) is not RuntimeError or not e.args or not isinstance(e.args[0], str):
        return
    try:
        text = explainer.explain(e.args[0])
    except Exception:  # explaining must never hide the failure itself
        text = None
    if text is not None:
        e.args = (text, *e.args[1:])
