"""The names a user reads for the program's symbols: ``batch`` rather than ``s72``.

The shape engine numbers its symbols (``s72``, ``u0``); the user wrote
``Dim("batch")``. The report prints every size, guard and assert with the
user's name, and keeps the engine's symbol only where the printed program
(which uses it) must be matched: the range table shows both.

Where a name comes from, first found wins:

1. the Dim names the program records for its symbols (``ep.export_dim_names``,
   read by :func:`recorded_dim_names`, the one place that knows where they are);
2. the first user input whose size the symbol is: ``input_ids.shape[1]``
   (read from the signature's placeholders, so it works for a loaded program too);
3. the symbol itself (a value read from data, ``u0``, that no input size is).
"""
from __future__ import annotations

import re
from typing import Any

import torch

from ..signature import InputKind

_SYMBOL = re.compile(r"\b([su]\d+)\b")


def recorded_dim_names(ep: Any) -> dict[str, str]:
    """``str(symbol) -> Dim name`` as the program records them (``ep.export_dim_names``, plain data
    written at export: the spec's Dims by name); empty for a program without the record (a hint, an
    older file)."""
    mapping = getattr(ep, "export_dim_names", None)
    if not isinstance(mapping, dict):
        return {}
    return {str(k): str(v) for k, v in mapping.items() if v}


def input_paths(ep: Any) -> dict[str, list[str]]:
    """``str(symbol) -> ["input_ids.shape[0]", ...]``: the user input sizes that are exactly that symbol."""
    user = {getattr(s.arg, "name", None) for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT}
    uses: dict[str, list[str]] = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt) and _SYMBOL.fullmatch(str(size)):
                    uses.setdefault(str(size), []).append(f"{node.name}.shape[{d}]")
        elif isinstance(val, torch.SymInt) and _SYMBOL.fullmatch(str(val)):
            uses.setdefault(str(val), []).append(node.name)
    return uses


class SymbolNames:
    """Rewrites text over the engine's symbols with the names a user reads."""

    def __init__(self, ep: Any):
        self.dim_names = recorded_dim_names(ep)
        self.uses = input_paths(ep)
        self.names: dict[str, str] = {}
        for sym in [*map(str, getattr(ep, "range_constraints", {}) or {}), *self.uses]:
            self.names[sym] = self.dim_names.get(sym) or (self.uses.get(sym) or [sym])[0]

    def name(self, symbol: Any) -> str:
        key = str(symbol)
        return self.names.get(key) or self.dim_names.get(key) or key

    def __call__(self, text: Any) -> str:
        """``text`` with every known symbol replaced by its name (unknown ones left as they are)."""
        return _SYMBOL.sub(lambda m: self.name(m.group(1)), str(text))

    def shape(self, val: Any) -> str:
        """``float32[batch, seq, 64]`` for a tensor value, the named text of any other value."""
        if isinstance(val, torch.Tensor):
            return f"{str(val.dtype).replace('torch.', '')}[{', '.join(self(s) for s in val.shape)}]"
        return self(val)


class NoNames(SymbolNames):
    """Leaves text as it is (for a view drawn without a program, e.g. in the layout tests)."""

    def __init__(self) -> None:  # no program to read
        self.dim_names, self.uses, self.names = {}, {}, {}
