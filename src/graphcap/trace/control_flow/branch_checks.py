"""What a control-flow branch or body may not do, checked while graphcap captures it.

A branch becomes a subgraph run by the operator: only its tensor computation
on its operands survives. Two things a Python branch can do would make the
program differ from eager, so graphcap refuses them with an explanation
(:func:`graphcap.trace.control_flow.control_flow_errors.explain_failure` turns :class:`BranchRefused`
into the user-facing error):

* a write to a module attribute (``self.last = x``): the program cannot
  replay it, and code after the ``torch.cond`` would see whichever branch was
  traced last;
* an output that is one of the branch's operands (or a view of one): the
  operator's outputs are new tensors.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch

from ...torch_private import pytree
from ...torch_private.fake import same_storage


class BranchRefused(Exception):
    """A branch did something a subgraph cannot hold (see the module docstring)."""

    def __init__(self, operator: str, what: str, fix: str):
        super().__init__(what)
        self.operator, self.what, self.fix = operator, what, fix


def _attributes(module: torch.nn.Module) -> dict:
    """Everything a branch could assign on ``module``: its plain attributes and its own
    parameters, buffers and submodules (by name, through nn.Module's public accessors)."""
    return {**vars(module),
            **{("parameter", k): v for k, v in module.named_parameters(recurse=False)},
            **{("buffer", k): v for k, v in module.named_buffers(recurse=False)},
            **{("module", k): v for k, v in module.named_children()}}


def _module_state(root: Optional[torch.nn.Module]) -> list[tuple[str, torch.nn.Module, dict]]:
    if root is None:
        return []
    return [(name, m, _attributes(m)) for name, m in root.named_modules(remove_duplicate=True)]


def _written(before: list[tuple[str, torch.nn.Module, dict]]) -> Optional[str]:
    for name, module, old in before:
        new = _attributes(module)
        for key in list(old) + [k for k in new if k not in old]:
            if old.get(key, _MISSING) is not new.get(key, _MISSING):
                attr = key[1] if isinstance(key, tuple) else key
                return f"self.{name}.{attr}" if name else f"self.{attr}"
    return None


_MISSING = object()


@contextlib.contextmanager
def no_module_writes(root: Optional[torch.nn.Module], operator: str, side: str) -> Iterator[None]:
    """Refuse a branch that assigns an attribute of one of ``root``'s modules."""
    before = _module_state(root)
    yield
    path = _written(before)
    if path is not None:
        raise BranchRefused(
            operator,
            f"the {side} writes {path}, a Python side effect the captured program cannot replay "
            "(code after the call would see whichever branch graphcap traced last).",
            "Keep branches and loop bodies to tensor operations on their operands: return the value "
            "instead of storing it on the module (or register a buffer and update it outside the call).")


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return same_storage(a, b)


def check_fresh_outputs(operator: str, side: str, operands: tuple, out: Any) -> None:
    """Refuse a branch whose output is one of its operands or a view of one."""
    flat_in = [t for t in pytree.tree_leaves(operands) if isinstance(t, torch.Tensor)]
    for path, leaf in pytree.tree_flatten_with_path(out)[0]:
        if isinstance(leaf, torch.Tensor) and any(leaf is t or _same_storage(leaf, t) for t in flat_in):
            where = f"output{pytree.keystr(path)}" if path else "the output"
            raise BranchRefused(
                operator,
                f"{where} of the {side} is one of its operands (or a view of one); branches must "
                "return new tensors.",
                "Return a copy, e.g. `return x.clone()` instead of `return x`.")


def structure(value: Any) -> str:
    """A short description of an output's container structure, for messages."""
    if isinstance(value, torch.Tensor):
        return "a single tensor"
    if isinstance(value, (tuple, list, dict)):
        return f"a {type(value).__name__} of {len(value)} ({len(pytree.tree_leaves(value))} leaves)"
    return f"{type(value).__name__} {value!r}"
