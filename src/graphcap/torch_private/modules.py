"""``torch.nn.Module``'s private registries and stateless calls.

graphcap reads a module's buffers and which of them are non-persistent, edits
those registries where ``module()`` keeps constants as plain attributes, swaps
state in for one call with torch's stateless helper, and moves extra tensors
when a module is moved (``.to()``), all through nn.Module's private members.
"""
from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Callable

import torch

RELIES_ON = {
    "torch.nn.Module#_parameters": None,
    "torch.nn.Module#_buffers": None,
    "torch.nn.Module#_forward_hooks": None,
    "torch.nn.Module#_forward_pre_hooks": None,
    "torch.nn.Module#_backward_hooks": None,
    "torch.nn.Module#_backward_pre_hooks": None,
    "torch.nn.Module#_modules": None,
    "torch.nn.Module#_non_persistent_buffers_set": None,
    # A ScriptModule's registries: keys(), items(), ``in``, [] and []= (no iteration, no get()).
    "torch.jit._script.OrderedDictWrapper.keys": ("self",),
    "torch.jit._script.OrderedDictWrapper.items": ("self",),
    "torch.jit._script.OrderedDictWrapper.__contains__": ("self", "k"),
    "torch.jit._script.OrderedDictWrapper.__getitem__": ("self", "k"),
    "torch.jit._script.OrderedDictWrapper.__setitem__": ("self", "k", "v"),
    "torch.nn.Module._apply": ("self", "fn", "recurse"),
    "torch.nn.utils.stateless._reparametrize_module": ("module", "parameters_and_buffers", "tie_weights",
                                                       "strict", "stack_weights"),
}

# nn.Module's per-instance registries (each a dict in the instance ``__dict__``), which
# graphcap saves and restores entry by entry around a trace.
PARAMETER_REGISTRY = "_parameters"
BUFFER_REGISTRY = "_buffers"
MODULE_REGISTRY = "_modules"
REGISTRY_FIELDS = (PARAMETER_REGISTRY, BUFFER_REGISTRY, MODULE_REGISTRY)
# Prefixes of the instance fields holding nn.Module's hooks (``_forward_hooks``, ``_backward_pre_hooks``, ...).
HOOK_FIELD_PREFIXES = ("_forward", "_backward")

__all__ = ["REGISTRY_FIELDS", "PARAMETER_REGISTRY", "BUFFER_REGISTRY", "MODULE_REGISTRY", "HOOK_FIELD_PREFIXES",
           "parameters_of", "buffers_of", "children_of", "hook_functions", "registry_view",
           "non_persistent_buffer_names",
           "reparametrized",
           "MovesExtraTensors", "has_hooks", "plain_attributes", "forward_hook_functions"]


def parameters_of(module: torch.nn.Module) -> MutableMapping[str, Any]:
    """The module's own parameter registry (name → parameter or None), live. Relies on ``Module._parameters``."""
    return registry_view(getattr(module, PARAMETER_REGISTRY, {}))


def buffers_of(module: torch.nn.Module) -> MutableMapping[str, Any]:
    """The module's own buffer registry (name → tensor or None), live. Relies on ``Module._buffers``."""
    return registry_view(getattr(module, BUFFER_REGISTRY, {}))


def children_of(module: torch.nn.Module) -> MutableMapping[str, Any]:
    """The module's own submodule registry (name → module or None), live. Relies on ``Module._modules``."""
    return registry_view(getattr(module, MODULE_REGISTRY))


def registry_view(registry: Any) -> MutableMapping[str, Any]:
    """A module registry (one of ``REGISTRY_FIELDS``' values) as a live mapping.

    nn.Module's registries are dicts and come back as they are. A ScriptModule's
    are TorchScript wrappers (``torch.jit._script.OrderedDictWrapper``) that read
    and write the compiled module but have no ``get``, no iteration and no
    ``pop``; graphcap reads every registry through this view so that a scripted
    submodule's state is found like any other module's.
    """
    if isinstance(registry, dict):
        return registry
    return _ScriptRegistry(registry)


