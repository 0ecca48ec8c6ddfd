"""A small language of typed JSON definitions: check a document, describe it, hash it.

``schema.py`` declares program.json in these terms. One definition serves
three purposes:

* ``check(document)`` walks a parsed JSON document and raises a
  ``SerializationError`` at the first value that does not fit, naming its JSON
  path (``graph_module.nodes[3].args[0]``), what was expected there and what
  was found — the saver runs it on what it is about to write, the loader on
  what it read;
* ``describe()`` renders the definitions as plain JSON (named shapes once, in
  a table of definitions), a reviewer-readable statement of the format;
* ``fingerprint()`` hashes that description, so a test notices when the
  format changes without a new format version.

The language is closed on purpose (no arbitrary callables as checks): what a
definition accepts is exactly what its description says.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable, Optional, TypeVar

from ..errors import SerializationError

# The deepest a value may nest (tuples in lists in dicts ...); deeper is a crafted file.
MAX_DEPTH = 400


class SchemaMismatch(Exception):
    """A value does not fit its definition: where (a JSON path), what was expected, what was found."""

    def __init__(self, path: Any, expected: str, found: str):
        super().__init__(path)
        self._path, self.expected, self.found = path, expected, found

    @property
    def path(self) -> str:
        """The JSON path, written out (``graph_module.nodes[3].args[0]``)."""
        return _render(self._path)


def _found(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"the boolean {str(x).lower()}"
    if isinstance(x, (int, float)):
        return f"the number {x!r:.40}"
    if isinstance(x, str):
        return f"the string {x!r:.60}"
    if isinstance(x, list):
        return f"an array of {len(x)} items"
    if isinstance(x, dict):
        keys = ", ".join(repr(k) for k in list(x)[:6])
        return f"an object with the keys {keys}" + (" ..." if len(x) > 6 else "") if x else "an empty object"
    return type(x).__name__


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


# A path is carried down the walk unwritten, as ``(parent, key)`` pairs from the root's "" (a
# document of 100,000 values is checked on every save and load; only a mismatch's path is read).
def _render(path: Any) -> str:
    keys = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    text: str = path
    for key in reversed(keys):
        text = _join(text, key)
    return text


class Shape:
    """A definition of JSON values. ``expected`` says, in words, what it accepts."""

    expected = "a value"

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        raise NotImplementedError

    def describe(self, defs: dict[str, Any]) -> Any:
        raise NotImplementedError


class _Kind(Shape):
    """A JSON scalar of one kind (booleans are not numbers here, as in JSON). ``test`` looks at the
    value's type alone (``Union`` chooses its options by type)."""

    def __init__(self, name: str, expected: str, test: Callable[[Any], bool], pattern: Optional[str] = None):
        self.name, self.expected, self._test = name, expected, test
        self.pattern = re.compile(pattern) if pattern else None

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not self._test(x) or (self.pattern is not None and not self.pattern.fullmatch(x)):
            raise SchemaMismatch(path, self.expected, _found(x))

    def describe(self, defs: dict[str, Any]) -> Any:
        return self.name if self.pattern is None else {self.name: self.pattern.pattern}


Null = _Kind("null", "null", lambda x: x is None)
Bool = _Kind("boolean", "a boolean", lambda x: isinstance(x, bool))
class _Int64(_Kind):
    """An integer that fits 64 bits: every integer a program holds (sizes, strides, offsets,
    counts) is one in torch, so a larger one is damage, refused at its JSON path rather than by
    torch's overflow deep in the decoder. (The range is checked here, not in ``test``, which
    ``Union`` reads once per JSON kind.)"""

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        super().check(x, path, depth)
        if not -2**63 <= x < 2**63:
            raise SchemaMismatch(path, "an integer that fits 64 bits", f"the integer {str(x)[:30]}")


Int = _Int64("integer", "an integer", lambda x: type(x) is int)
Number = _Kind("number", "a number", lambda x: type(x) in (int, float))
Str = _Kind("string", "a string", lambda x: isinstance(x, str))


def Pattern(pattern: str, expected: str) -> Shape:
    """A string matching ``pattern`` in full."""
    return _Kind("string", expected, lambda x: isinstance(x, str), pattern)


