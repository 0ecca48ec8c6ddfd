"""Find the operators a saved program calls, by attribute lookup only.

An operator key ``ns::name.overload`` is resolved step by step on
``torch.ops`` (namespaces this process already has; nothing is imported), each
step checked for the kind it must be, and its schema compared with the saved
one; higher-order operators come from ``torch.ops.higher_order``.
"""
from __future__ import annotations

import re
from typing import Any, cast

import torch

from ..errors import SerializationError
from ..torch_private.ops import HigherOrderOperator, OpNamespace, OpOverload, OpOverloadPacket, schema_of
from .checked_fields import ident
from .values import bad

_OP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)$")


# operator namespaces torch itself defines: one missing, or with another schema, means another torch
_TORCH_NAMESPACES = ("aten", "prims")


def _saved_by(producer: Any) -> str:
    """``" (saved with torch 2.15.0)"`` from program.json's ``producer``, or ``""``."""
    version = producer.get("torch") if isinstance(producer, dict) else None
    return f" (saved with torch {version})" if isinstance(version, str) and version else ""


def _missing_op(key: str, why: str, producer: Any = None) -> SerializationError:
    ns = key.split("::", 1)[0]
    if ns in _TORCH_NAMESPACES:
        return SerializationError(
            f"The program calls the operator {key}, which this torch ({torch.__version__}) does not have "
            f"({why}): the file{_saved_by(producer)} needs a torch that has it.",
            where=f"program.json operator {key}",
            fix="Load the file with the torch it was saved with, or export the program again with this torch "
                "and save it.")
    return SerializationError(
        f"The program calls the operator {key}, which is not registered in this process ({why}).",
        where=f"program.json operator {key}",
        fix=f"Import or load the library that defines the '{ns}' operators (the module using "
            f"torch.library to define {key}, or torch.ops.load_library(...) for a compiled one) "
            f"before graphcap.load.")


def resolve_op(key: Any, schemas: dict[str, Any], producer: Any = None) -> OpOverload:
    """The operator overload named by ``key`` (``ns::name.overload``), its schema checked against
    ``schemas[key]`` when the file recorded one. ``producer`` (program.json's) names the saving torch
    in the error when torch's own operators differ."""
    m = _OP_KEY.match(key) if isinstance(key, str) else None
    if m is None:
        raise bad(f"Malformed operator name {key!r:.80}.")
    ns, name, overload = m.groups()
    if ns.startswith("__"):
        raise bad(f"Malformed operator name {key!r:.80}.")
    # torch.ops → namespace → packet → overload, each step checked for the kind it must be
    steps = ((ns, OpNamespace, f"no namespace '{ns}'", f"{ns!r} is not an operator namespace"),
             (name, OpOverloadPacket, f"'{ns}' has no operator '{name}'", f"'{ns}.{name}' is not an operator"),
             (overload, OpOverload, f"'{ns}::{name}' has no overload '{overload}'",
              f"'{overload}' is not an overload"))
    op: Any = torch.ops
    for attr, kind, missing, wrong in steps:
        try:
            op = getattr(op, attr)
        except (AttributeError, RuntimeError):
            raise _missing_op(key, missing, producer) from None
        if not isinstance(op, kind):
            raise (bad(wrong + ".") if kind is OpNamespace else _missing_op(key, wrong, producer))
    saved = schemas.get(key)
    if saved is not None and saved != str(schema_of(op)):
        raise SerializationError(
            f"The operator {key} in this process (torch {torch.__version__}) has the schema\n  {schema_of(op)}\n"
            f"but the program was saved{_saved_by(producer)} with\n  {saved}", where=f"program.json operator {key}",
            fix="Load with the version of torch / of the operator library the program was exported with.")
    return cast(OpOverload, op)  # the last step checked it


def resolve_hop(name: Any) -> HigherOrderOperator:
    """The higher-order operator ``torch.ops.higher_order.<name>``."""
    name = ident(name, "higher-order operator name")
    try:
        hop = getattr(torch.ops.higher_order, name)
    except (AttributeError, RuntimeError):
        hop = None
    if not isinstance(hop, HigherOrderOperator):
        raise SerializationError(
            f"The program uses the higher-order operator {name!r}, which this torch does not have.",
            where="program.json", fix="Load with the torch version the program was exported with.")
    return hop
