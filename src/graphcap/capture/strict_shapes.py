"""Strict mode's shape facts: what dynamo decided about sizes, restated in graphcap's ShapeEnv.

dynamo branched on and specialized symbolic sizes while reading the bytecode;
those decisions are guards in its own ShapeEnv, not nodes of its graph. Each is
restated over graphcap's symbols (matched dim by dim through the graph's
inputs) and guarded in graphcap's ShapeEnv with the user's line, so the spec
check, its messages and suggested fixes are non-strict's.
"""
from __future__ import annotations

import os
import re
from typing import Any

import sympy
import torch

from ..dynamic.guard_words import in_framework
from ..torch_private import dynamo as dynamo_private
from ..torch_private import shapes as shapes_private


def _expr(value: Any) -> Any:
    return value.node.expr if isinstance(value, torch.SymInt) else sympy.Integer(value)


def transfer_shape_facts(placeholders: list, leaves: list, files: set[str]) -> None:
    """Restate dynamo's shape decisions over graphcap's symbols, in graphcap's ShapeEnv."""
    mapping: dict = {}
    pending = []
    dynamo_env = None
    target_env = None
    for node, leaf in zip(placeholders, leaves):
        val = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(leaf, torch.SymInt) and isinstance(val, torch.SymInt):
            # an int input the spec makes dynamic, kept symbolic by dynamo too (strict.py hands it
            # over marked): dynamo's symbol is graphcap's, so its guards on the int are restated
            dynamo_env, target_env = val.node.shape_env, leaf.node.shape_env
            d = _expr(val)
            if isinstance(d, sympy.Symbol) and d not in mapping:
                mapping[d] = _expr(leaf)
            else:
                pending.append((d, leaf, None))
            continue
        if isinstance(leaf, torch.SymInt):
            # an int input the spec makes dynamic that dynamo still read as a constant: the program
            # holds only the example's value; graphcap's spec check says so as non-strict would
            if leaf.node.hint is None:  # an IntVar (unbacked): no value to specialize it to
                from ..errors import UnsupportedError
                raise UnsupportedError(
                    "strict=True reads Python int inputs as constants, so an int input marked with IntVar "
                    "(a size that must not be specialized) cannot be captured in strict mode.",
                    where="export(..., dynamic_shapes=ParamsSpec({...: IntVar(...)}), strict=True)",
                    fix="Export with strict=False (the int becomes a SymInt input), or pass the value as a "
                        "tensor.")
            dynamo_private.add_guard(leaf.node.shape_env, sympy.Eq(leaf.node.expr, int(leaf.node.hint)),
                                     dynamo_private.note_sloc("strict=True reads Python ints as constants"))
            continue
        if not (isinstance(val, torch.Tensor) and isinstance(leaf, torch.Tensor)) or val.dim() != leaf.dim():
            continue
        for dyn, ours in zip(val.shape, leaf.shape):
            if isinstance(dyn, torch.SymInt):
                dynamo_env = dyn.node.shape_env
            if isinstance(ours, torch.SymInt):
                target_env = ours.node.shape_env
            d, sloc = _expr(dyn), None
            if isinstance(dyn, torch.SymInt) and not isinstance(d, sympy.Symbol):
                raw, sloc = dynamo_private.unreplaced_expr(dyn)  # dynamo specialized it: say where
                if isinstance(raw, sympy.Symbol) and raw not in mapping:
                    mapping[raw] = _expr(ours)
            elif isinstance(dyn, torch.SymInt):
                raw, replaced_at = dynamo_private.unreplaced_expr(dyn)
                if raw != d:  # dynamo tied this size to another's symbol: where it did so
                    sloc = replaced_at
            if isinstance(d, sympy.Symbol) and d not in mapping:
                mapping[d] = _expr(ours)
            else:
                pending.append((d, ours, sloc))
    if target_env is None:
        return  # graphcap has no symbols: dynamo had none either (nothing was marked)
    for d, ours, sloc in pending:
        if isinstance(ours, torch.SymInt) or d.free_symbols:
            # dynamo fixed this size (or tied it to another): graphcap's spec check decides
            if sloc is not None:
                where = _user_sloc(sloc, files)
            elif not d.free_symbols:  # dynamo's trace holds the size as the example's number
                where = dynamo_private.note_sloc(
                    f"strict=True: dynamo could read the program only with this size fixed to {d}")
            else:
                where = None
            dynamo_private.add_guard(target_env, sympy.Eq(_expr(ours), d.xreplace(mapping)), where)
    if dynamo_env is None:
        return
    replaced = shapes_private.replacements(dynamo_env)
    for guard in list(shapes_private.guards(dynamo_env)):  # a copy: add_guard appends to a ShapeEnv
        # over the symbols dynamo kept: a guard on a size dynamo later found equal to another
        # (s81 -> s69) is a guard on that other size, which graphcap's inputs name
        expr = _with_replacements(guard.expr, replaced)
        if expr is sympy.true or not expr.free_symbols <= set(mapping):
            continue  # about values graphcap's replay computes itself (unbacked sizes)
        dynamo_private.add_guard(target_env, expr.xreplace(mapping), _user_sloc(guard.sloc, files))


def _with_replacements(expr: Any, replaced: dict) -> Any:
    """``expr`` with a ShapeEnv's replacements applied until none applies (they may chain)."""
    for _ in range(len(replaced) + 1):
        new = expr.xreplace(replaced)
        if new == expr:
            break
        expr = new
    return expr


_DYNAMO_USER_LOC = re.compile(r"^(?P<code>.*?)\s+#\s+(?P<file>\S+):(?P<line>\d+) in (?P<fn>\S+)\s*$", re.S)


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_DYNAMO_DIR = os.path.join(_TORCH_DIR, "_dynamo") + os.sep


def _user_sloc(sloc: Any, files: set[str]) -> Any:
    """dynamo's location of a guard (``code  # shortened/file.py:12 in fn``, torch frame beside it)
    as graphcap's: the user's frame, with the full file name found among the graph's stack traces."""
    frame = getattr(sloc, "framework_loc", None)
    frame_file = os.path.abspath(getattr(frame, "filename", "") or "")
    text = getattr(sloc, "maybe_user_loc", None)
    match = _DYNAMO_USER_LOC.match(text.strip()) if isinstance(text, str) else None
    full = None
    if match is not None:
        short = match.group("file")
        full = next((f for f in sorted(files) if f.endswith(short)), None)
        if full is None:  # not a file of the program's own: torch's (a framework guard) if it is there
            in_torch = os.path.join(os.path.dirname(torch.__file__), short)
            full = in_torch if os.path.exists(in_torch) else short
    if in_framework(sloc) and not frame_file.startswith(_DYNAMO_DIR):
        # an operator's own logic (a meta kernel, a reference, a fake rule of graphcap's) made it, not
        # a branch of the user's: keep its frame, so graphcap's spec check treats it as the framework's,
        # and the user's line it ran under (for messages), as non-strict records both
        under = (f"{full}:{match.group('line')} in {match.group('fn')}: {match.group('code').strip()}"
                 if match is not None and full in files else None)
        return dynamo_private.user_sloc(frame.filename, frame.lineno, frame.name, frame.line or "", under)
    if match is None:
        return sloc
    return dynamo_private.user_sloc(full, int(match.group("line")), match.group("fn"), match.group("code").strip())
