"""Values an unflattened module makes on first use, also when a tracer meets it first.

Two parts of an unflattened module are made only when a call needs them, so that
unflattening a large program stays fast: each submodule's ``forward`` (Python generated
from its graph and compiled) and the root's input checker (it reads the program's ranges).
Eagerly the first call makes them. When dynamo meets the module first (``torch.compile``,
a strict export by graphcap or by torch.export), it cannot follow the making: compiling
generated source and reading sympy ranges are no tensor code, and a function kept out of
dynamo's reach (``torch.compiler.disable``) is a graph break, which ``fullgraph=True`` and
strict export refuse. So under dynamo the value is made by a function marked with
``torch.compiler.assume_constant_result``: dynamo calls it while it traces, outside the
graph, and takes its (empty) result as a constant. Only then is the value read, so dynamo
reads the made one (the compiled forward, the checker) and follows it as it follows any
Python function or object.

Dynamo hands such a function only constant arguments on every supported torch line, so
each value waiting to be made is found by a number, in a table that holds it weakly.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable, Generic, Optional, TypeVar

import torch

T = TypeVar("T")

_WAITING: "weakref.WeakValueDictionary[int, MadeWhenNeeded[Any]]" = weakref.WeakValueDictionary()
_NUMBERS = itertools.count()


@torch.compiler.assume_constant_result
def _made_while_tracing(number: int) -> None:
    """Run by dynamo at trace time, outside the graph: makes the value if it is not yet."""
    _WAITING[number].made()


class MadeWhenNeeded(Generic[T]):
    """A value made by ``make()`` on first use; see the module docstring. Copies share the
    value once it is made (it describes the program, which copying a module does not change)."""

    def __init__(self, make: Callable[[], T], value: Optional[T] = None):
        self._make = make
        self._value = value
        self._number = next(_NUMBERS)
        _WAITING[self._number] = self

    def made(self) -> T:
        """The value, made now if it is not yet (eagerly: never under dynamo's tracing)."""
        value = self._value
        if value is None:
            value = self._value = self._make()
        return value

    def get(self) -> T:
        """The value; under dynamo, made at trace time, then read as any attribute."""
        if torch.compiler.is_dynamo_compiling():
            # the value is read only once made: dynamo then sees (and guards on) the made one
            _made_while_tracing(self._number)
            return self._value  # type: ignore[return-value]
        return self.made()

    @property
    def ready(self) -> bool:
        return self._value is not None

    def __deepcopy__(self, memo: dict) -> "MadeWhenNeeded[T]":
        return MadeWhenNeeded(self._make, self._value)

    def __getstate__(self) -> dict[str, Any]:
        return {"_make": self._make, "_value": self._value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_make"], state["_value"])  # type: ignore[misc]  # a number of its own


__all__ = ["MadeWhenNeeded"]
