"""Several methods of one module as one program: prefill + decode, encode + decode.

``graphcap.export_methods`` (``capture/methods.py``) exports each named method of a model with graphcap's own
export (a bound method's state is its module's, so every program lifts the
model's parameters and buffers under the model's FQNs) and returns a
:class:`MultiMethodProgram`: indexing by name gives an ordinary
ExportedProgram, and all of them hold the *same* tensor object for each FQN
(tied weights stay tied). ``module()`` gives one ``nn.Module`` whose methods run
the programs over one shared state, so a KV cache one method fills is the one
the next method reads.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator, Optional

import torch

from .errors import ExportInputError
from .program import ExportedProgram
from .signature import InputKind
from .torch_private.dispatch import is_traceable_wrapper_subclass
from .torch_private.modules import MovesExtraTensors

_SHARED_KINDS = (InputKind.PARAMETER, InputKind.BUFFER)


def _state_entries(name: str, ep: ExportedProgram) -> Iterator[tuple[str, str, torch.Tensor, bool]]:
    """(fqn, kind, tensor, persistent) of every parameter and buffer ``ep`` lifts."""
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in _SHARED_KINDS:
            continue
        persistent = spec.persistent is not False
        store = ep.state_dict if spec.kind is InputKind.PARAMETER or persistent else ep.constants
        yield spec.target, spec.kind.name, store[spec.target], persistent


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


def _same_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    """One view of one storage (how loading gives each method the file's tensor), or equal
    values; tensors without data (a structure-only load) match by shape and dtype alone."""
    if a.device.type == "meta" or b.device.type == "meta":
        return a.device == b.device
    if is_traceable_wrapper_subclass(a) or is_traceable_wrapper_subclass(b):
        return _same_subclass_value(a, b)
    if a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.stride() == b.stride() \
            and a.storage_offset() == b.storage_offset():
        return True
    return torch.equal(a, b)


def _same_subclass_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    """A tensor subclass that wraps inner tensors (a torchao ``Int8Tensor``: int8 data and scales) has
    no storage of its own to compare; it is the same value when it is the same class with the same
    metadata and its inner tensors are the same values."""
    if type(a) is not type(b) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    names_a, meta_a = a.__tensor_flatten__()
    names_b, meta_b = b.__tensor_flatten__()
    if list(names_a) != list(names_b):
        return False
    try:
        same_meta = bool(meta_a == meta_b)
    except Exception:  # metadata without a usable ==: compare what it prints
        same_meta = repr(meta_a) == repr(meta_b)
    return same_meta and all(_same_value(getattr(a, n), getattr(b, n)) for n in names_a)


class MultiMethodProgram(Mapping):
    """Several ExportedPrograms of one module's methods over one shared state.

    A read-only mapping method name -> :class:`ExportedProgram`. Each program is
    complete on its own (print it, ``run_decompositions`` it, hand it to a
    consumer); the programs hold the same tensor object for each parameter and
    buffer FQN.

    Attributes:
        state_dict: every parameter and persistent buffer of any method, by FQN (shared).
        constants: every non-persistent buffer of any method, by FQN (shared).

    Example:
        >>> progs = graphcap.export_methods(model, {"prefill": (ids,), "decode": (tok,)})
        >>> print(progs["decode"].graph)
        >>> m = progs.module()
        >>> logits = m.prefill(ids); logits = m.decode(tok)
    """

    def __init__(self, programs: Mapping[str, ExportedProgram], *, share_equal_values: bool = False):
        """Check that the programs agree on their state and make them share one tensor per FQN.

        ``share_equal_values``: two programs holding different tensor objects under one FQN
        are made to share the first one when their values are equal (how loading restores the
        sharing); without it they must be the same object already.
        """
        if not programs:
            raise ExportInputError("A multi-method program needs at least one method.",
                                   where="MultiMethodProgram({})",
                                   fix="Pass a mapping of method name -> ExportedProgram.")
        self._programs: dict[str, ExportedProgram] = dict(programs)
        self._state_dict: dict[str, torch.Tensor] = {}
        self._constants: dict[str, torch.Tensor] = {}
        first: dict[str, tuple[str, str, torch.Tensor, bool]] = {}  # fqn -> (method, kind, tensor, persistent)
        for name, ep in self._programs.items():
            for fqn, kind, t, persistent in _state_entries(name, ep):
                if fqn not in first:
                    first[fqn] = (name, kind, t, persistent)
                    (self._state_dict if kind == "PARAMETER" or persistent else self._constants)[fqn] = t
                    continue
                other, other_kind, shared, other_persistent = first[fqn]
                if (other_kind, other_persistent) != (kind, persistent) or shared.shape != t.shape \
                        or shared.dtype != t.dtype:
                    def label(k, p):
                        return k.lower() if k == "PARAMETER" or p else "non-persistent buffer"
                    raise ExportInputError(
                        f"Methods {other!r} and {name!r} disagree about the state {fqn!r}: {other!r} "
                        f"sees a {label(other_kind, other_persistent)} {_describe(shared)}, {name!r} a "
                        f"{label(kind, persistent)} {_describe(t)}. Methods of one program share "
                        f"one tensor per FQN.",
                        where=f"method {name!r}, state {fqn!r}",
                        fix=f"Give {fqn!r} one shape and dtype for every method: register it with the "
                            f"size it will have (e.g. a static KV cache of the maximum length) and update "
                            f"it in place (self.{fqn}[...] = value) instead of resizing it.")
                if t is shared:
                    continue
                if share_equal_values and _same_value(t, shared):
                    self._share(name, fqn, shared)
                    continue
                raise ExportInputError(
                    f"Methods {other!r} and {name!r} hold different tensors under the state {fqn!r}; "
                    f"a multi-method program shares one tensor per FQN.",
                    where=f"method {name!r}, state {fqn!r}",
                    fix="Export the methods from one model instance: "
                        "graphcap.export_methods(model, {name: args, ...}).")

    def _share(self, name: str, fqn: str, shared: torch.Tensor) -> None:
        ep = self._programs[name]
        for store in (ep.state_dict, ep.constants):
            if fqn in store:
                store[fqn] = shared

    # -- the mapping -------------------------------------------------------
    def __getitem__(self, name: str) -> ExportedProgram:
        try:
            return self._programs[name]
        except KeyError:
            raise KeyError(f"No method {name!r} in this program; its methods are "
                           f"{', '.join(map(repr, self._programs))}.") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._programs)

    def __len__(self) -> int:
        return len(self._programs)

    @property
    def methods(self) -> list[str]:
        """The method names, in the order they were exported."""
        return list(self._programs)

    @property
    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state_dict

    @property
    def constants(self) -> dict[str, torch.Tensor]:
        return self._constants

    # -- behaviour ---------------------------------------------------------
    def module(self) -> torch.nn.Module:
        """One ``nn.Module`` with a method per program, all over one shared state (see
        :class:`MultiMethodModule`)."""
        return MultiMethodModule(self)

    def run_decompositions(self, decomp_table: Any = None,
                           decompose_custom_triton_ops: bool = False) -> "MultiMethodProgram":
        """Every method in the inference IR; the state stays shared."""
        return MultiMethodProgram({name: ep.run_decompositions(decomp_table, decompose_custom_triton_ops)
                                   for name, ep in self._programs.items()}, share_equal_values=True)

    def __str__(self) -> str:
        parts = [f"MultiMethodProgram: {len(self._programs)} methods over {len(self._state_dict)} "
                 f"state tensors + {len(self._constants)} non-persistent buffers"]
        for name, ep in self._programs.items():
            parts.append(f"\n=== method {name!r} ===\n{ep}")
        return "\n".join(parts)

    __repr__ = __str__


def method_program(obj: Any, method: Optional[str], tool: str) -> ExportedProgram:
    """The program a per-program tool works on: ``obj`` itself, or its method ``method`` when
    ``obj`` is a :class:`MultiMethodProgram` (which then needs one)."""
    if isinstance(obj, MultiMethodProgram):
        names = ", ".join(map(repr, obj.methods))
        if method is None:
            first = obj.methods[0]
            raise ExportInputError(
                f"{tool} works on one method of a multi-method program; this one has the methods {names}.",
                where=f"{tool}(progs, ...)",
                fix=f"Name the method: {tool}(progs, ..., method={first!r}), or pass progs[{first!r}].")
        if method not in obj:
            raise ExportInputError(f"The program has no method {method!r}; its methods are {names}.",
                                   where=f"{tool}(..., method={method!r})", fix=f"Name one of {names}.")
        return obj[method]
    if method is not None:
        raise ExportInputError(f"method={method!r} picks a method of a multi-method program, and this is "
                               f"one program ({type(obj).__name__}).",
                               where=f"{tool}(..., method={method!r})", fix="Leave method= out.")
    return obj


class MultiMethodModule(MovesExtraTensors, torch.nn.Module):
    """What ``MultiMethodProgram.module()`` returns: one state, one method per program.

    The module owns the state at the model's FQNs (``state_dict()`` lists each
    tensor once; ``.to()``, ``load_state_dict`` work as usual, and every method
    follows them). Each method runs that program's ``ep.module()`` whose
    parameters and buffers are this module's own objects: a buffer one method writes in place is what the next
    call of any method reads. As ``ep.module()``'s, those are the program's own tensors (the
    exported model's): what a method writes is written in the program's state.
    """

    def __init__(self, progs: MultiMethodProgram):
        super().__init__()
        from .runtime.exported_module import _install
        reserved = set(dir(torch.nn.Module)) - {"forward"}
        for name in progs:
            if name in reserved or name.startswith("_"):
                raise ExportInputError(
                    f"Method {name!r} cannot be a method of the module: nn.Module has an attribute of "
                    f"that name.", where=f"MultiMethodProgram.module(), method {name!r}",
                    fix=f"Run it as progs[{name!r}].module()(...), or export it under another name "
                        f"(define a method with a different name that calls it).")
        runners = {name: ep.module() for name, ep in progs.items()}
        params = {id(t): None for t in progs.state_dict.values() if isinstance(t, torch.nn.Parameter)}
        installed: dict[int, torch.Tensor] = {}
        for fqn, t in [*progs.state_dict.items(), *progs.constants.items()]:
            is_param = fqn in progs.state_dict and (isinstance(t, torch.nn.Parameter) or id(t) in params
                                                    or _is_parameter(progs, fqn))
            if id(t) not in installed:
                value = t
                if is_param and not isinstance(t, torch.nn.Parameter):
                    value = torch.nn.Parameter(t, requires_grad=t.requires_grad)
                installed[id(t)] = value
            value = installed[id(t)]
            if is_param:
                _install(self, fqn, value)
            else:
                _install(self, fqn, value, buffer=True, persistent=fqn in progs.state_dict)
        self._method_runners = runners  # plain dict: the runners' state is this module's, listed once
        self._method_state = {name: _state_fqns(progs[name]) for name in runners}
        self._stale = set(runners)
        for name in runners:
            self._bind_state(name)

    def _bind_state(self, name: str) -> None:
        """Point the runner's parameters and buffers at this module's current ones. Done once,
        and again after ``.to()`` or ``load_state_dict`` may have replaced them."""
        runner = self._method_runners[name]
        for fqn in self._method_state[name]:
            *path, field = fqn.split(".")
            value = self.get_parameter(fqn) if _has_parameter(self, fqn) else self.get_buffer(fqn)
            owner = runner.get_submodule(".".join(path)) if path else runner
            if getattr(owner, field) is not value:
                setattr(owner, field, value)
        self._stale.discard(name)

    def move_extra_tensors(self, fn: Any) -> None:
        """After ``.to()``/``.cuda()`` moved the shared state: each method's own constants follow, and
        every method re-binds the shared state before its next call."""
        for runner in self._method_runners.values():
            runner.move_extra_tensors(fn)
        self._stale = set(self._method_runners)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(*args, **kwargs)
        self._stale = set(self._method_runners)  # assign=True replaces the tensors
        return result

    def _call_method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in self._stale:
            self._bind_state(name)
        return self._method_runners[name](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        runners = self.__dict__.get("_method_runners")
        if runners is not None and name in runners:
            def method(*args: Any, **kwargs: Any) -> Any:
                return self._call_method(name, *args, **kwargs)
            method.__name__ = name
            return method
        return super().__getattr__(name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if "forward" not in self._method_runners:
            raise ExportInputError(
                f"This module has no forward method; its methods are {', '.join(map(repr, self._method_runners))}.",
                where="MultiMethodModule.__call__", fix="Call a method by name, e.g. m.decode(...).")
        return self._call_method("forward", *args, **kwargs)

    def method_names(self) -> list[str]:
        return list(self._method_runners)


def _has_parameter(module: torch.nn.Module, fqn: str) -> bool:
    *path, field = fqn.split(".")
    owner = module.get_submodule(".".join(path)) if path else module
    return isinstance(getattr(owner, field, None), torch.nn.Parameter)


def _is_parameter(progs: MultiMethodProgram, fqn: str) -> bool:
    return any(s.kind is InputKind.PARAMETER and s.target == fqn
               for ep in progs.values() for s in ep.graph_signature.input_specs)


def _state_fqns(ep: ExportedProgram) -> list[str]:
    return [s.target for s in ep.graph_signature.input_specs if s.kind in _SHARED_KINDS]