class OneOf(Shape):
    """One of a fixed set of JSON scalars (``"training"``, ``"inference"``)."""

    def __init__(self, *values: Any):
        self.values = values
        self.expected = "one of " + ", ".join(json.dumps(v) for v in values)

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not any(x == v and type(x) is type(v) for v in self.values):
            raise SchemaMismatch(path, self.expected, _found(x))

    def describe(self, defs: dict[str, Any]) -> Any:
        return {"enum": list(self.values)}


class ListOf(Shape):
    """A JSON array whose every item is ``item``."""

    def __init__(self, item: Shape):
        self.item = item
        self.expected = f"an array of {item.expected}"

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not isinstance(x, list):
            raise SchemaMismatch(path, self.expected, _found(x))
        for i, v in enumerate(x):
            self.item.check(v, (path, i), depth + 1)

    def describe(self, defs: dict[str, Any]) -> Any:
        return {"array": self.item.describe(defs)}


class Tuple(Shape):
    """A JSON array of fixed length, item ``i`` being ``items[i]``."""

    def __init__(self, *items: Shape):
        self.items = items
        self.expected = f"an array of {len(items)} items ({', '.join(i.expected for i in items)})"

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not isinstance(x, list) or len(x) != len(self.items):
            raise SchemaMismatch(path, self.expected, _found(x))
        for i, (shape, v) in enumerate(zip(self.items, x)):
            shape.check(v, (path, i), depth + 1)

    def describe(self, defs: dict[str, Any]) -> Any:
        return {"tuple": [i.describe(defs) for i in self.items]}


class MapOf(Shape):
    """A JSON object with any string keys, every value being ``value``."""

    def __init__(self, value: Shape):
        self.value = value
        self.expected = f"an object whose values are {value.expected}"

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not isinstance(x, dict):
            raise SchemaMismatch(path, self.expected, _found(x))
        for k, v in x.items():
            self.value.check(v, (path, k), depth + 1)

    def describe(self, defs: dict[str, Any]) -> Any:
        return {"map": self.value.describe(defs)}


class _Named(Shape):
    """A shape described once, by name, in the table of definitions (which makes recursion possible)."""

    name = ""

    def describe(self, defs: dict[str, Any]) -> Any:
        if self.name not in defs:
            defs[self.name] = None  # placeholder: a recursive reference stops here
            defs[self.name] = self.definition(defs)
        return {"ref": self.name}

    def definition(self, defs: dict[str, Any]) -> Any:
        raise NotImplementedError


class Record(_Named):
    """A JSON object with named fields: ``required`` ones always present, ``optional`` ones maybe.

    Closed: a key it does not name is a mismatch (a file from another format
    version, or a damaged one), never silently ignored.
    """

    def __init__(self, name: str, required: dict[str, Shape], optional: Optional[dict[str, Shape]] = None):
        self.name, self.required, self.optional = name, required, optional or {}
        self.expected = f"a {name} object"

    def keys_fit(self, x: dict[str, Any]) -> bool:
        return set(self.required) <= set(x) <= set(self.required) | set(self.optional)

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not isinstance(x, dict):
            raise SchemaMismatch(path, self.expected, _found(x))
        for key in self.required:
            if key not in x:
                raise SchemaMismatch((path, key), f"the field {key!r} of {self.expected}", "nothing")
        for key, v in x.items():
            shape = self.required.get(key) or self.optional.get(key)
            if shape is None:
                known = ", ".join(repr(k) for k in (*self.required, *self.optional))
                raise SchemaMismatch((path, key), f"only the fields {known} in {self.expected}",
                                     f"the unknown field {key!r}")
            shape.check(v, (path, key), depth + 1)

    def definition(self, defs: dict[str, Any]) -> Any:
        return {"object": {k: s.describe(defs) for k, s in self.required.items()},
                "optional": {k: s.describe(defs) for k, s in self.optional.items()}}


class Tagged(_Named):
    """A one-key JSON object whose key (the tag) says what the payload is: ``{"tuple": [...]}``."""

    def __init__(self, name: str, tags: dict[str, Shape]):
        self.name, self.tags = name, tags
        self.expected = f"a {name} (an object with one of the keys {', '.join(map(repr, tags))})"

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if not isinstance(x, dict) or len(x) != 1:
            raise SchemaMismatch(path, self.expected, _found(x))
        (tag, payload), = x.items()
        shape = self.tags.get(tag)
        if shape is None:
            raise SchemaMismatch(path, self.expected, f"the unknown tag {tag!r:.60}")
        shape.check(payload, (path, tag), depth + 1)

    def definition(self, defs: dict[str, Any]) -> Any:
        return {"tagged": {k: s.describe(defs) for k, s in self.tags.items()}}


