"""TreeSpecs (the structure of inputs and outputs) as JSON, and back.

A node is written as its type's *serialized type name* — the name it was
registered under with ``torch.utils._pytree`` (graphcap registers dataclasses
and auto-flattened classes under their qualified name) — plus its context as
tagged JSON and its children. Reading resolves the name only among the types
registered with ``torch.utils._pytree`` in the loading process, then by
:mod:`class_lookup` (below packages the process imported or modules the user
named; a stand-in record where the caller allows it). A class graphcap
flattened by its attributes is marked ``"flattened": "attributes"`` so the
loader flattens the class it finds the same way. A namedtuple (whose context
is its class) is resolved the same way.
"""
from __future__ import annotations

from typing import Any, Optional

from .. import auto_flatten, module_inputs  # noqa: F401 (module_inputs adds graphcap's node class)
from ..errors import SerializationError
from ..pytree import qualified_name
from ..torch_private import pytree
from . import class_lookup, schema
from .values import Unencodable, bad, decode_value, encode_value

# namedtuple classes seen while saving, by qualified name: a program saved and
# loaded in the same process needs no registration.
_SEEN_NAMEDTUPLES: dict[str, type] = {}


def type_name(typ: type) -> str:
    standing_for = class_lookup.stand_in_name(typ)
    if standing_for is not None:
        return standing_for
    own = auto_flatten.known_classes().get(typ)
    if own is not None and (pytree.registered_node(typ) is None or auto_flatten.registered_as_own(typ)):
        return own.serialized_type_name
    node = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
    if node is not None and node.serialized_type_name != pytree.NO_SERIALIZED_TYPE_NAME_FOUND:
        return node.serialized_type_name
    return qualified_name(typ)


def _registered_types() -> dict[str, type]:
    """Classes a file may name: torch's registered pytree nodes, and graphcap's own table
    (its node classes, and the classes it flattened by attributes in this process)."""
    found: dict[str, type] = {}
    for typ, node in auto_flatten.known_classes().items():
        if class_lookup.stand_in_name(typ) is None:  # stand-ins only where nothing better is found
            found.setdefault(node.serialized_type_name, typ)
    for typ in list(pytree.SUPPORTED_NODES):
        found.setdefault(type_name(typ), typ)
    for name, typ in list(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.items()):
        found.setdefault(name, typ)
    return found


def _registration_fix(name: str) -> str:
    top = name.split(".", 1)[0]
    return (f"Import the library that defines it before loading (import {top}), or let the load "
            f"import it: graphcap.load(f, import_modules=[{top!r}]) (command line: --import {top}); "
            f"classes below an imported package are then found by their names. A class of your own "
            f"must be registered as at export: graphcap.register_flattenable(cls) for one graphcap "
            f"flattened by its attributes, graphcap.register_dataclass(cls) for a dataclass, or "
            f"torch.utils._pytree.register_pytree_node(cls, ..., serialized_type_name={name!r}). "
            f"graphcap.load(f, stand_ins=True) loads it with a generic record in its place.")


def _encode_context(spec: pytree.TreeSpec, where: str) -> Any:
    if spec.type is pytree.namedtuple:
        cls = spec.context
        name = class_lookup.stand_in_name(cls) or qualified_name(cls)
        _SEEN_NAMEDTUPLES.setdefault(name, cls)
        return {"namedtuple": [name, list(cls._fields)]}

    dumpable = _dumpable_context_fns(spec.type)[0]

    def extra(v: Any) -> Any:
        if isinstance(v, type):
            return {"type": type_name(v)}
        if isinstance(v, class_lookup.DumpedContext):  # a stand-in's context, written as it was read
            return {"dumpable": str(v)}
        if v is spec.context and dumpable is not None:  # the class says how to write its context
            text = dumpable(v)
            # as text only: a class whose writer gives a JSON object (torch's defaultdict:
            # its factory and keys) has its context written as plain values instead
            if isinstance(text, str):
                return {"dumpable": text}
        return NotImplemented
    try:
        return encode_value(spec.context, extra)
    except Unencodable as e:
        raise SerializationError(
            f"The structure of {where} cannot be saved: a {type_name(spec.type)} node's context holds "
            f"{e}.", where=where,
            fix="Register the class with torch.utils._pytree.register_pytree_node so that its "
                "context holds only plain values (strings, numbers, dtypes, devices), or return "
                "plain containers.") from None


