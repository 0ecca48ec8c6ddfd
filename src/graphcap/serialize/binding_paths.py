"""Where a node's data-dependent sizes come from (``meta["unbacked_bindings"]``), as data.

A node whose value holds a size read from data (``nonzero()``, ``.item()``, a custom
operator's dynamic size) binds each new unbacked symbol to a path into its value:
``u0 -> [CallMethodKey('size'), SequenceKey(0), DivideByKey(10)]``. Compilers of a
program (Inductor, AOTInductor) read the path to know where to take the size at run time,
so a loaded program carries them again. Each key is one tagged JSON value; a key graphcap
does not know is refused at save, naming the node, rather than written as something a
reader would misread.
"""
from __future__ import annotations

from typing import Any

import sympy
from torch.fx.experimental.symbolic_shapes import CallMethodKey, ConvertIntKey, DivideByKey, InnerTensorKey

from ..errors import SerializationError
from ..torch_private import pytree
from .values import Unencodable, bad, decode_value, encode_value


def encode_key(key: Any) -> dict[str, Any]:
    if isinstance(key, pytree.SequenceKey):
        return {"index": int(key.idx)}
    if isinstance(key, pytree.MappingKey):
        return {"key": encode_value(key.key)}
    if isinstance(key, pytree.GetAttrKey):
        return {"attr": str(key.name)}
    if isinstance(key, CallMethodKey):
        return {"method": str(key.name)}
    if isinstance(key, InnerTensorKey):
        return {"inner": str(key.inner_name)}
    if isinstance(key, DivideByKey):
        return {"divide": int(key.divisor)}
    if isinstance(key, ConvertIntKey):
        return {"int": None}
    raise Unencodable(f"a binding path key of type {type(key).__qualname__} ({key!s:.60})")


def encode_bindings(bindings: dict[Any, Any], expr: Any, node_name: str) -> list[Any]:
    """``[[symbol, [key, ...]], ...]``; ``expr`` writes a symbol (and enters it in the symbol table)."""
    try:
        return [[expr(sym), [encode_key(k) for k in path]] for sym, path in bindings.items()]
    except Unencodable as e:
        raise SerializationError(
            f"Node {node_name} binds a data-dependent size through {e}, which the .pt2 format cannot "
            f"write.", where=f"node {node_name}",
            fix="Report this as a graphcap bug: the format should know every key torch's ShapeEnv "
                "writes into unbacked_bindings.") from None


_METHODS = frozenset({"size", "stride", "storage_offset", "item"})


def _decode_key(j: Any, where: str) -> Any:
    if not (isinstance(j, dict) and len(j) == 1):
        raise bad(f"Malformed binding path key at {where}.")
    (tag, payload), = j.items()
    if tag == "index" and type(payload) is int and payload >= 0:
        return pytree.SequenceKey(payload)
    if tag == "key":
        return pytree.MappingKey(decode_value(payload))
    if tag == "attr" and isinstance(payload, str) and payload.isidentifier():
        return pytree.GetAttrKey(payload)
    if tag == "method" and payload in _METHODS:
        return CallMethodKey(payload)
    if tag == "inner" and isinstance(payload, str) and payload.isidentifier():
        return InnerTensorKey(payload)
    if tag == "divide" and type(payload) is int and payload > 0:
        return DivideByKey(payload)
    if tag == "int" and payload is None:
        return ConvertIntKey()
    raise bad(f"Unknown binding path key {tag!r:.40} at {where}.")


def decode_bindings(j: Any, symbol: Any, where: str) -> dict[Any, tuple[Any, ...]]:
    """The node's ``{unbacked symbol: path}``; ``symbol`` reads a symbol of the file's table."""
    if not isinstance(j, list):
        raise bad(f"Malformed unbacked_bindings at {where}.")
    out: dict[Any, tuple[Any, ...]] = {}
    for item in j:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
            raise bad(f"Malformed unbacked_bindings at {where}.")
        sym = symbol(item[0])
        if not isinstance(sym, sympy.Symbol):
            raise bad(f"unbacked_bindings at {where} binds {item[0]!r:.40}, which is not a symbol.")
        out[sym] = tuple(_decode_key(k, where) for k in item[1])
    return out
