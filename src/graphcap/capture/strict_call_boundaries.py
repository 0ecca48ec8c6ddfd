"""Call boundaries of preserved submodules in strict capture.

Non-strict capture sees a preserved submodule's calls happen (module hooks in
``graphcap.capture.call_signatures``). Strict capture does not: dynamo inlines
every submodule call into one graph, and graphcap then replays that graph,
where no submodule is called any more. So the boundary is written into
dynamo's graph instead:

- while dynamo reads the program, each preserved submodule carries a forward
  pre-hook and a forward hook (dynamo traces hooks as part of the call). Each
  passes the call's ``(args, kwargs)`` / output through a *boundary marker*: a
  graphcap function dynamo is told to put into its graph as one call (
  ``torch.compiler.allow_in_graph``), with the structure as its argument and
  the tensor leaves as its result. Downstream code uses the marker's results,
  so the marker stays where the call starts and ends, inside the call's module
  stack;
- the replay (``graphcap.capture.strict``) reports each marker it meets to the
  trace's call recorder, with the call name its module stack gives (``sub``,
  ``sub@1``), and returns the very values it was given. The recorder writes the
  same call signatures as in non-strict capture; the marker records no
  operator, so the program holds no trace of it.

A marker function is made per export; dynamo's registration of it ends when
the function is garbage collected (``allow_in_graph`` ties it to the
function's life), so nothing stays registered in the process.
Inputs and outputs of a preserved submodule must be tensors, Python scalars,
None, or lists, tuples, named tuples and dicts of them in strict mode: dynamo
passes only those to a function it puts into its graph (other structures are
refused by :func:`refused_at_boundary`, naming the call).
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx import immutable_collections

from ..errors import StrictCaptureError
from ..signature import call_graph_of
from ..torch_private import dynamo as dynamo_private
from ..torch_private import pytree


def _tensor_leaves(tree: Any) -> tuple:
    return tuple(v for v in pytree.tree_leaves(tree) if isinstance(v, torch.Tensor))


def _new_marker() -> Callable[[str, bool, Any], tuple]:
    def graphcap_call_boundary(fqn: str, entering: bool, tree: Any) -> tuple:
        """Where a preserved submodule's call starts (``entering``) or ends: the tensors of ``tree``."""
        return _tensor_leaves(tree)
    torch.compiler.allow_in_graph(graphcap_call_boundary)
    return graphcap_call_boundary


def _through(marker: Callable[..., tuple], fqn: str, entering: bool, tree: Any) -> Any:
    """``tree`` with its tensors replaced by the marker's results (same structure, same constants)."""
    leaves, spec = pytree.tree_flatten(tree)
    marked = iter(marker(fqn, entering, tree))
    return pytree.tree_unflatten([next(marked) if isinstance(v, torch.Tensor) else v for v in leaves], spec)


@contextlib.contextmanager
def marked_calls(modules: dict[str, torch.nn.Module]) -> Iterator[Callable[..., tuple] | None]:
    """For the block (dynamo's read of the program), each call of the ``modules`` (FQN -> module)
    passes its inputs and outputs through one boundary marker, which is yielded; None when there
    is no module to mark. The hooks are removed after."""
    if not modules:
        yield None
        return
    marker = _new_marker()
    handles = []

    def hooks(fqn: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
        def enter(module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
            return _through(marker, fqn, True, (args, kwargs))

        def leave(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            return _through(marker, fqn, False, output)
        return enter, leave

    try:
        for fqn, module in modules.items():
            enter, leave = hooks(fqn)
            # after the module's own hooks, as non-strict capture's recorder
            handles.append(module.register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(module.register_forward_hook(leave, with_kwargs=True))
        yield marker
    finally:
        for handle in handles:
            handle.remove()


def refused_at_boundary(e: BaseException, target: Any, modules: dict[str, torch.nn.Module]) -> Any:
    """dynamo's refusal, when it refused a boundary marker (a preserved submodule took or gave a
    structure it cannot pass to a function in its graph: a dataclass, a custom class), as an
    error in the user's terms; None when dynamo refused something else."""
    frames = dynamo_private.user_stack_of(e)
    if not any(f.filename == __file__ for f in frames):
        return None
    user = [f for f in frames if f.filename != __file__ and not _in_torch(f.filename)]
    where = None
    if user:
        f = user[-1]
        where = f'File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line.strip()}" if f.line else "")
    names = ", ".join(f"'{n}'" for n in modules)
    return StrictCaptureError.like(
        e, f"strict=True cannot keep the call signature of {names} in {target.name}: a call passes or "
           f"returns a structure other than tensors, Python scalars, None, and tuples, named tuples, "
           f"lists and dicts of them (a dataclass or another registered class), which dynamo cannot "
           f"hand to graphcap's call-boundary marker.",
        where=where,
        fix="Export with strict=False, which preserves such calls, or pass the submodule plain "
            "containers (its fields as a tuple or dict).")


def _in_torch(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(torch.__file__)) in os.path.abspath(filename)


def marked_in_branches(gm: torch.fx.GraphModule, marker: Any) -> set[str]:
    """The preserved submodules whose boundary markers dynamo put inside a control-flow branch's
    graph (``torch.cond``): the replay hands those graphs to graphcap's branch capture whole, so
    it does not meet their markers."""
    return {node.args[0] for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule) and sub is not gm
            for node in sub.graph.nodes if node.op == "call_function" and node.target is marker}


def warn_unrecorded_calls(ep: Any, in_branches: set[str]) -> None:
    """Warn about preserved submodules called in a branch whose call signature is not recorded."""
    recorded = {e.fqn for e in call_graph_of(ep) if e.signature is not None}
    lost = sorted(fqn for fqn in in_branches if fqn not in recorded)
    if lost:
        warnings.warn(
            f"strict=True: the call signature of {lost} is not recorded (called inside a control-flow "
            f"branch, which strict capture takes whole), so unflatten of this program inlines those calls "
            f"and cannot swap them. Export with strict=False to keep them.", stacklevel=5)


def passes_through(tree: Any) -> tuple:
    """What a marker returns when the replay meets it: the tensors it was given, unchanged."""
    return _tensor_leaves(tree)


def as_called(tree: Any) -> Any:
    """A marker's argument as the program built it: fx keeps a node's list and dict arguments
    as its immutable list and dict types, which the call signature must not name."""
    if isinstance(tree, immutable_collections.immutable_list):
        return [as_called(v) for v in tree]
    if isinstance(tree, immutable_collections.immutable_dict):
        return {k: as_called(v) for k, v in tree.items()}
    if type(tree) is tuple:
        return tuple(as_called(v) for v in tree)
    if type(tree) is list:
        return [as_called(v) for v in tree]
    if type(tree) is dict:
        return {k: as_called(v) for k, v in tree.items()}
    return tree