def _dumpable_context_fns(typ: type) -> tuple[Any, Any]:
    """The (to, from) dumpable-context functions the class was registered with, if any."""
    own = auto_flatten.known_classes().get(typ)
    if own is not None and (pytree.registered_node(typ) is None or auto_flatten.registered_as_own(typ)):
        return own.to_dumpable, own.from_dumpable
    node = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
    return getattr(node, "to_dumpable_context", None), getattr(node, "from_dumpable_context", None)


def spec_to_json(spec: pytree.TreeSpec, where: str = "the inputs/outputs") -> Any:
    if spec.is_leaf():
        return None
    node = {"type": type_name(spec.type), "context": _encode_context(spec, where),
            "children": [spec_to_json(c, where) for c in spec.children()]}
    if _flattened_by_attributes(spec.type):
        node["flattened"] = "attributes"
    return node


def _flattened_by_attributes(typ: type) -> bool:
    """Whether graphcap flattens ``typ`` by its attributes (its table, not a user's registration)."""
    if typ in _BY_ATTRIBUTES_STAND_INS:
        return True
    return typ in auto_flatten.attribute_flattened_classes() and class_lookup.stand_in_name(typ) is None and \
        (pytree.registered_node(typ) is None or auto_flatten.registered_as_own(typ))


_BY_ATTRIBUTES_STAND_INS: set[type] = set()  # stand-ins for classes the file says were flattened by attributes


def _looks_flattened_by_attributes(context: Any, n_children: int) -> bool:
    """A file of format 2 has no marker: an attribute-flattened node's context is (keys, static pairs)."""
    return (isinstance(context, tuple) and len(context) == 2 and isinstance(context[0], tuple)
            and isinstance(context[1], tuple) and len(context[0]) == n_children
            and all(isinstance(k, str) for k in context[0])
            and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in context[1]))


def _resolve(name: str, by_attributes: Optional[bool], types: dict[str, type]) -> Optional[type]:
    """The class a node names, found by :mod:`class_lookup` (None when not found and no stand-in)."""
    cls = class_lookup.find_class(name)
    if cls is not None:
        if pytree.registered_node(cls) is not None or cls in auto_flatten.known_classes():
            types[name] = cls  # importing its module registered it (transformers' ModelOutput)
            return cls
        if by_attributes and class_lookup.may_rebuild_by_attributes(cls):
            from ..pytree import register_flattenable
            register_flattenable(cls)
            types[name] = cls
            return cls
        raise SerializationError(
            f"The program's structure uses the class {name}, which this process has but not as a pytree "
            f"node.", where="program.json (pytree specs)", fix=_registration_fix(name))
    if class_lookup.stand_ins_allowed():
        stand_in = class_lookup.stand_in_class(name)
        if by_attributes:
            _BY_ATTRIBUTES_STAND_INS.add(stand_in)
        return stand_in
    return None


def _resolve_namedtuple(payload: Any) -> type:
    if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], str)
            and isinstance(payload[1], list)):
        raise bad("Malformed namedtuple context.")
    name, fields = payload
    cls = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.get(name) or _SEEN_NAMEDTUPLES.get(name) \
        or class_lookup.find_class(name)
    if (cls is None or not pytree.is_namedtuple_class(cls)) and class_lookup.stand_ins_allowed() \
            and all(isinstance(f, str) for f in fields):
        return class_lookup.stand_in_namedtuple(name, fields)
    if cls is None or not pytree.is_namedtuple_class(cls):
        raise SerializationError(
            f"The program's structure uses the namedtuple {name}, which is not registered in this "
            f"process.", where="program.json (pytree specs)", fix=_registration_fix(name))
    fields_here = list(cls._fields)  # type: ignore[attr-defined]  # a namedtuple class (checked above)
    if fields_here != fields:
        raise SerializationError(
            f"The namedtuple {name} in this process has fields {fields_here}, but the file was "
            f"saved with {fields}.", where="program.json (pytree specs)",
            fix="Load with the version of the class the program was exported with.")
    return cls


