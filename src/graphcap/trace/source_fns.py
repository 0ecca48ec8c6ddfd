"""``source_fn_stack``: what the user called that made a node, in the form tools read it.

Source-partition tools (``torch.fx.passes.utils.source_matcher_utils.get_source_partitions``,
which pt2e quantizers and ExecuTorch backend passes call) group nodes by the last entry of a
node's ``source_fn_stack`` and compare its second item with the classes and functions they
want (``torch.nn.Conv2d``, ``torch.nn.functional.gelu``, ``operator.add``). So each entry holds
the object itself, as torch's strict capture records it: the innermost module call that made the
node when that module is one of ``torch.nn``'s (keyed by that call, so the nodes of one call are
one partition), else the function called (a user's module running ``x + y`` itself gives
``operator.add``, not the ``nn.Sequential`` holding that module); a tensor method is named by a
string, as torch names it.

The recorder keeps only names (``torch_fn``: ``('gelu_1', 'builtin_function_or_method.gelu')``,
``nn_module_stack``: class paths), so the objects are found again by name among modules already
imported (nothing is imported for it: a loaded file names them too, see ``resolve``).
"""
from __future__ import annotations

import functools
import operator
import sys
from typing import Any, Optional

import torch

# where the functions a user calls live; the recorded kind picks between namesakes (F.relu is a
# Python function, torch.relu a builtin)
_FUNCTION_HOMES = ("torch.nn.functional", "torch", "torch._C._nn", "torch._C._linalg", "torch._C._special",
                   "torch._C._fft")
# tensor methods and Python operators torch's capture records as the operator module's function
_OPERATOR_METHODS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
                     "matmul": operator.matmul, "neg": operator.neg, "__getitem__": operator.getitem,
                     "__add__": operator.add, "__radd__": operator.add, "__sub__": operator.sub,
                     "__rsub__": operator.sub, "__mul__": operator.mul, "__rmul__": operator.mul,
                     "__truediv__": operator.truediv, "__rtruediv__": operator.truediv,
                     "__floordiv__": operator.floordiv, "__matmul__": operator.matmul, "__neg__": operator.neg,
                     "__pow__": operator.pow, "__mod__": operator.mod}


def source_fn_stack(node: torch.fx.Node) -> list[tuple[str, Any]]:
    """The one-entry ``source_fn_stack`` of an operator node (see the module docstring)."""
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        # the innermost call only: an operator a user's module runs itself (``x + self.conv(x)`` in a
        # block held by an ``nn.Sequential``) is the user's call, not the outer container's
        key, entry = next(reversed(stack.items()))
        module_class = _torch_nn_class(entry[1])
        if module_class is not None:
            return [(key, module_class)]
    torch_fn = node.meta.get("torch_fn")
    if torch_fn is None:
        return [(node.name, str(node.target))]
    return [(torch_fn[0], _called(torch_fn[1]))]


def _torch_nn_class(cls: Any) -> Optional[type]:
    """The class of a module on the stack when it is one of ``torch.nn``'s own, else None."""
    if isinstance(cls, type):
        return cls if cls.__module__.startswith("torch.nn.modules.") else None
    return _torch_nn_class_named(cls) if isinstance(cls, str) else None


@functools.cache  # once per class path: every node of every program asks
def _torch_nn_class_named(path: str) -> Optional[type]:
    if not path.startswith("torch.nn.modules."):
        return None
    found = resolve(path)
    return found if isinstance(found, type) else None


@functools.cache  # once per recorded function name
def _called(kind_and_name: str) -> Any:
    """``'builtin_function_or_method.gelu'`` → ``torch.nn.functional.gelu``; a tensor method → its name."""
    kind, _, name = kind_and_name.partition(".")
    if name in _OPERATOR_METHODS and kind in ("method_descriptor", "wrapper_descriptor"):
        return _OPERATOR_METHODS[name]
    if kind in ("builtin_function_or_method", "function"):
        for home in _FUNCTION_HOMES:  # the first of the recorded kind: torch.relu, not F.relu
            fn = getattr(sys.modules.get(home), name, None)
            if type(fn).__name__ == kind:
                return fn
    return name if kind in ("method_descriptor", "wrapper_descriptor", "method-wrapper") else kind_and_name


def name_in_file(obj: Any) -> str:
    """How an entry's object is written to a file: ``torch.nn.modules.linear.Linear``,
    ``torch._C._nn.gelu``, ``_operator.add``; a string as it is."""
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None) or "torch"
    for name in (getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)):
        for home in (module, *_FUNCTION_HOMES):  # torch.cat's own names are torch._VariableFunctionsClass.cat
            if name and resolve(f"{home}.{name}") is obj:
                return f"{home}.{name}"
    return str(obj)


def resolve(name: str) -> Any:
    """The object a qualified name written by :func:`name_in_file` stands for, looked up among
    torch's and the operator module's modules already imported (a file never makes graphcap
    import anything); the name itself when there is none."""
    if not name.startswith(("torch.", "_operator.", "operator.")):
        return name
    module_name, _, attr = name.rpartition(".")
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for part in attr.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return name
            return obj
        module_name, _, head = module_name.rpartition(".")
        attr = f"{head}.{attr}"
    return name
