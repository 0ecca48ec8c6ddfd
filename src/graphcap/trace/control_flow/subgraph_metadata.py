"""Make node metadata of a recorded graph and its control-flow subgraphs read as the user's program.

Stack traces lose the frames of code torch generated for a branch, subgraph
nodes take the module stack of the control-flow call that holds them followed
by the modules the branch called to make them (:func:`_branch_stack`) and, where
they have no user line, that call's source line; torch's own annotations leave
the subgraphs (:func:`clean_metadata`).
"""
from __future__ import annotations

import re
from typing import Any, Optional

import torch
import torch.fx

from ..module_paths import call_key, fqn_of_source, source_root
from .hops import subgraphs

_FRAME = re.compile(r'^\s*File "', re.M)


def _user_frames(stack_trace: Optional[str]) -> Optional[str]:
    """``stack_trace`` without the frames of code torch generated for a branch."""
    if not stack_trace:
        return stack_trace
    starts = [m.start() for m in _FRAME.finditer(stack_trace)] + [len(stack_trace)]
    frames = [stack_trace[a:b].strip("\n") for a, b in zip(starts, starts[1:])]
    kept = [f.strip() if i == 0 else f for i, f in enumerate(x for x in frames if "<eval_with_key>" not in x)]
    return "\n".join(kept) if kept else None


def _branch_stack(stack: Any, outer: dict) -> dict:
    """The module stack of a node a branch made: the stack of the control-flow call holding the
    branch (``outer``), then the modules the branch called beyond it, as a top-level node's stack
    lists them (root first, user FQNs).

    A branch's recording keeps only what it saw (graphcap's capture: the modules entered inside
    the branch, ``blk.inner``, without the root or ``blk``; dynamo's: its own paths,
    ``L['self'].blk.inner``, keyed by object ids); both are made FQNs here. A path of another
    origin (a module reached through an operand, ``L['args'][1]``) tells no FQN: the node keeps the
    call's stack."""
    out = dict(outer)
    if not stack:
        return out
    paths = {str(path) for path, _ in out.values()}
    roots = {source_root(str(path)) for path, _ in stack.values() if fqn_of_source(str(path)) == ""}
    for key, (path, cls) in stack.items():
        text = str(path)
        if text.startswith(("L[", "G[")):
            if source_root(text) not in roots or len(roots) != 1:
                return dict(outer)
            # dynamo keys a module's calls by object id, ``<id>@1`` for the second: the call's
            # number goes with the FQN, as in a recorded key
            _, at, call = str(key).partition("@")
            text = fqn_of_source(text)
            key = call_key(f"{text}@{call}" if at else text)
        if not text or text in paths:
            continue
        paths.add(text)
        out[key] = (text, cls)
    return out


def clean_metadata(gm: torch.fx.GraphModule, enclosing: Optional[torch.fx.Node] = None) -> None:
    """Make node metadata read as the user's program, subgraphs included.

    Stack traces lose frames of generated code; a subgraph node left with no
    user frame gets the trace of the control-flow call that contains it (the
    user's ``torch.cond(...)`` line). Subgraph nodes take the module stack of
    that call, followed by the modules the branch called (:func:`_branch_stack`).
    Annotations torch's own decorators leave in subgraphs (``_torchdynamo_disable``) go
    (at the top level the recorder keeps those of the user's own disabled functions).
    """
    outer_trace = enclosing.meta.get("stack_trace") if enclosing is not None else None
    for node in gm.graph.nodes:
        if "stack_trace" in node.meta:
            node.meta["stack_trace"] = _user_frames(node.meta["stack_trace"]) or outer_trace
            if node.meta["stack_trace"] is None and node.op != "call_function":
                del node.meta["stack_trace"]  # (an operator keeps its recorded "no user line")
        custom = node.meta.get("custom")
        # the recorder sorted out the annotations of the top level's operator nodes
        if isinstance(custom, dict) and (enclosing is not None or node.op in ("placeholder", "output")):
            for key in [k for k in custom if str(k).startswith("_torchdynamo")]:
                del custom[key]
            if not custom:
                del node.meta["custom"]
        if enclosing is not None and node.op not in ("placeholder", "output"):
            node.meta["nn_module_stack"] = _branch_stack(node.meta.get("nn_module_stack"),
                                                         enclosing.meta.get("nn_module_stack") or {})
    for node, sub, _ in list(subgraphs(gm)):
        clean_metadata(sub, node)
