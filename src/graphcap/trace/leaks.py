"""Fake tensors that outlive their export: find them and tell the user.

Non-strict export runs the user's Python on fake tensors. Python the user
wrote may keep one: appended to a global list, stored by a forward hook,
captured by a closure, held in a reference cycle. Such a tensor has no data;
the next eager code that reaches it fails far from the cause, so graphcap
warns at the end of the export, naming the operator that made each tensor
and the user's source line.

The check is cheap when nothing leaks, which is the normal case: the
recorder's tensor tracker holds the fake tensors of the trace weakly, and
after the export's own references are gone none of them is alive (but the
inputs' fake tensors the shape environment records for dynamic shapes,
which are not checked). Only when
some are does graphcap collect garbage cycles and ask the garbage collector
who refers to the survivors. Referrers that belong to the program itself
(shape-environment records, the fake mode's memo of converted tensors, node
metadata) do not count; any other is a leak.
"""
from __future__ import annotations

import gc
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from ..torch_private.fake import converter_memo
from ..torch_private.modules import BUFFER_REGISTRY, PARAMETER_REGISTRY
from ..torch_private.shapes import tracked_fakes


@dataclass
class LeakProbe:
    """What the check needs after the export returned; holds no fake tensor strongly."""

    tracked: Any  # the recorder's WeakKeyDictionary: fake tensor → its proxy
    fake_mode: Any
    graph_module: "weakref.ref[torch.fx.GraphModule]"
    # ids of fake inputs the program keeps on purpose (the dynamic-shape records); not checked
    kept_inputs: frozenset = frozenset()


def _alive(probe: LeakProbe) -> list[torch.Tensor]:
    """Tracked fake tensors still alive, but those the shape environment keeps by design.

    With dynamic shapes the ShapeEnv and graphcap's symbol records keep each
    input's fake tensor; they live as long as the program. They are left out
    of the check (a user keeping one of them is not reported), so that the
    check stays free.

    The tracker also holds real tensors an operator returned as they were: an in-place update of a
    model's own tensor that the trace reads as a constant (transformers' static cache adds to its
    ``cumulative_length`` buffer in place, ``t.add_(n)`` returning ``t``). Those have data, so
    the model keeping them is no leak.
    """
    shape_env = getattr(probe.fake_mode, "shape_env", None)
    recorded = {id(getattr(r, "fake", None)) for r in tracked_fakes(shape_env)}
    recorded |= probe.kept_inputs
    return [t for t in list(probe.tracked.keys()) if isinstance(t, torch.Tensor) and id(t) not in recorded
            and type(t) not in _REAL_TENSOR_TYPES]


_REAL_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)  # a FakeTensor is a subclass of its own


def _program_holders(probe: LeakProbe) -> set[int]:
    """ids of the containers through which the program itself keeps fake tensors."""
    ids: set[int] = set()
    shape_env = getattr(probe.fake_mode, "shape_env", None)
    records = tracked_fakes(shape_env)
    ids.add(id(records))
    for record in records:
        ids.add(id(record))
        ids.add(id(getattr(record, "__dict__", None)))
    memo = converter_memo(probe.fake_mode)
    if memo is not None:
        ids.add(id(memo))
    gm = probe.graph_module()
    if gm is not None:
        for mod in gm.modules():
            if isinstance(mod, torch.fx.GraphModule):
                ids.update(id(node.meta) for node in mod.graph.nodes)
    return ids


def _is_node_metadata(referrer: Any) -> bool:
    """Whether ``referrer`` is the metadata of a graph node: the program's (or one the trace
    made and later removed, such as a dead read of a subclass's inner tensor, which fx's
    bookkeeping of the recorded graph still holds), never the user's."""
    return isinstance(referrer, dict) and any(
        isinstance(holder, torch.fx.Node) and holder.meta is referrer for holder in gc.get_referrers(referrer))


def _is_traced_module_state(referrer: Any) -> bool:
    """Whether ``referrer`` is the parameter, buffer or attribute table of a graph module some
    trace made: a branch of ``torch.cond`` traced by torch keeps a closed-over parameter as a
    constant attribute, and torch's compile cache keeps that trace alive after the export. Only
    tracing makes graph modules of this export's fake tensors; the user's code did not keep it."""
    if not isinstance(referrer, dict):
        return False

    def is_module_dict(d: Any) -> bool:
        return any(isinstance(m, torch.fx.GraphModule) and m.__dict__ is d for m in gc.get_referrers(d))

    return is_module_dict(referrer) or any(
        isinstance(table, dict) and any(table.get(field) is referrer for field in (PARAMETER_REGISTRY, BUFFER_REGISTRY))
        and is_module_dict(table) for table in gc.get_referrers(referrer))


def _leaked(alive: list[torch.Tensor], program: set[int]) -> list[torch.Tensor]:
    """The tensors of ``alive`` referred to from outside the program (one heap scan for all)."""
    # ids only: a container of the tensors made here would itself be found as their referrer
    wanted = {id(t) for t in alive}
    leaked: set[int] = set()
    frame_type = type(sys._getframe())
    for referrer in gc.get_referrers(*alive):
        if referrer is alive or id(referrer) in program or isinstance(referrer, frame_type) \
                or _is_node_metadata(referrer) or _is_traced_module_state(referrer):
            continue
        leaked.update(id(held) for held in gc.get_referents(referrer) if id(held) in wanted)
    return [t for t in alive if id(t) in leaked]


def _describe(t: torch.Tensor, probe: LeakProbe) -> str:
    shape = f"FakeTensor(shape={list(t.shape)}, dtype={t.dtype})"
    proxy = probe.tracked.get(t)
    node: Optional[torch.fx.Node] = getattr(getattr(proxy, "proxy", None), "node", None)
    if node is None:
        return f"{shape}: not from a recorded operator"
    stack = node.meta.get("stack_trace")
    if stack:
        return f"{shape} made by node '{node.name}':\n{stack}"
    for user in node.users:
        if user.meta.get("stack_trace"):
            return f"{shape} of node '{node.name}'. Used by '{user.name}':\n{user.meta['stack_trace']}"
    return f"{shape} of node '{node.name}'"


def warn_if_leaked(probe: Optional[LeakProbe]) -> None:
    """Warn (UserWarning) about fake tensors of this export still reachable from user code."""
    if probe is None or not probe.tracked or not _alive(probe):
        return
    # tensors kept only by garbage cycles are not leaks. The cycles an export leaves are young:
    # collecting the younger generations first spares most exports a full collection, which
    # costs a tenth of a second and more in a process with a large heap (transformers loaded)
    for generation in (1, 2):
        gc.collect(generation)
        alive = _alive(probe)
        if not alive:
            return
    leaked = _leaked(alive, _program_holders(probe))
    if not leaked:
        return
    details = "\n  ".join(_describe(t, probe) for t in leaked)
    noun = "fake tensors that are"  # plural even for one: the words torch prints, which users match
    warnings.warn(
        f"Detected {len(leaked)} {noun} still alive after export. The exported program "
        f"is fine, but code that ran during the trace (forward, a hook, a closure) kept a reference "
        f"to a tensor without data; using it later in eager code will fail. Keep such values out "
        f"of globals, hooks and caches while exporting (torch.compiler.is_exporting() tells when).\n"
        f"  {details}",
        UserWarning, stacklevel=3)