class _ScriptRegistry(MutableMapping):
    """A TorchScript registry wrapper seen as a mapping: names by its ``keys()``, entries by ``[]``."""

    def __init__(self, wrapped: Any):
        self._wrapped = wrapped

    def __getitem__(self, name: str) -> Any:
        return self._wrapped[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._wrapped[name] = value

    def __delitem__(self, name: str) -> None:
        del self._wrapped[name]  # TorchScript refuses: a compiled module's members are fixed

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._wrapped

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._wrapped.keys()))

    def __len__(self) -> int:
        return len(self._wrapped.keys())


def non_persistent_buffer_names(module: torch.nn.Module) -> set[str]:
    """The live set of the module's own buffer names left out of ``state_dict``.

    Relies on ``Module._non_persistent_buffers_set``.
    """
    return module._non_persistent_buffers_set


def reparametrized(module: torch.nn.Module, state: dict[str, torch.Tensor], **options: Any) -> Any:
    """A context manager: within it ``module`` uses ``state`` (FQN → tensor) as its parameters and buffers.

    Relies on ``torch.nn.utils.stateless._reparametrize_module(module,
    parameters_and_buffers, tie_weights, strict, stack_weights)``.
    """
    from torch.nn.utils.stateless import _reparametrize_module
    return _reparametrize_module(module, state, **options)


class MovesExtraTensors:
    """Mixin for an ``nn.Module`` subclass holding tensors that ``.to()`` / ``.cuda()`` do not see.

    After nn.Module moved its parameters and buffers, ``move_extra_tensors(fn)``
    is called with the same per-tensor function. Relies on ``Module._apply(fn,
    recurse)``, the method every move goes through.
    """

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True):
        super()._apply(fn, recurse)
        self.move_extra_tensors(fn)
        return self

    def move_extra_tensors(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Apply ``fn`` to the tensors the subclass keeps outside nn.Module's registries."""


def has_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` itself has a forward or backward hook (its ``_forward_hooks``,
    ``_forward_pre_hooks``, ``_backward_hooks`` or ``_backward_pre_hooks`` is not empty)."""
    d = module.__dict__
    return bool(d.get("_forward_hooks") or d.get("_forward_pre_hooks") or d.get("_backward_hooks")
                or d.get("_backward_pre_hooks"))


def hook_functions(module: Any, table: str) -> list[Any]:
    """The hooks in ``module``'s hook table ``table`` (``_forward_hooks``, ``_forward_pre_hooks``;
    a name starting with one of ``HOOK_FIELD_PREFIXES``), in the order they run; [] for another name."""
    if not table.startswith(HOOK_FIELD_PREFIXES) or not table.endswith("hooks"):
        return []
    hooks = getattr(module, "__dict__", {}).get(table)
    return list(hooks.values()) if isinstance(hooks, dict) else []


def forward_hook_functions(module: Any) -> list[Any]:
    """The forward pre-hooks, then the forward hooks, registered on ``module`` itself."""
    return hook_functions(module, "_forward_pre_hooks") + hook_functions(module, "_forward_hooks")


def plain_attributes(module: torch.nn.Module) -> Any:
    """The module's own attributes (``self.layer_idx``, ``self.training``, ...) as ``(name, value)``
    pairs: its instance fields less nn.Module's registries and hook tables (and state-dict hook
    tables); then, under the name ``<non-persistent>``, its non-persistent buffer names."""
    for name, value in module.__dict__.items():
        if name in _ATTRIBUTE_FIELDS_SKIPPED or name.startswith(_HOOK_AND_STATE_DICT_PREFIXES):
            continue
        yield name, value
    yield "<non-persistent>", tuple(sorted(non_persistent_buffer_names(module)))


_ATTRIBUTE_FIELDS_SKIPPED = {*REGISTRY_FIELDS, "_non_persistent_buffers_set"}
_HOOK_AND_STATE_DICT_PREFIXES = (*HOOK_FIELD_PREFIXES, "_state_dict", "_load_state_dict", "_is_full_backward_hook")
