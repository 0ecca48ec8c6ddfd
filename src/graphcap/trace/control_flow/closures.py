"""Values a control-flow branch closes over, passed to the operator as operands.

A branch is recorded as its own graph; a value of the enclosing program it
uses without receiving it as an operand must become an operand, or the branch
graph would hold a value of another graph.

* Symbolic ints (``lambda: x + n`` with ``n = y.shape[0]`` or an int input
  marked dynamic) are found in the branch's closure before the call
  (:func:`closed_over_symbols`) and passed as extra trailing operands: the
  branch graph's recorder then knows them as its own inputs. So are the
  symbolic sizes of a tensor the branch closes over (``i < y.shape[0]`` in a
  loop condition): the branch reads them from the tensor, and its recorder
  must know each as an input, as it knows a closed-over symbolic int.
* Tensors are found after the call: the recorder keeps a tensor it does not
  know as a constant of the branch graph, and :func:`closure_source` says
  which node of the enclosing graph made it (``subgraph_constants.hoist_constants`` passes
  that node in).
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Optional

import torch

from ...torch_private.fx import current_recording, recorded_node

# fx graph being recorded -> its recording's tensor tracker, for the graphs in which a
# control-flow operator was called (weak both ways: gone with the graph or the recording)
_recordings: "weakref.WeakKeyDictionary[torch.fx.Graph, Any]" = weakref.WeakKeyDictionary()
_recordings_lock = threading.Lock()


def remember_recording() -> None:
    """Note the recording a control-flow call is made in, to resolve its branches' closures later."""
    recording = current_recording()
    if recording is not None:
        graph, tracker = recording
        with _recordings_lock:
            _recordings[graph] = tracker


def closure_source(graph: torch.fx.Graph, tensor: Any) -> Optional[torch.fx.Node]:
    """The node of ``graph`` that made ``tensor``, when a branch of a control-flow call in
    ``graph`` closed over it (its branch graph holds it as a constant); else None."""
    with _recordings_lock:
        tracker = _recordings.get(graph)
    if tracker is None:
        return None
    node = recorded_node(tracker, tensor)
    return node if node is not None and node.graph is graph else None


def forget_recording(graph: torch.fx.Graph) -> None:
    with _recordings_lock:
        _recordings.pop(graph, None)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def closed_over_symbols(fns: list[Any], operands: list[Any]) -> list[Any]:
    """The symbolic scalars the callables ``fns`` reach through their closures (and partial
    arguments, bound methods' functions), not already among ``operands``, in a stable order."""
    found: list[Any] = []
    seen_values = {id(v) for v in operands} | {id(v.node) for v in operands if isinstance(v, _SYMBOLIC)}
    seen_objects: set[int] = set()
    operand_tensors = {id(v) for v in operands if isinstance(v, torch.Tensor)}

    def add(value: Any) -> None:
        if id(value) not in seen_values and id(value.node) not in seen_values and not _is_constant(value):
            seen_values.update((id(value), id(value.node)))
            found.append(value)

    def visit(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen_objects:
            return
        seen_objects.add(id(obj))
        if isinstance(obj, _SYMBOLIC):
            add(obj)
        elif isinstance(obj, torch.Tensor):
            if id(obj) not in operand_tensors:  # an operand's sizes are read from its placeholder
                for size in obj.shape:
                    if isinstance(size, torch.SymInt):
                        add(size)
        elif isinstance(obj, (tuple, list)):
            for item in obj:
                visit(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                visit(item, depth + 1)
        elif isinstance(obj, functools.partial):
            visit(obj.func, depth + 1)
            visit(obj.args, depth + 1)
            visit(obj.keywords, depth + 1)
        elif hasattr(obj, "__func__"):  # a bound method
            visit(obj.__func__, depth + 1)
        elif hasattr(obj, "__code__") and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass

    for fn in fns:
        visit(fn, 0)
    return found


def closure_name(fns: list[Any], value: Any) -> Optional[str]:
    """The name under which one of ``fns`` closes over ``value`` (``v`` in ``lambda x: x * v``, also
    through partials, bound methods and the functions torch wraps a branch in), or None."""
    seen: set[int] = set()

    def search(obj: Any, depth: int) -> Optional[str]:
        if depth > 4 or id(obj) in seen:
            return None
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            return search(obj.func, depth + 1)
        if hasattr(obj, "__func__"):
            return search(obj.__func__, depth + 1)
        code, cells = getattr(obj, "__code__", None), getattr(obj, "__closure__", None) or ()
        for name, cell in zip(getattr(code, "co_freevars", ()), cells):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if contents is value:
                return name
            if callable(contents) and (found := search(contents, depth + 1)) is not None:
                return found
        return None

    for fn in fns:
        found = search(fn, 0)
        if found is not None:
            return found
    return None


def _is_constant(value: Any) -> bool:
    try:
        return value.node.is_constant()
    except AttributeError:
        return False


def drop_unread_symbols(gm: torch.fx.GraphModule) -> None:
    """Remove, from every control-flow call of ``gm`` (innermost first), the symbolic-int
    operands no subgraph reads.

    :func:`closed_over_symbols` passes every symbolic size of a closed-over tensor in, as
    the branch may read it; a branch that only slices the tensor reads none, and its
    operator should not carry them (torch's capture passes only what a branch reads).
    Each such operand is removed with the placeholder bound to it in every subgraph: the
    extra operands are the trailing ones of each subgraph's inputs, so the k-th operand
    from the end is every subgraph's k-th placeholder from the end.
    """
    from ...node_facts import hop_name, subgraph_operands
    from .hops import EXTRA_OPERANDS_AT, subgraph_module

    for node in list(gm.graph.nodes):
        subs: list[torch.fx.GraphModule] = []
        for attr, _ in subgraph_operands(node):
            sub = subgraph_module(gm, attr)
            if sub is not None and all(sub is not s for s in subs):
                subs.append(sub)
        for sub in subs:
            drop_unread_symbols(sub)
        at = EXTRA_OPERANDS_AT.get(hop_name(node) or "")
        if at is None or not subs or len(node.args) <= at:
            continue
        operands = list(node.args[at])
        placeholders = [[n for n in sub.graph.nodes if n.op == "placeholder"] for sub in subs]
        keep = []
        for k, operand in enumerate(operands):
            from_end = len(operands) - k
            bound = [phs[len(phs) - from_end] for phs in placeholders if len(phs) >= from_end]
            symbolic = isinstance(operand, torch.fx.Node) and isinstance(operand.meta.get("val"), _SYMBOLIC)
            if symbolic and len(bound) == len(subs) and not any(ph.users for ph in bound):
                for sub, ph in zip(subs, bound):
                    sub.graph.erase_node(ph)
                    sub.recompile()
            else:
                keep.append(operand)
        if len(keep) != len(operands):
            args = list(node.args)
            args[at] = type(node.args[at])(keep)
            node.args = tuple(args)
