"""Finding the classes a file's structure names, without letting the file choose code to run.

A program's input/output structure names classes by their qualified name
(``transformers.modeling_outputs.CausalLMOutputWithCrossAttentions``). A class
registered with torch's pytree (or in graphcap's table) is found as it is. For
another one, the loader looks the name up **only below packages the process
already imported** (``sys.modules``: the user's ``import transformers``), or
below modules the user names (``graphcap.load(..., import_modules=[...])``,
``graphcap --import MODULE``): a file never makes the loader import a package
by itself. Importing a submodule of an imported library (transformers defines
its output classes in modules it imports lazily) runs that library's code, which
the user already chose to run; but never a module named ``__main__`` (or any
dunder), which is a script that acts when imported (``unittest.__main__`` runs a
test discovery and exits), and never a standard-library module not yet imported
(the standard library is not the user's library, and some of its modules act
when imported).

A class found this way is used as the file says it was flattened: a class the
library registers with torch's pytree on import (transformers' ``ModelOutput``
subclasses) by that registration; a class graphcap flattened by its attributes
at export (``DynamicCache``) by joining graphcap's table the same way
(:func:`graphcap.register_flattenable`).

When the class cannot be found and the caller allows it (the command line
does), the structure gets a **stand-in**: a generic record named after the
class that holds the node's children and its context as the file has them.
It prints, runs, compares and saves again like the original (same name, same
children, same context), but it is not the library's class (no methods).
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import importlib
import sys
from typing import Any, Iterator, Optional, Sequence

from .. import auto_flatten
from ..errors import SerializationError
from ..torch_private import pytree

# What the running load may do: (modules the user named, whether stand-ins are allowed).
_OPTIONS: contextvars.ContextVar[tuple[tuple[str, ...], bool]] = contextvars.ContextVar(
    "graphcap_class_lookup", default=((), False))

_STAND_INS: dict[str, type] = {}  # one stand-in class per missing qualified name, made once


def import_named_modules(modules: Sequence[str]) -> None:
    """Import the modules the user named (``import_modules=`` / ``--import``), with a clear error."""
    for name in modules:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise SerializationError(f"{name!r:.80} is not a module name.", where="import_modules",
                                     fix="Name modules as in an import statement, e.g. 'transformers'.")
        try:
            importlib.import_module(name)
        except Exception as e:  # the module's own import failed: say which and why
            raise SerializationError(
                f"Importing {name!r}, which the load was asked to import, failed: {type(e).__name__}: {e}",
                where="import_modules", fix=f"Check that {name} is installed in this environment "
                                            f"(python -c 'import {name}').") from None


@contextlib.contextmanager
def options(import_modules: Sequence[str] = (), stand_ins: bool = False) -> Iterator[None]:
    """The lookup rules of one load: the modules the user named, and whether stand-ins are allowed."""
    token = _OPTIONS.set((tuple(import_modules), bool(stand_ins)))
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def _importable(module_name: str) -> bool:
    """Whether the loader may import ``module_name``: it sits below a package already imported
    (or is one), or below a module the user named for this load."""
    named, _ = _OPTIONS.get()
    parts = module_name.split(".")
    if any(part.startswith("__") for part in parts):
        return False  # a package's ``__main__`` is a script: importing it runs it (``unittest.__main__``)
    standard_library = parts[0] in sys.stdlib_module_names  # not the user's library; some modules act on import
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in named:
            return True
        if i < len(parts) and not standard_library and hasattr(sys.modules.get(prefix), "__path__"):
            return True  # a submodule of a package already imported: that library's own code
    return False


def find_class(name: str) -> Optional[type]:
    """The class called ``name`` (``module.Qual.Name``), if the rules above allow finding it."""
    if not isinstance(name, str) or len(name) > 400:
        return None
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for i in range(len(parts) - 1, 0, -1):
        module_name, qual = ".".join(parts[:i]), parts[i:]
        module = sys.modules.get(module_name)
        if module is None:
            if not _importable(module_name):
                continue
            try:
                module = importlib.import_module(module_name)
            except Exception:  # not a module of that name: try a shorter prefix
                continue
        obj: Any = module
        for attr in qual:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, type):
            return obj
    return None


def may_rebuild_by_attributes(cls: type) -> bool:
    """Whether a class found by name may be rebuilt from the file's attribute values on its own.

    Rebuilding skips ``__init__`` and sets the attributes the file holds, so the
    file decides the object's state. That is what export's flattening saved for
    a library's plain state holder (a cache of tensors), but not for the
    standard library's classes, exceptions, or a class whose finalizer would
    act on that state when the object is collected: those need the user's
    ``graphcap.register_flattenable(cls)``.
    """
    top = cls.__module__.split(".", 1)[0]
    if top in sys.stdlib_module_names or top == "builtins" or issubclass(cls, BaseException):
        return False
    if getattr(cls, "__del__", None) is not None:
        return False
    return "__dict__" in dir(cls) or not hasattr(cls, "__slots__")


def stand_ins_allowed() -> bool:
    return _OPTIONS.get()[1]


class DumpedContext(str):
    """A context the file holds as the class's own text (a ``dumpable`` context), kept as written."""


