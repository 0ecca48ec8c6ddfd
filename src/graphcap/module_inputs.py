"""nn.Module instances passed as *inputs* (``forward(self, x, m)`` called with a module ``m``).

Such a module's state is data of the call, not of the exported model: another
instance of the same class, with other weights, must give eager's result for
those weights. So graphcap sees an input module as a pytree node whose leaves
are its tensors (parameters, buffers, and tensors held as plain attributes:
the last would otherwise be baked in silently) and whose structure is its
class, the names of those tensors, and its plain Python settings (``training``,
``in_features``, ...), which the traced code may have branched on and which are
therefore checked, like any value export specializes on.

How this stays out of the user's process: graphcap never registers the user's
class. Before flattening, every module in the inputs is swapped for a
:class:`ModuleInput` wrapper, graphcap's own class, registered once as a pytree
node. Its spec is what the program stores. To call user code, the wrapper is
turned back into a module (:func:`unwrap`): a structural copy of the exported
instance holding the given tensors, so the instance itself is never modified.
``ep.module()`` flattens the user's raw module directly against the spec
(``torch.fx._pytree`` flattens by the spec's type without checking the
object's), after the structure check wrapped it to compare.
"""
from __future__ import annotations

import copy
import json
from typing import Any, Optional

import torch

from . import auto_flatten
from .errors import UnsupportedError
from .torch_private import pytree
from .torch_private.modules import BUFFER_REGISTRY, MODULE_REGISTRY, PARAMETER_REGISTRY

# Attribute values that are settings of a module: compared between the exported
# instance and the one given later.
_SETTING_TYPES = (bool, int, float, str, type(None), torch.dtype, torch.device)


def _submodules(module: torch.nn.Module):
    """(prefix, submodule) for the module and every module under it, each once."""
    for name, sub in module.named_modules(remove_duplicate=True):
        yield (name + "." if name else ""), sub


