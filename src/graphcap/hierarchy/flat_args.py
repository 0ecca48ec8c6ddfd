"""Calling an unflattened module with inputs of another structure: ``flat_args_adapter``.

An unflattened module takes the program's inputs: the same containers, keys
and count as the example inputs. A caller whose inputs are shaped otherwise
(a pipeline stage handing on a longer tuple, a torchrec-style caller passing
a differently nested batch) gives ``unflatten`` an adapter. The adapter is
asked only when a call's structure differs from the program's; it gets both
structures and the call's leaves and returns the program's leaves, in its
order. Their count is checked, and then every input check of the program
runs on them, as on any call: an adapter that puts a tensor of the wrong size
in a slot is refused before anything is computed.

Adapters written for torch.export (subclasses of torch's ``FlatArgsAdapter``)
work unchanged: anything with an ``adapt`` method of that signature is one.
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Optional

import torch

from .. import auto_flatten, module_inputs
from ..errors import ExportInputError, FlatArgsAdaptationError, RuntimeInputError
from ..runtime.input_checks import InputChecker
from ..runtime.input_structure import drawn_structure, other_structure

_log = logging.getLogger(__name__)


class FlatArgsAdapter(abc.ABC):
    """Maps the flat inputs of a call shaped otherwise than the program's onto the program's.

    Subclass it and pass an instance to ``graphcap.unflatten(ep, flat_args_adapter=...)``.
    torch.export's ``FlatArgsAdapter`` subclasses are accepted as they are (and count as
    instances of this class): any object with an ``adapt`` method of this signature is one.

    Attributes:
        adapt: ``adapt(target_spec, input_spec, input_args, metadata=None, obj=None)``:
            given the program's input tree spec, the call's, and the call's leaves (in the
            call's flattening order), the leaves the program takes, in its order.
            ``metadata`` is a dict of the program's graph metadata plus
            ``"unflattened_module"`` (the module being called; kept between calls, so an
            adapter may keep notes there); ``obj`` is the call's positional arguments.
        get_flat_arg_paths: optional; one name per returned leaf (``"batch.ids"``), used
            in the messages of the input checks that run on the adapted leaves.

    Raises:
        FlatArgsAdaptationError: (on the call) the adapter returned another number of
            leaves than the program takes, or another number of paths than leaves.

    Example:
        >>> class DropExtra(graphcap.FlatArgsAdapter):
        ...     def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        ...         return input_args[:target_spec.num_leaves]
        >>> unf = graphcap.unflatten(ep, flat_args_adapter=DropExtra())
        >>> out = unf(x, torch.zeros(1))  # the program took x alone
    """

    @abc.abstractmethod
    def adapt(self, target_spec: Any, input_spec: Any, input_args: list[Any],
              metadata: Optional[dict[str, Any]] = None, obj: Optional[Any] = None) -> list[Any]:
        """The program's flat inputs (``target_spec``'s leaves) from the call's (``input_args``)."""

    def get_flat_arg_paths(self) -> list[str]:
        """Names of the adapted leaves, for messages; empty: the program's own input paths."""
        return []

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        # duck-typed: torch's adapters (and any class with ``adapt``) are adapters
        if cls is FlatArgsAdapter and callable(getattr(other, "adapt", None)):
            return True
        return NotImplemented


def check_adapter(adapter: Any) -> None:
    """Refuse, when ``unflatten`` is called, an adapter that cannot adapt anything."""
    if adapter is not None and not callable(getattr(adapter, "adapt", None)):
        raise ExportInputError(
            f"flat_args_adapter must have an adapt(target_spec, input_spec, input_args, metadata, obj) "
            f"method; got a {type(adapter).__name__}.", where="graphcap.unflatten(ep, flat_args_adapter=...)",
            fix="Pass an instance of a graphcap.FlatArgsAdapter subclass (torch's FlatArgsAdapter "
                "subclasses work too), or leave flat_args_adapter out.")


class AdapterState:
    """An unflattened module's adapter and the metadata dict it is handed on every call.

    A copy of the module (``copy.deepcopy``) gets a fresh dict naming the copy."""

    def __init__(self, adapter: Any, program_meta: dict[str, Any]):
        self.adapter = adapter
        self._program_meta = program_meta
        self._metadata: Optional[dict[str, Any]] = None

    def metadata(self, module: torch.nn.Module) -> dict[str, Any]:
        if self._metadata is None:
            self._metadata = {**self._program_meta, "unflattened_module": module}
        return self._metadata

    def __deepcopy__(self, memo: dict) -> "AdapterState":
        import copy
        return AdapterState(copy.deepcopy(self.adapter, memo), self._program_meta)


