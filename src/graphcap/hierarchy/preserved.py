"""Submodules exported with ``preserve_module_call_signature``.

Such a submodule keeps the calling convention it had in eager: the caller
passes the original ``(*args, **kwargs)`` and gets the original output
structure back. That is what lets a user replace it with any module of the
same call signature (an eager copy, a quantized one) and still run the whole.

Two halves:

- :class:`PreservedCallSite` is what the *caller's* graph calls. It rebuilds
  the arguments from the flat values, calls whatever module sits at the FQN
  now, and checks that the result has the recorded output structure, so a
  replacement that does not fit fails naming the submodule and what differs
  rather than somewhere downstream.
- :class:`PreservedModule` is the rebuilt submodule itself. A module called
  several times may have been traced into a different graph per call
  (``n(x, True)`` and ``n(x, False)``); it keeps each call's graph and picks
  the one whose recorded input structure and baked-in values match the call.
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

from .. import auto_flatten
from ..errors import GraphcapError
from .modules import LazyForward, SubmoduleGraph


class _NotConstant:
    """Marks a call input that was a traced value (a tensor, a size), not a baked-in constant.
    One instance, kept by copies of the module."""

    def __repr__(self) -> str:
        return "tensor"

    def __deepcopy__(self, memo: dict) -> "_NotConstant":
        return self

    def __copy__(self) -> "_NotConstant":
        return self


_NOT_CONSTANT = _NotConstant()


class SubmoduleSignatureError(GraphcapError, TypeError):
    """A preserved submodule (or its replacement) was called with, or returned, another structure."""


def _leaf_kinds(values: list[Any]) -> str:
    return ", ".join("tensor" if isinstance(v, torch.Tensor) else repr(v) for v in values)


def _describe(spec: Any) -> str:
    try:
        return str(auto_flatten.unflatten(["*"] * spec.num_leaves, spec))
    except Exception:  # a class that cannot hold placeholders
        return str(spec)


class PreservedCallSite:
    """The call of a preserved submodule, as the caller's graph makes it; see the module docstring."""

    def __init__(self, fqn: str, call_name: str, in_spec: Any, out_spec: Any, expected_outputs: list[Any]):
        self.fqn = fqn
        self.call_name = call_name
        self.in_spec = in_spec
        self.out_spec = out_spec
        self.expected_outputs = expected_outputs  # fake tensors / constants, one per output leaf
        # what fx's code generator needs to name this callable in the caller's code
        self.__name__ = "call_" + "".join(c if c.isalnum() else "_" for c in call_name)
        self.__module__ = __name__

    def __call__(self, module: torch.nn.Module, *flat_args: Any) -> tuple:
        args, kwargs = auto_flatten.unflatten(list(flat_args), self.in_spec)
        if not isinstance(module, SubmoduleGraph):
            self._check_accepts(module, args, kwargs)
        result = module(*args, **kwargs)
        leaves, spec = auto_flatten.flatten(result)
        if spec != self.out_spec:
            raise SubmoduleSignatureError(
                f"Submodule '{self.fqn}' ({type(module).__name__}) returned {_describe(spec)}, but the "
                f"program's call '{self.call_name}' returned {_describe(self.out_spec)} (each * is one "
                f"tensor or value).",
                where=f"unflattened module, call '{self.call_name}'",
                fix="Replace the submodule with one whose forward returns the same structure.")
        for i, (got, expected) in enumerate(zip(leaves, self.expected_outputs)):
            self._check_output(i, module, got, expected)
        return tuple(leaves)

    def _check_accepts(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        try:
            inspect.signature(module.forward).bind(*args, **kwargs)
        except TypeError as e:
            raise SubmoduleSignatureError(
                f"Submodule '{self.fqn}' was replaced by {type(module).__name__}, whose forward cannot "
                f"take the call the program makes ({_describe(self.in_spec)} as (args, kwargs)): {e}.",
                where=f"unflattened module, call '{self.call_name}'",
                fix="Replace the submodule with one whose forward takes the same arguments.") from None
        except ValueError:
            return  # no signature to read (a builtin): let the call say

    def _check_output(self, i: int, module: torch.nn.Module, got: Any, expected: Any) -> None:
        if not isinstance(expected, torch.Tensor):
            return
        problem: Optional[str] = None
        if not isinstance(got, torch.Tensor):
            problem = f"a {type(got).__name__} where the program has a tensor"
        elif got.dim() != expected.dim():
            problem = f"a tensor of {got.dim()} dimensions where the program has {expected.dim()}"
        elif got.dtype != expected.dtype:
            problem = f"dtype {got.dtype} where the program has {expected.dtype}"
        else:
            for d, (g, e) in enumerate(zip(got.shape, expected.shape)):
                if isinstance(e, int) and g != e:
                    problem = f"size {g} in dimension {d} where the program has {e}"
                    break
        if problem:
            raise SubmoduleSignatureError(
                f"Submodule '{self.fqn}' ({type(module).__name__}) returned, as output {i} of call "
                f"'{self.call_name}', {problem}.",
                where=f"unflattened module, call '{self.call_name}'",
                fix="Replace the submodule with one that computes outputs of the same kind and shape.")


class PreservedModule(SubmoduleGraph):
    """A preserved submodule: one graph per recorded call, chosen by the call's structure."""

    def __init__(self, fqn: str, class_name: str):
        super().__init__(fqn, class_name)
        self._calls = []  # (call name, in_spec, constant per leaf, out_spec, compiled, graph, aliased leaves)

    def add_call(self, call_name: str, in_spec: Any, constants: list[Any], out_spec: Any,
                 graph: torch.fx.Graph, extra_globals: dict[str, Any],
                 same_as: Optional[list[Optional[int]]] = None) -> None:
        """Keep one call's graph. ``same_as[i]`` is the earlier input leaf that was the very same
        value as leaf ``i`` in that call (``sub(x, bias=x)``), or None: the graph reads one value
        for both, so it answers only calls that pass one tensor in both places."""
        compiled = LazyForward(graph, f"{self._class_name}:{call_name}", extra_globals)
        aliased = [(i, j) for i, j in enumerate(same_as or ()) if j is not None]
        self._calls.append((call_name, in_spec, constants, out_spec, compiled, graph, aliased))
        if len(self._calls) == 1:
            self._call_graph = graph
            self._compiled = compiled

    def _forwards(self) -> list[LazyForward]:
        return [compiled for _, _, _, _, compiled, _, _ in self._calls]

    @property
    def code(self) -> str:
        return "\n".join(f"# call {name}\n{compiled.source}" for name, _, _, _, compiled, _, _ in self._calls)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        leaves, spec = auto_flatten.flatten((args, kwargs))
        for _name, in_spec, constants, out_spec, compiled, _, aliased in self._calls:
            if spec != in_spec or not all((v is not None) if c is _NOT_CONSTANT else _same_constant(c, v)
                                          for c, v in zip(constants, leaves)):  # None is no traced value
                continue
            if any(leaves[i] is not leaves[j] for i, j in aliased):
                continue  # that call passed one value twice; its graph cannot tell the two apart
            outputs = compiled(self, *leaves)
            return auto_flatten.unflatten(list(outputs), out_spec)
        recorded = "; ".join(f"'{name}': {_describe(s)} with ({_leaf_kinds(cs)})"
                             + "".join(f", input {i} the same tensor as input {j}" for i, j in aliased)
                             for name, s, cs, _, _, _, aliased in self._calls)
        raise SubmoduleSignatureError(
            f"Submodule '{self._fqn}' was called with {_describe(spec)} with ({_leaf_kinds(leaves)}), which "
            f"matches none of the calls the program recorded for it ({recorded or 'none'}).",
            where=f"unflattened module '{self._fqn}'",
            fix="Call it as the exported model did, or export again with this call among the examples.")


def _same_constant(expected: Any, got: Any) -> bool:
    if isinstance(got, torch.Tensor):
        return expected is None  # a tensor the trace did not follow is recorded without a value
    try:
        return bool(expected == got) and type(expected) is type(got)
    except Exception:
        return False