def module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of an input module by FQN: parameters, buffers, then tensor attributes.

    A tensor reachable under two names (tied weights) is listed once, under the first.
    """
    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()

    def add(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            state[name] = value

    for name, p in module.named_parameters():
        add(name, p)
    for name, b in module.named_buffers():
        add(name, b)
    for prefix, sub in _submodules(module):
        for attr, value in vars(sub).items():
            add(prefix + attr, value)
    return state


def module_settings(module: torch.nn.Module) -> tuple:
    """The Python settings of the module and its submodules, as ((fqn, value), ...).

    Every public attribute that is not a tensor: the traced code may have read
    any of them, and what it read is baked into the program. Tuples and lists
    of plain values (a convolution's ``kernel_size``) are kept as tuples.
    """
    out = []
    for prefix, sub in _submodules(module):
        for attr, value in vars(sub).items():
            if attr.startswith("_") or isinstance(value, (torch.Tensor, torch.nn.Module)):
                continue
            if isinstance(value, (tuple, list)) and all(isinstance(v, _SETTING_TYPES) for v in value):
                value = tuple(value)
            out.append((prefix + attr, value))
    return tuple(out)


def _writable(value: Any) -> bool:
    """Whether a setting survives a save (JSON): plain values and tuples of them."""
    if isinstance(value, tuple):
        return all(_writable(v) for v in value)
    return isinstance(value, (bool, int, float, str, type(None)))


def _same_value(a: Any, b: Any) -> bool:
    """Setting equality: by ``==`` for values of one type, objects without ``__eq__`` by identity."""
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an __eq__ that does not give a truth value: not known to be equal
        return False


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class ModuleInputContext:
    """The structure of one input module: class, tensor names, settings.

    Compared by value; the exported instance (``prototype``) rides along so
    the tensors can be put back into a module of the same make, and is not
    part of the comparison. A program loaded from a file has no prototype,
    and only the settings a file can hold (plain values) are compared for it.
    """

    def __init__(self, cls_name: str, names: tuple, settings: tuple,
                 prototype: Optional[torch.nn.Module] = None, loaded: bool = False):
        self.cls_name = cls_name
        self.names = tuple(names)
        self.settings = tuple(settings)
        self.prototype = prototype
        self.loaded = loaded

    def _setting_differences(self, other: "ModuleInputContext") -> list[str]:
        """FQNs of the settings whose values differ (present on one side only included)."""
        mine, theirs = dict(self.settings), dict(other.settings)
        if self.loaded or other.loaded:
            mine = {k: v for k, v in mine.items() if _writable(v)}
            theirs = {k: v for k, v in theirs.items() if _writable(v)}
        keys = list(dict.fromkeys([*mine, *theirs]))
        return [k for k in keys if k not in mine or k not in theirs or not _same_value(mine[k], theirs[k])]

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, ModuleInputContext) and self.cls_name == other.cls_name
                and self.names == other.names and not self._setting_differences(other))

    def __hash__(self) -> int:
        return hash((self.cls_name, self.names))

    def __deepcopy__(self, memo: dict) -> "ModuleInputContext":
        return ModuleInputContext(self.cls_name, self.names, self.settings, self.prototype, self.loaded)

    def __repr__(self) -> str:
        return f"{self.cls_name}{list(self.names)}"

    def differences(self, other: "ModuleInputContext") -> str:
        """What makes ``other`` (given) another structure than ``self`` (exported), in words."""
        if self.cls_name != other.cls_name:
            return f"the module is a {other.cls_name}, the program was exported with a {self.cls_name}"
        if self.names != other.names:
            return (f"the module holds the tensors {list(other.names)}, the program was exported "
                    f"with {list(self.names)}")
        for key in self._setting_differences(other):
            mine, theirs = dict(self.settings), dict(other.settings)
            return (f"the module's setting {key} is {theirs.get(key, '<unset>')!r:.80}, the program "
                    f"was exported with {mine.get(key, '<unset>')!r:.80}")
        return "the modules differ"


class ModuleInput:
    """An input module seen as a pytree node: its tensors by name, and its structure."""

    def __init__(self, context: ModuleInputContext, values: list[Any]):
        self.context = context
        self.values = list(values)

    @classmethod
    def of(cls, module: torch.nn.Module) -> "ModuleInput":
        state = module_state(module)
        ctx = ModuleInputContext(type_name(type(module)), tuple(state), module_settings(module), module)
        return cls(ctx, list(state.values()))

    def __repr__(self) -> str:
        short = self.context.cls_name.rsplit(".", 1)[-1]
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self.context.names, self.values))
        return f"{short}({inner})"

    def materialize(self) -> torch.nn.Module:
        """A module of the exported make holding these tensors (the exported instance untouched)."""
        proto = self.context.prototype
        if proto is None:
            raise UnsupportedError(
                f"The program takes a {self.context.cls_name} module as an input, but the "
                f"exported instance is not available (the program was loaded from a file), so "
                f"there is no module to put the tensors in.",
                where="re-tracing a loaded program with a module input",
                fix="Export the model again from Python instead of re-tracing the loaded program; "
                    "ep.module() of the loaded program does run with a module instance.")
        old = list(module_state(proto).values())
        if all(v is o for v, o in zip(self.values, old)):
            return proto
        swap = {id(o): v for o, v in zip(old, self.values)}
        return _copy_with(proto, swap, {})


def _copy_with(module: torch.nn.Module, swap: dict[int, Any], memo: dict[int, torch.nn.Module]):
    """A structural copy of ``module`` (submodules copied, containers of state copied) in which
    every tensor whose id is in ``swap`` is replaced; everything else is shared."""
    if id(module) in memo:
        return memo[id(module)]
    new = copy.copy(module)
    memo[id(module)] = new
    state = dict(module.__dict__)
    for field in (PARAMETER_REGISTRY, BUFFER_REGISTRY):
        state[field] = {k: swap.get(id(v), v) for k, v in module.__dict__[field].items()}
    state[MODULE_REGISTRY] = {k: (_copy_with(c, swap, memo) if c is not None else None)
                         for k, c in module.__dict__[MODULE_REGISTRY].items()}
    for attr, value in module.__dict__.items():
        if isinstance(value, torch.Tensor) and id(value) in swap:
            state[attr] = swap[id(value)]
    new.__dict__ = state
    return new


# ---------------------------------------------------------------------------
# the pytree node (graphcap's own class; the user's classes are never registered)
# ---------------------------------------------------------------------------

def _flatten(node: ModuleInput):
    return list(node.values), node.context


def _flatten_with_keys(node: ModuleInput):
    return [(pytree.GetAttrKey(n), v) for n, v in zip(node.context.names, node.values)], node.context


def _unflatten(values, context: ModuleInputContext) -> ModuleInput:
    return ModuleInput(context, list(values))


def _to_dumpable(context: ModuleInputContext) -> str:
    settings = [[k, list(v) if isinstance(v, tuple) else v] for k, v in context.settings if _writable(v)]
    return json.dumps({"class": context.cls_name, "names": list(context.names), "settings": settings})


def _from_dumpable(text: str) -> ModuleInputContext:
    data = json.loads(text)
    return ModuleInputContext(data["class"], tuple(data["names"]),
                              tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in data["settings"]),
                              None, loaded=True)


def _flatten_spec(obj: Any, spec: pytree.TreeSpec) -> list[Any]:
    """``module()``'s flattening: a raw module (or a wrapper) to its tensors in the spec's order."""
    if isinstance(obj, ModuleInput):
        values = dict(zip(obj.context.names, obj.values))
    else:
        values = module_state(obj)
    return [values[n] for n in spec.context.names]


# a pytree node for torch only while a trace runs (graphcap.auto_flatten), like the classes
# graphcap flattens by attributes; module(), save and load use graphcap's own walks
auto_flatten.add_own_node(ModuleInput, auto_flatten.AutoNode(
    _flatten, _unflatten, _flatten_with_keys, "graphcap.ModuleInput", _flatten_spec, _to_dumpable, _from_dumpable))


# ---------------------------------------------------------------------------
# swapping in and out
# ---------------------------------------------------------------------------

def wrap(tree: Any) -> Any:
    """``tree`` with every nn.Module leaf replaced by its :class:`ModuleInput`."""
    leaves, spec = auto_flatten.flatten(tree)
    if not any(isinstance(v, torch.nn.Module) for v in leaves):
        return tree
    auto_flatten.register_for_trace(ModuleInput)  # (a no-op outside a trace) the trace flattens wrappers
    return auto_flatten.unflatten([ModuleInput.of(v) if isinstance(v, torch.nn.Module) else v
                                  for v in leaves], spec)


def unwrap(tree: Any) -> Any:
    """``tree`` with every :class:`ModuleInput` turned back into a module holding its tensors."""
    is_wrapper = lambda v: isinstance(v, ModuleInput)  # noqa: E731
    leaves, spec = auto_flatten.flatten(tree, is_leaf=is_wrapper)
    if not any(is_wrapper(v) for v in leaves):
        return tree
    return auto_flatten.unflatten([v.materialize() if is_wrapper(v) else v for v in leaves], spec)


def describe_difference(expected: pytree.TreeSpec, got: pytree.TreeSpec) -> Optional[str]:
    """When the only difference between two input structures is an input module's, say what it is."""
    if expected.type is ModuleInput and got.type is ModuleInput:
        return None if expected.context == got.context else expected.context.differences(got.context)
    if expected.type is not got.type or expected.num_children != got.num_children:
        return None
    if expected.type is dict and list(expected.context) != list(got.context):
        if set(expected.context) != set(got.context):
            return None
        order = {k: i for i, k in enumerate(got.context)}
        pairs = [(expected.child(i), got.child(order[k])) for i, k in enumerate(expected.context)]
    else:
        pairs = [(expected.child(i), got.child(i)) for i in range(expected.num_children)]
    for a, b in pairs:
        found = describe_difference(a, b)
        if found:
            return found
    return None
