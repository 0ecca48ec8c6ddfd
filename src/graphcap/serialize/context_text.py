"""The text form torch's pytree gives an attribute-flattened node's context.

A program handed to torch (ExecuTorch's emitter, AOTInductor's package,
torch's own save) has its structure written by torch's pytree
(``treespec_dumps``), which asks each registered class for its context as text.
graphcap's attribute-flattened classes (a transformers ``DynamicCache``) answer
with graphcap's value encoding; importing this module installs it in
``graphcap.auto_flatten`` (which sits below the serializer and cannot import it).
"""
from __future__ import annotations

import json
from typing import Any

from .. import auto_flatten
from . import class_lookup
from .values import bad, decode_value, encode_value


def context_to_text(context: tuple[Any, ...]) -> str:
    """An attribute-flattened node's context ``(keys, static)`` as JSON text.

    torch's pytree writes a registered class's context with this function
    (``treespec_dumps``): ExecuTorch's emitter, AOTInductor's package and
    torch's own save do, for a program handed to them (the static values
    are dtypes, devices, flags: graphcap's value encoding writes them).
    """

    def extra(v: Any) -> Any:
        if isinstance(v, type):
            return {"type": f"{v.__module__}.{v.__qualname__}"}
        return NotImplemented
    return json.dumps(encode_value(context, extra))


def context_from_text(text: str) -> tuple[Any, ...]:
    """The context :func:`context_to_text` wrote (``treespec_loads``: AOTInductor's loaded package)."""

    def extra(tag: str, payload: Any) -> Any:
        found = class_lookup.find_class(payload) if tag == "type" else None
        if found is None:
            raise bad(f"A flattened class's context names {payload!r:.80}, which is not found in this process.")
        return found
    keys, static = decode_value(json.loads(text), extra)
    return tuple(keys), tuple(tuple(pair) for pair in static)


auto_flatten.use_context_text(context_to_text, context_from_text)
