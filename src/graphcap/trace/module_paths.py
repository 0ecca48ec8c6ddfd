"""Module paths of the calls a trace records, one name per call.

``nn_module_stack`` says, for every operator node, which submodule calls it
ran inside: an ordered map from a *call key* to ``(module path, class)``. The
call key names one call: ``L__self__sub`` for the first call of ``self.sub``,
``L__self__sub@1`` for its second, ``L__self__sub.linear@1`` for the linear
inside that second call, ``L__self__`` for the root. Consumers of the program
(torch's ``unflatten`` among them) read the ``@N`` suffix to tell the calls of
a module apart and the path to find the module.

Two things make the path right:

- The recorder's tracer names a module by the attribute path it was reached
  through only for modules reached as attributes of a module it already
  follows. The user's root is therefore held by a scope module
  (:class:`ScopeRoot`) and reached as its attribute while tracing; then a
  module shared under two names (``self.a`` is ``self.b``) is recorded under
  the name each call used, not the first name found.
- The scope's attribute is removed from every recorded path and key
  afterwards (:func:`normalize_module_stacks`), so paths are the user's FQNs.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

import torch

from ..torch_private.fx import current_make_fx_tracer

ROOT_ATTR = "_graphcap_root"
CALL_KEY_PREFIX = "L__self__"  # what torch.export writes before the call name


class ScopeRoot(torch.nn.Module):
    """Holds the user's module as its only child, for the recorder's tracer to start from."""

    def __init__(self, root: torch.nn.Module):
        super().__init__()
        setattr(self, ROOT_ATTR, root)


def traced_call(scope: ScopeRoot, call: Callable[..., Any], root: torch.nn.Module) -> Callable[..., Any]:
    """``call`` (the root itself or a method bound to it) reached through ``scope``.

    Must run while the tracer is recording: reading the attribute is what lets
    the tracer follow the access paths below it.
    """
    reached = getattr(scope, ROOT_ATTR)
    if call is root:
        return reached
    func = getattr(call, "__func__", None)
    if func is not None and getattr(call, "__self__", None) is root:
        return func.__get__(reached)  # the method, on the module as the tracer reached it
    return call


def strip_scope(path: str) -> str:
    """A recorded path or call name without the scope's attribute: the user's FQN."""
    if path == ROOT_ATTR:
        return ""
    if path.startswith(ROOT_ATTR + "."):
        return path[len(ROOT_ATTR) + 1:]
    if path.startswith(ROOT_ATTR + "@"):
        return path[len(ROOT_ATTR):]
    return path


def _in_scope(path: Any) -> bool:
    return isinstance(path, str) and (path == ROOT_ATTR or path.startswith((ROOT_ATTR + ".", ROOT_ATTR + "@")))


def call_key(call_name: str) -> str:
    """The ``nn_module_stack`` key of a call (``sub@1`` -> ``L__self__sub@1``; the root's is ``L__self__``)."""
    return CALL_KEY_PREFIX + call_name


def call_name_of_key(key: str) -> Optional[str]:
    """The call name a ``nn_module_stack`` key names (``L__self__sub@1`` -> ``sub@1``); None for a
    key of another origin."""
    return key[len(CALL_KEY_PREFIX):] if key.startswith(CALL_KEY_PREFIX) else None


def split_call_name(call_name: str) -> tuple[str, int]:
    """``"sub@1"`` -> ``("sub", 1)``; ``"sub"`` -> ``("sub", 0)``."""
    base, at, index = call_name.rpartition("@")
    if at and index.isdigit():
        return base, int(index)
    return call_name, 0


_SOURCE_ROOT = re.compile(r"^L\[['\"][^'\"]+['\"]\]")


def source_root(path: str) -> Optional[str]:
    """The root of dynamo's name of a module (``L['self']`` of ``L['self'].layers[0]``), or None
    for a path of another form."""
    found = _SOURCE_ROOT.match(path)
    return found.group(0) if found else None


def fqn_of_source(path: str) -> str:
    """dynamo's name of a submodule (``L['self'].layers[0]``, ``getattr(L['self'].a, '0')``,
    ``L['self']._modules['conv']``) as an FQN (``layers.0``)."""
    text = path
    while True:  # getattr(X, 'name') -> X.name
        new = re.sub(r"getattr\(([^()]*?),\s*['\"]([^'\"]+)['\"]\)", r"\1.\2", text)
        if new == text:
            break
        text = new
    text = _SOURCE_ROOT.sub("", text)
    text = re.sub(r"\._(?:modules|parameters|buffers)\[['\"]([^'\"]+)['\"]\]", r".\1", text)
    text = re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", text)
    return text.strip(".")


def normalize_module_stacks(gm: torch.fx.GraphModule) -> None:
    """Rewrite the recorded stacks of ``gm`` and its subgraphs to user FQNs and call keys.

    Entries recorded under the scope become ``call_key(name) -> (fqn, class)``;
    entries of any other origin (torch's branch capture writes its own) stay.
    """
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if not stack:
                continue
            rewritten = {}
            for key, (path, cls) in stack.items():
                if _in_scope(path):
                    key, path = call_key(strip_scope(key)), strip_scope(path)
                rewritten[key] = (path, cls)
            node.meta["nn_module_stack"] = rewritten


def current_call_name() -> Optional[str]:
    """The call name (``sub@1``) of the innermost module call running in the recorder now.

    None outside a recording, or where the running tracer keeps no module stack.
    """
    tracer = getattr(current_make_fx_tracer(), "fx_tracer", None)
    stack = getattr(tracer, "module_stack", None)
    if not stack:
        return None
    key = next(reversed(stack))
    return strip_scope(key) if _in_scope(stack[key][0]) else None