def _adapter_name(adapter: Any) -> str:
    return f"{type(adapter).__name__}.adapt"


def _kwargs_in_program_order(kwargs: dict[str, Any], in_spec: Any) -> dict[str, Any]:
    """The call's keyword arguments, those the program takes first in its order, then the rest
    as given (so that the call's flat order does not depend on how the caller ordered them)."""
    program_keys = list(in_spec.child(1).context or []) if in_spec.num_children == 2 else []
    ordered = {k: kwargs[k] for k in program_keys if k in kwargs}
    ordered.update((k, v) for k, v in kwargs.items() if k not in ordered)
    return ordered


def no_adapter_error(checker: InputChecker, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FlatArgsAdaptationError:
    """The error of a call shaped otherwise, on a module unflattened without an adapter."""
    spec = auto_flatten.structure(module_inputs.wrap((tuple(args), dict(kwargs))))
    return FlatArgsAdaptationError(
        f"The unflattened module was called with inputs of another structure than the program's, and "
        f"no flat_args_adapter was given to map them: expected (args, kwargs) shaped like "
        f"{drawn_structure(checker.in_spec)}, but got {drawn_structure(spec)} (each * is one tensor or value).",
        where="the call of the module graphcap.unflatten(ep) returned",
        fix="Pass the same positional and keyword arguments, with the same containers, as the example "
            "inputs given to export; or, if callers pass another structure on purpose, unflatten with "
            "graphcap.unflatten(ep, flat_args_adapter=MyAdapter()), where MyAdapter subclasses "
            "graphcap.FlatArgsAdapter and its adapt(...) returns the program's flat inputs.")


def adapted_inputs(state: AdapterState, module: torch.nn.Module, checker: InputChecker,
                   args: tuple[Any, ...], kwargs: dict[str, Any], check: bool = True) -> Optional[list[Any]]:
    """The program's flat inputs for a call whose structure differs from the program's, from the
    adapter and checked as any call's; None when the call has the program's structure."""
    if other_structure(args, kwargs, checker.in_spec) is None:
        return None
    adapter = state.adapter
    call = module_inputs.wrap((tuple(args), _kwargs_in_program_order(dict(kwargs), checker.in_spec)))
    leaves, input_spec = auto_flatten.flatten(call)
    target_spec = checker.in_spec
    if not getattr(module, "adapted", False):
        _log.info("unflattened module: inputs shaped %s, the program's %s; adapting with %s",
                  input_spec, target_spec, _adapter_name(adapter))
    result = adapter.adapt(target_spec=target_spec, input_spec=input_spec, input_args=leaves,
                           metadata=state.metadata(module), obj=tuple(args))
    try:
        adapted = list(result)
    except TypeError:
        raise FlatArgsAdaptationError(
            f"{_adapter_name(adapter)} returned a {type(result).__name__}, not a list of the program's flat inputs.",
            where=_adapter_name(adapter), fix="Return a list with one value per input of the program.") from None
    expected = target_spec.num_leaves
    if len(adapted) != expected:
        raise FlatArgsAdaptationError(
            f"{_adapter_name(adapter)} returned {len(adapted)} flat inputs, but the program takes {expected}, "
            f"shaped like {drawn_structure(target_spec)} (each * is one input); the call gave {len(leaves)}, "
            f"shaped like {drawn_structure(input_spec)}.",
            where=f"{_adapter_name(adapter)}(target_spec, input_spec, input_args, ...)",
            fix=f"Return exactly target_spec.num_leaves ({expected}) values, in the order of the program's "
                f"inputs (the example inputs given to export, flattened).")
    paths = list(adapter.get_flat_arg_paths()) if callable(getattr(adapter, "get_flat_arg_paths", None)) else []
    if paths and len(paths) != len(adapted):
        raise FlatArgsAdaptationError(
            f"{type(adapter).__name__}.get_flat_arg_paths() names {len(paths)} inputs, but adapt returned "
            f"{len(adapted)}.", where=f"{type(adapter).__name__}.get_flat_arg_paths()",
            fix="Return one path per adapted input, or an empty list.")
    module.adapted = True
    if check:
        try:
            checker.check_leaves(adapted, paths or None)
        except RuntimeInputError as error:
            raise type(error)(error.what, where=f"the inputs {_adapter_name(adapter)} returned for this call"
                              + ("" if paths else " (paths are the program's inputs it filled)"),
                              fix=f"{error.fix + ' ' if error.fix else ''}Or correct {_adapter_name(adapter)}: "
                                  f"it must put each value at the program's input of that shape.") from None
    return adapted


__all__ = ["FlatArgsAdapter", "AdapterState", "adapted_inputs", "check_adapter", "no_adapter_error"]