class Union(_Named):
    """Any one of ``options``, chosen by the JSON kind of the value (and, for objects, by its keys)."""

    def __init__(self, name: str, *options: Shape):
        self.name, self.options = name, list(options)
        self.expected = f"a {name} ({' or '.join(o.expected for o in options)})"
        # the options that may fit a value, by its JSON kind (and an object's keys): what _may_fit
        # reads of a value, so the choice is made once per kind, not per value
        self._by_kind: dict[Any, list[Shape]] = {}

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise SchemaMismatch(path, f"a value nested at most {MAX_DEPTH} deep", "a deeper one")
        kind = (dict, *x) if type(x) is dict else type(x)
        candidates = self._by_kind.get(kind)
        if candidates is None:
            candidates = [o for o in self.options if _may_fit(o, x)]
            if len(self._by_kind) < 256:  # a crafted file's many key sets are not kept
                self._by_kind[kind] = candidates
        if not candidates:
            raise SchemaMismatch(path, self.expected, _found(x))
        if len(candidates) == 1:  # the only option of this kind: its error is the precise one
            candidates[0].check(x, path, depth + 1)
            return
        for option in candidates:
            try:
                option.check(x, path, depth + 1)
                return
            except SchemaMismatch:
                continue
        raise SchemaMismatch(path, self.expected, _found(x))

    def definition(self, defs: dict[str, Any]) -> Any:
        return {"any_of": [o.describe(defs) for o in self.options]}


_S = TypeVar("_S", bound=Shape)


class Ref(Shape):
    """A forward reference, bound later with ``bind`` (for definitions that contain themselves)."""

    def __init__(self, name: str):
        self.name = name
        self.target: Optional[Shape] = None
        self.expected = f"a {name}"

    def bind(self, target: _S) -> _S:
        self.target = target
        return target

    def check(self, x: Any, path: Any, depth: int = 0) -> None:
        assert self.target is not None, f"unbound schema reference {self.name}"
        if depth > MAX_DEPTH:
            raise SchemaMismatch(path, f"a value nested at most {MAX_DEPTH} deep", "a deeper one")
        self.target.check(x, path, depth + 1)

    def describe(self, defs: dict[str, Any]) -> Any:
        assert self.target is not None, f"unbound schema reference {self.name}"
        return self.target.describe(defs)


def _may_fit(shape: Shape, x: Any) -> bool:
    """Whether ``x`` has the JSON kind (and, for records and tags, the keys) ``shape`` accepts."""
    if isinstance(shape, Ref):
        return shape.target is not None and _may_fit(shape.target, x)
    if isinstance(shape, _Kind):
        return shape._test(x)
    if isinstance(shape, OneOf):
        return any(type(x) is type(v) for v in shape.values)
    if isinstance(shape, (ListOf, Tuple)):
        return isinstance(x, list)
    if isinstance(shape, Record):
        return isinstance(x, dict) and shape.keys_fit(x)
    if isinstance(shape, Tagged):
        return isinstance(x, dict) and len(x) == 1 and next(iter(x)) in shape.tags
    if isinstance(shape, Union):
        return any(_may_fit(o, x) for o in shape.options)
    return isinstance(x, dict)  # MapOf


def describe(root: Shape) -> dict[str, Any]:
    """The definitions reachable from ``root`` as plain JSON: ``{"root": ..., "definitions": {...}}``."""
    defs: dict[str, Any] = {}
    top = root.describe(defs)
    return {"root": top, "definitions": dict(sorted(defs.items()))}


def fingerprint(root: Shape) -> str:
    """A short, stable hash of the description: it changes exactly when the definitions do."""
    text = json.dumps(describe(root), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check(root: Shape, document: Any, *, what: str, version: int, fix: str) -> None:
    """Raise a ``SerializationError`` naming the path, the expectation and the fix if ``document`` does not fit."""
    try:
        root.check(document, "")
    except SchemaMismatch as e:
        where = f"{what} at {e.path or '(top level)'}"
        raise SerializationError(
            f"{what} does not follow format version {version}: at {e.path or 'the top level'} it should "
            f"hold {e.expected}, but holds {e.found}.", where=where, fix=fix) from None