def json_to_spec(j: Any, types: dict[str, type] | None = None, depth: int = 0) -> pytree.TreeSpec:
    if depth > schema.MAX_NESTING:
        raise bad("A pytree spec in the file is nested too deeply.")
    types = _registered_types() if types is None else types
    if j is None:
        return pytree.treespec_leaf()
    if not (isinstance(j, dict) and isinstance(j.get("type"), str) and isinstance(j.get("children"), list)
            and "context" in j):
        raise bad("Malformed pytree spec.")
    name = j["type"]
    typ = types.get(name)
    marker = j.get("flattened")
    if marker not in (None, "attributes"):
        raise bad(f"Unknown 'flattened' marker {marker!r:.40} in a pytree spec.")
    if typ is None and marker is not None:
        typ = _resolve(name, True, types)

    def extra(tag: str, payload: Any) -> Any:
        if tag == "namedtuple":
            return _resolve_namedtuple(payload)
        if tag == "type":
            if isinstance(payload, str) and payload not in types:
                found = class_lookup.find_class(payload)
                if found is None and class_lookup.stand_ins_allowed():
                    found = class_lookup.stand_in_class(payload)
                if found is not None:
                    types[payload] = found
            if not isinstance(payload, str) or payload not in types:
                raise SerializationError(
                    f"The program's structure names the class {payload!r:.80}, which is not registered "
                    f"in this process.", where="program.json (pytree specs)", fix=_registration_fix(str(payload)))
            return types[payload]
        if tag == "dumpable" and typ is None and isinstance(payload, str):
            return class_lookup.DumpedContext(payload)  # read once the class is known, below
        read_context = _dumpable_context_fns(typ)[1] if tag == "dumpable" and typ is not None else None
        if read_context is not None and isinstance(payload, str):
            try:
                return read_context(payload)
            except Exception as e:  # the class's own reader refused the text
                raise bad(f"A {name} context in the file cannot be read: {e}") from None
        raise bad(f"Unknown tag {tag!r:.40} in a pytree context.")

    context = decode_value(j["context"], extra)
    if typ is None:  # not registered: find it by its name now that the context says how it was flattened
        typ = _resolve(name, marker is not None or _looks_flattened_by_attributes(context, len(j["children"])),
                       types)
        if typ is None:
            raise SerializationError(
                f"The program's structure uses the class {name}, which is not registered as a pytree "
                f"node in this process.", where="program.json (pytree specs)", fix=_registration_fix(name))
        if isinstance(context, class_lookup.DumpedContext) and class_lookup.stand_in_name(typ) is None:
            read_context = _dumpable_context_fns(typ)[1]
            if read_context is None:
                raise bad(f"A {name} context in the file is text, but the class has no reader for it.")
            try:
                context = read_context(str(context))
            except Exception as e:  # the class's own reader refused the text
                raise bad(f"A {name} context in the file cannot be read: {e}") from None
    if typ is pytree.namedtuple and not isinstance(context, type):
        raise bad("A namedtuple spec without its class.")
    children = [json_to_spec(c, types, depth + 1) for c in j["children"]]
    if typ in (list, tuple) and context is not None:
        raise bad(f"A {name} spec with a context.")
    if typ is dict and not (isinstance(context, list) and len(context) == len(children)):
        raise bad("A dict spec whose keys do not match its children.")
    if typ is pytree.namedtuple and len(context._fields) != len(children):
        raise bad("A namedtuple spec whose fields do not match its children.")
    try:
        return pytree.TreeSpec(typ, context, children)
    except Exception as e:  # TreeSpec validates its arguments
        raise bad(f"Malformed pytree spec for {name}: {e}") from None
