"""Values a control-flow branch closes over, passed to the operator as operands.

A branch is recorded as its own graph; a value of the enclosing program it
uses without receiving it as an operand must become an operand, or the branch
graph would hold a value of another graph.

* Symbolic ints (``lambda: x + n`` with ``n = y.shape[0]`` or an int input
  marked dynamic) are found in the branch's closure before the call
  (:func:`closed_over_symbols`) and passed as extra trailing operands: the
  branch graph's recorder then knows them as its own inputs.
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
    seen_values = {id(v) for v in operands}
    seen_objects: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen_objects:
            return
        seen_objects.add(id(obj))
        if isinstance(obj, _SYMBOLIC):
            if id(obj) not in seen_values and not _is_constant(obj):
                seen_values.add(id(obj))
                found.append(obj)
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


def _is_constant(value: Any) -> bool:
    try:
        return value.node.is_constant()
    except AttributeError:
        return False
