"""torch's operator objects (``torch._ops``) and their private fields.

graphcap records, checks, serializes and rewrites calls of ATen and custom
operators. Their classes (``OpOverload``, ``OpOverloadPacket``,
``HigherOrderOperator``, the namespace objects of ``torch.ops``) live in the
private ``torch._ops``; an overload's schema and overload name are private
fields; steering a composite operator needs its per-key kernel entry and its
dispatch cache.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket

RELIES_ON = {
    "torch._ops.OpOverload": None,
    "torch._ops.OpOverloadPacket": None,
    "torch._ops.HigherOrderOperator": None,
    "torch._ops._OpNamespace": None,
    "torch._ops.OpOverload#_schema": None,
    "torch._ops.OpOverload#_overloadname": None,
    "torch._ops.OpOverload#_op_dk": None,
    "torch._ops.OpOverload#_dispatch_cache": None,
    "torch._C._get_max_operator_version": (),
    "torch._C._should_allow_numbers_as_tensors": (),
    "torch._sym_sqrt": (),  # legacy_sym_sqrt tolerates its absence; listed so a removal is noticed
}

__all__ = ["OpOverload", "OpOverloadPacket", "HigherOrderOperator", "OpNamespace", "schema_of",
           "overload_name", "run_kernel_for_key", "clear_dispatch_cache", "legacy_sym_sqrt",
           "is_higher_order_operator", "max_operator_version", "takes_numbers_as_tensors"]

# The class of ``torch.ops.aten`` and the other operator namespaces.
OpNamespace = torch._ops._OpNamespace


def is_higher_order_operator(obj: Any) -> bool:
    """Whether ``obj`` is a higher-order operator (``torch.ops.higher_order.*``), by their common
    base class ``torch._ops.HigherOrderOperator``."""
    return isinstance(obj, HigherOrderOperator)


def schema_of(op: Any) -> Any:
    """The ``FunctionSchema`` of an operator overload (or packet), or None for anything else.

    Relies on the field ``OpOverload._schema``.
    """
    return getattr(op, "_schema", None)


def overload_name(op: OpOverload) -> str:
    """The overload part of ``ns::name.overload`` (``""`` for the default overload's schema name).

    Relies on the field ``OpOverload._overloadname``.
    """
    return op._overloadname


def run_kernel_for_key(op: OpOverload, key: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``op``'s C++ kernel registered for dispatch key ``key`` directly.

    Relies on the method ``OpOverload._op_dk(key, *args, **kwargs)``.
    """
    return op._op_dk(key, *args, **kwargs)


def clear_dispatch_cache(op: OpOverload) -> None:
    """Forget which kernel ``op`` chose per dispatch key (after changing its ``py_kernels``).

    Relies on the dict field ``OpOverload._dispatch_cache``.
    """
    op._dispatch_cache.clear()


def legacy_sym_sqrt() -> Any:
    """The private ``torch._sym_sqrt`` (what some traces record for ``math.sqrt`` of a SymInt), or None where absent."""
    return getattr(torch, "_sym_sqrt", None)


def max_operator_version() -> int:
    """The version of ATen's operator set in this process (what torch.export's files record as ``aten``).

    It grows when an ATen operator's meaning changes. Relies on ``torch._C._get_max_operator_version()`` (C).
    """
    return int(torch._C._get_max_operator_version())


def takes_numbers_as_tensors(op: OpOverload) -> bool:
    """Whether calling ``op`` accepts a Python number where its schema takes a Tensor (``aten.add.Tensor(x, 1)``:
    torch wraps it) rather than refusing it (``aten.mm.default(x, 1)``): true for ``prims`` and for the ATen
    operators torch's argument parser lists by name.

    Relies on ``torch._C._should_allow_numbers_as_tensors(name)`` (C), given the operator's unqualified name.
    """
    namespace = getattr(op, "namespace", "")
    if namespace in ("prims", "nvprims"):
        return True
    if namespace != "aten":
        return False
    return bool(torch._C._should_allow_numbers_as_tensors(schema_of(op).name.split("::", 1)[-1]))
