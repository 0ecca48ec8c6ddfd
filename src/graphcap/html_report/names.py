"""The names a user reads for the program's symbols: ``batch`` rather than ``s72``.

The shape engine numbers its symbols (``s72``, ``u0``); the user wrote
``Dim("batch")``. The report prints every size, guard and assert with the
user's name, and keeps the engine's symbol only where the printed program
(which uses it) must be matched: the range table shows both.

Where a name comes from, first found wins:

1. the Dim names the program records for its symbols (:func:`recorded_dim_names`,
   the one place to change when the program's own symbol -> Dim name mapping
   is available);
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
    """``str(symbol) -> Dim name`` as far as the program records them.

    Read from ``ep.dim_names`` when the program carries such a mapping, else from the
    shape engine's ``source_name_to_debug_name`` (source -> the spec's name) joined with
    each symbol's sources, for a program whose fake inputs still hold their ShapeEnv.
    """
    names: dict[str, str] = {}
    mapping = getattr(ep, "dim_names", None)
    if isinstance(mapping, dict):
        names.update({str(k): str(v) for k, v in mapping.items() if v})
    env = _shape_env(ep)
    debug = getattr(env, "source_name_to_debug_name", None) or {}
    sources = getattr(env, "var_to_sources", None) or {}
    for sym, srcs in sources.items():
        for src in srcs:
            name = debug.get(_source_name(src))
            if name and str(sym) not in names:
                names[str(sym)] = name
    return names


def _source_name(src: Any) -> str:
    try:
        return src.name() if callable(getattr(src, "name", None)) else str(src.name)
    except Exception:  # noqa: BLE001 (a source kind without a name: no name from it)
        return ""


def _shape_env(ep: Any) -> Any:
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
        for s in sizes:
            if isinstance(s, torch.SymInt):
                return s.node.shape_env
    return None


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

    def __init__(self) -> None:  # noqa: D107 (no program to read)
        self.dim_names, self.uses, self.names = {}, {}, {}
