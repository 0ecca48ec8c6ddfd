"""Flattening inputs and outputs into leaves, and naming the leaves.

graphcap uses torch's pytree engine (``torch.utils._pytree``) for the work; this
module adds what export needs on top of it:

* :func:`register_dataclass` for user dataclasses;
* automatic flattening of *unknown* classes that hold tensors (a transformers
  ``DynamicCache``, a user's plain class), with a warning that names the class
  and how to register it, where torch.export would fail;
* (in :mod:`graphcap.module_inputs`) nn.Module instances passed as inputs,
  flattened into their tensors without registering the user's class;
* the input path strings (``*args[0]``, ``**kwargs['mask']``) every runtime
  error uses, and the placeholder names derived from the same paths.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import warnings
from typing import Any, Callable, Optional, Sequence

import torch

from . import auto_flatten
from .errors import ExportInputError, InputBindingError
from .torch_private import pytree

# Types that are leaves as they are: either tensors, or Python values that
# export specializes on (baked into the graph and checked by ``module()``).
_PLAIN_LEAF_TYPES = (torch.Tensor, int, float, bool, complex, str, bytes, type(None), torch.dtype,
                     torch.device, torch.memory_format, torch.layout, enum.Enum, type(Ellipsis), slice,
                     torch.SymInt, torch.SymFloat, torch.SymBool)


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_dataclass(cls: type, *, serialized_type_name: Optional[str] = None) -> None:
    """Make a dataclass usable as an input or output container.

    Every field becomes a child of the pytree node; a field holding ``None``
    is kept in the structure (so a later call may not switch it to a tensor).

    Args:
        cls: the dataclass type.
        serialized_type_name: the name a saved program uses for the class
            (default: its qualified name); ``load`` finds the class by it.

    Returns:
        None; the class is registered with torch's pytree for this process.

    Raises:
        ExportInputError: ``cls`` is not a dataclass type.

    Example:
        >>> @dataclasses.dataclass
        ... class Batch:
        ...     x: torch.Tensor
        ...     mask: torch.Tensor
        >>> graphcap.register_dataclass(Batch)
        >>> ep = graphcap.export(model, (Batch(torch.randn(2, 4), torch.ones(2, 4)),))
    """
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise ExportInputError(
            f"register_dataclass expects a dataclass type, got {cls!r}.",
            fix="For a plain class, graphcap.register_flattenable(cls) flattens it by its attributes (as export "
                "does on its own); or decorate it with @dataclasses.dataclass, or register it with "
                "torch.utils._pytree.register_pytree_node.")
    if cls in pytree.SUPPORTED_NODES:
        return
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def flatten(obj):
        return [getattr(obj, n) for n in names], names

    def flatten_with_keys(obj):
        return [(pytree.GetAttrKey(n), getattr(obj, n)) for n in names], names

    def unflatten(values, context):
        return cls(**dict(zip(context, values)))

    pytree.register_pytree_node(cls, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys,
                                serialized_type_name=serialized_type_name or qualified_name(cls))


def register_flattenable(cls: type, *, serialized_type_name: Optional[str] = None,
                         with_torch: bool = False) -> None:
    """Flatten ``cls`` by its attributes, as export does on its own for a class it does not know.

    Export flattens an input or output of an unregistered class that holds
    tensors by its instance attributes (those holding tensors are children, the
    rest part of the structure) and warns. Registering the class first does the
    same without the warning, and lets ``load`` rebuild a saved program whose
    structure names the class (a ``transformers`` ``DynamicCache`` output) in
    a process that has not exported it. The class joins graphcap's own table;
    torch's pytree registry is left as it is (graphcap registers the class
    there only while a trace runs, and when a program is handed to torch's
    tools), unless ``with_torch`` asks for it.

    Args:
        cls: a class whose instances keep their state in ``__dict__``.
        serialized_type_name: the name files give the class (default: its
            qualified name ``module.QualName``). Give the same name in the
            exporting and the loading process, as with torch's
            ``register_pytree_node``; needed only for a class whose qualified
            name differs between them (one defined in ``__main__``).
        with_torch: also register the class with torch's pytree for the rest
            of the process, under the same node functions and name as a
            program's hand-over: what a process needs that loads, with torch's
            own loaders, a file made from a graphcap program whose structure
            holds the class (an AOTInductor package, or a program file written
            by torch's own saver); without it torch's loader fails with
            ``Deserializing <name> in pytree is not registered``.

    Returns:
        None.

    Raises:
        ExportInputError: ``cls`` is not a class, or is already a pytree node
            registered another way (a dataclass registered with
            ``register_dataclass``, a class registered with torch's pytree), or
            ``serialized_type_name`` renames a class already registered with
            torch under another name.

    Example:
        >>> from transformers.cache_utils import DynamicCache, DynamicLayer
        >>> graphcap.register_flattenable(DynamicCache)
        >>> graphcap.register_flattenable(DynamicLayer)
        >>> ep = graphcap.load("gpt2.pt2")

        In a process that runs an AOTInductor package of that program:

        >>> graphcap.register_flattenable(DynamicCache, with_torch=True)
        >>> graphcap.register_flattenable(DynamicLayer, with_torch=True)
        >>> runner = torch._inductor.aoti_load_package("gpt2_aoti.pt2")
    """
    if not isinstance(cls, type):
        raise ExportInputError(f"register_flattenable expects a class, got {cls!r:.80}.",
                               fix="Pass the class itself, e.g. graphcap.register_flattenable(DynamicCache).")
    if serialized_type_name is not None and not (isinstance(serialized_type_name, str) and serialized_type_name):
        raise ExportInputError(f"serialized_type_name must be a non-empty string, got {serialized_type_name!r:.80}.",
                               fix=f"e.g. serialized_type_name={qualified_name(cls)!r}.")
    if not auto_flatten.is_auto_flattened(cls):
        if cls in pytree.SUPPORTED_NODES or issubclass(cls, (tuple, list, dict)) or cls in _PLAIN_LEAF_TYPES \
                or issubclass(cls, _PLAIN_LEAF_TYPES):
            raise ExportInputError(
                f"{qualified_name(cls)} is already a pytree node or a value export keeps whole; it is not "
                f"flattened by its attributes.", fix="Leave it as it is: export and load know it already.")
        auto_flatten.node_of(cls, holds_tensor, serialized_type_name)
    elif serialized_type_name is not None and serialized_type_name != auto_flatten.serialized_name(cls):
        if pytree.registered_node(cls) is not None:
            raise ExportInputError(
                f"{qualified_name(cls)} is already registered with torch's pytree under the name "
                f"{auto_flatten.serialized_name(cls)!r}; it cannot be renamed {serialized_type_name!r} now.",
                fix=f"Call graphcap.register_flattenable({cls.__name__}, serialized_type_name="
                    f"{serialized_type_name!r}) first in the process, before a program holding it is exported, "
                    f"handed to a consumer or loaded.")
        auto_flatten.rename(cls, serialized_type_name)
    if with_torch and not auto_flatten.register_with_torch(cls):
        raise ExportInputError(
            f"{qualified_name(cls)} is already registered with torch's pytree by other code; graphcap "
            f"leaves that registration as it is.",
            fix=f"Load with that registration (make the same one in the exporting process: graphcap then "
                f"flattens {cls.__name__} the torch way), or leave {cls.__name__} unregistered there and call "
                f"graphcap.register_flattenable({cls.__name__}, with_torch=True) first.")


# --------------------------------------------------------------------------
# automatic flattening of unknown classes
# --------------------------------------------------------------------------

def _is_registered(obj: Any) -> bool:
    t = type(obj)
    return t in pytree.SUPPORTED_NODES or pytree.is_namedtuple_instance(obj) or \
        pytree.is_structseq_instance(obj)


def _children(obj: Any) -> list[Any]:
    """One level of a registered pytree node's children (cycle-safe callers recurse)."""
    node_type = pytree.node_type(obj)
    return list(pytree.SUPPORTED_NODES[node_type].flatten_fn(obj)[0])


def holds_tensor(obj: Any, _seen: Optional[set] = None, _depth: int = 0) -> bool:
    """Whether a tensor can be reached from ``obj`` through containers and attributes."""
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, _PLAIN_LEAF_TYPES) or _depth > 12 or isinstance(obj, (type, torch.nn.Module)):
        return False
    _seen = set() if _seen is None else _seen
    if id(obj) in _seen:
        return False
    _seen.add(id(obj))
    if isinstance(obj, dict):
        return any(holds_tensor(v, _seen, _depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(holds_tensor(v, _seen, _depth + 1) for v in obj)
    if _is_registered(obj) and not auto_flatten.is_auto_flattened(type(obj)):
        return any(holds_tensor(c, _seen, _depth + 1) for c in _children(obj))
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return any(holds_tensor(v, _seen, _depth + 1) for v in attrs.values())
    return False


def auto_register(tree: Any, where: str) -> list[str]:
    """Flatten every unknown class in ``tree`` that holds tensors by its attributes.

    The class joins graphcap's table (:mod:`graphcap.auto_flatten`) and, for
    the running trace only, torch's pytree registry. ``where`` says which side
    of the program the tree is (``"inputs"`` or ``"outputs"``) for the warning
    given the first time. Returns the qualified names met for the first time.
    """
    found: list[str] = []
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 16 or id(obj) in seen or isinstance(obj, _PLAIN_LEAF_TYPES):
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            for v in obj.values():
                visit(v, depth + 1)
            return
        if isinstance(obj, (list, tuple)):
            for v in obj:
                visit(v, depth + 1)
            return
        if _is_registered(obj):
            for c in _children(obj):
                visit(c, depth + 1)
            return
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and holds_tensor(obj):
            cls = type(obj)
            if not auto_flatten.is_auto_flattened(cls):
                auto_flatten.node_of(cls, holds_tensor)
                found.append(qualified_name(cls))
                warnings.warn(
                    f"graphcap: the {where} contain an instance of {qualified_name(cls)}, a class "
                    f"that holds tensors but is not registered as a pytree node. graphcap flattens "
                    f"it by its attributes. To choose how it flattens (and to silence this "
                    f"warning), register it first: graphcap.register_flattenable({cls.__name__}) "
                    f"to keep this flattening, graphcap.register_dataclass({cls.__name__}) for a "
                    f"dataclass, or torch.utils._pytree.register_pytree_node.",
                    stacklevel=4)
            auto_flatten.register_for_trace(cls)
            for v in attrs.values():
                visit(v, depth + 1)

    visit(tree, 0)
    return found


def auto_registered_classes() -> dict[type, str]:
    """Classes graphcap flattened by their attributes in this process, with their qualified names."""
    return {cls: qualified_name(cls) for cls in auto_flatten.attribute_flattened_classes()}


# --------------------------------------------------------------------------
# paths and names
# --------------------------------------------------------------------------

KeyPath = tuple


def input_path_str(path: KeyPath) -> str:
    """Render the path of a leaf of ``(args, kwargs)`` as the user wrote it.

    ``(SequenceKey(0), SequenceKey(1))`` → ``*args[1]``;
    ``(SequenceKey(1), MappingKey('mask'))`` → ``**kwargs['mask']``.
    """
    if not path:
        return "inputs"
    head = "*args" if path[0] == pytree.SequenceKey(0) else "**kwargs"
    return head + pytree.keystr(path[1:])



def _key_name(key: Any) -> str:
    if isinstance(key, pytree.SequenceKey):
        return str(key.idx)
    if isinstance(key, pytree.MappingKey):
        return str(key.key)
    if isinstance(key, pytree.GetAttrKey):
        return key.name
    return str(key)


def sanitize_name(name: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]", "_", name)
    if not name or name[0].isdigit():
        name = "_" + name
    return name


def placeholder_name(path: KeyPath, arg_names: Sequence[str]) -> str:
    """The graph name of a user input leaf, from its argument name and path.

    ``x`` for a plain tensor argument, ``xs_0`` for the first item of a list
    argument ``xs``, ``d_scale`` for ``d["scale"]``, ``args_2`` for the third
    value of ``*args`` past the named parameters.
    """
    if path[0] == pytree.SequenceKey(0):
        idx = path[1].idx
        base = arg_names[idx] if idx < len(arg_names) else f"args_{idx}"
    else:
        base = _key_name(path[1])
    rest = [_key_name(k) for k in path[2:]]
    return sanitize_name("_".join([base, *rest]))


# --------------------------------------------------------------------------
# binding to the forward signature
# --------------------------------------------------------------------------

def signature_of(fn: Callable) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _binding_fix(sig: inspect.Signature) -> str:
    """The export call that fits ``sig``, written with forward's own parameter names: the required
    positional ones in ``args``, the keyword-only ones in ``kwargs``."""
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    positional += [f"*{p.name}" for p in params if p.kind is p.VAR_POSITIONAL]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    call = "(" + ", ".join(positional) + ("," if len(positional) == 1 else "") + ")"
    if keyword:
        call += ", kwargs={" + ", ".join(f"{k!r}: {k}" for k in keyword) + "}"
    note = (f" ({', '.join(keyword)} {'is' if len(keyword) == 1 else 'are'} keyword-only: "
            f"pass {'it' if len(keyword) == 1 else 'them'} in kwargs, not in args)" if keyword else "")
    return (f"Pass one example per parameter of forward, positional ones in `args` (a tuple) and "
            f"keyword-only ones in `kwargs` (a dict), as calling the module would take them: "
            f"export(mod, {call}){note}.")


def bind_inputs(fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict, list[str]]:
    """Check ``args``/``kwargs`` against ``fn``'s signature, as a call would.

    Returns the args, the kwargs in the order the user gave them (as torch
    names and orders the inputs; ``module()`` accepts them in any order), and the names of the
    positional parameters (``*args`` values past them are named later by
    position). Defaults are not filled in: only what the user passed becomes an
    input, as in torch.export.
    """
    sig = signature_of(fn)
    if sig is None:
        return tuple(args), dict(kwargs), []
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise InputBindingError(
            f"The example inputs do not fit the signature of {getattr(fn, '__qualname__', fn)}"
            f"{sig}: {e}.",
            where="export(mod, args, kwargs)",
            fix=_binding_fix(sig)) from None
    params = list(sig.parameters.values())
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    names = positional[:len(args)]
    if var_pos is not None and len(args) > len(positional):
        names += [f"{var_pos}_{i}" for i in range(len(args) - len(positional))]
    return tuple(args), dict(kwargs), names