class StandIn:
    """A record standing in for a class this process cannot import (see the module's docstring).

    ``stand_in_for`` is the class's qualified name; the instance holds the
    node's children (``_children``) and context (``_context``) as the file has
    them, and reads its fields by the names the context gives.
    """

    stand_in_for = ""

    def __init__(self, children: Sequence[Any], context: Any):
        self._children = list(children)
        self._context = context

    def field_names(self) -> list[str]:
        ctx = self._context
        if isinstance(ctx, (list, tuple)) and len(ctx) == len(self._children) and all(isinstance(k, str) for k in ctx):
            return list(ctx)  # a mapping-like class: its keys (transformers' ModelOutput)
        if isinstance(ctx, tuple) and len(ctx) == 2 and isinstance(ctx[0], tuple) \
                and len(ctx[0]) == len(self._children) and all(isinstance(k, str) for k in ctx[0]):
            return list(ctx[0])  # a class graphcap flattened by its attributes: (keys, static)
        return [f"_{i}" for i in range(len(self._children))]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_children", "_context"):
            raise AttributeError(name)
        names = self.field_names()
        if name in names:
            return self._children[names.index(name)]
        raise AttributeError(f"{type(self).__name__} (a stand-in for {self.stand_in_for}) has no field {name!r}")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return getattr(self, key)
        return self._children[key]

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._children)

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other._context == self._context and other._children == self._children

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in zip(self.field_names(), self._children))
        return f"{type(self).__name__}({fields})"


def stand_in_class(name: str) -> type:
    """The stand-in record class for the missing class ``name`` (one per name, in graphcap's table)."""
    if name in _STAND_INS:
        return _STAND_INS[name]
    short = name.rsplit(".", 1)[-1]
    cls = type(short, (StandIn,), {"stand_in_for": name, "__module__": "graphcap.stand_in",
                                   "__qualname__": short,
                                   "__doc__": f"A stand-in for {name}, which this process could not import."})

    def flatten(obj: StandIn) -> tuple[list[Any], Any]:
        return list(obj._children), obj._context

    def flatten_with_keys(obj: StandIn) -> tuple[list[tuple[Any, Any]], Any]:
        keys = obj.field_names()
        return [(pytree.GetAttrKey(k), c) for k, c in zip(keys, obj._children)], obj._context

    def unflatten(values: list[Any], context: Any) -> Any:
        return cls(values, context)

    auto_flatten.add_own_node(cls, auto_flatten.AutoNode(
        flatten, unflatten, flatten_with_keys, name, lambda obj, spec: list(obj._children)))
    _STAND_INS[name] = cls
    return cls


def stand_in_namedtuple(name: str, fields: list[str]) -> type:
    """A namedtuple class standing in for the missing namedtuple ``name``."""
    key = f"{name}({','.join(fields)})"
    if key not in _STAND_INS:
        short = name.rsplit(".", 1)[-1]
        cls = collections.namedtuple(short if short.isidentifier() else "StandIn", fields,  # type: ignore[misc]
                                     rename=True)  # (the name is the missing class's, known only here)
        cls.__module__ = "graphcap.stand_in"
        cls.stand_in_for = name  # type: ignore[attr-defined]
        _STAND_INS[key] = cls
    return _STAND_INS[key]


def stand_in_name(typ: type) -> Optional[str]:
    """The qualified name a stand-in class stands for (None for any other class)."""
    name = getattr(typ, "stand_in_for", None)
    return name if isinstance(name, str) and typ.__module__ == "graphcap.stand_in" else None
