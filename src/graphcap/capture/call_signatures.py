"""Module call signatures kept for ``preserve_module_call_signature``.

For each submodule named by the user, the structure (pytree specs) of its
inputs and outputs and the graph values that flow in and out of it on its
call, so that a later unflatten (or a runtime that swaps the submodule) knows
its calling convention. Hooks record them while the program is traced.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental import proxy_tensor

from ..errors import ExportInputError
from ..signature import ConstantArgument, ModuleCallEntry, ModuleCallSignature, TensorArgument


def _graph_value(value: Any) -> Any:
    """The node that made a traced value, if any, else the value itself.

    Nodes, not names, are kept: lifting renames placeholders after tracing.
    """
    tracer = getattr(proxy_tensor._CURRENT_MAKE_FX_TRACER, "fx_tracer", None)
    if isinstance(value, torch.Tensor) and tracer is not None:
        slot = proxy_tensor.get_proxy_slot(value, tracer, None)
        if slot is not None:
            return slot.proxy.node
    return value


def _argument(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return TensorArgument(value.name)
    return ConstantArgument("", None if isinstance(value, torch.Tensor) else value)


class CallRecorder:
    """Context manager that hooks the named submodules during one trace."""

    def __init__(self, root: Optional[torch.nn.Module], fqns: Sequence[str]):
        self._root = root
        self._fqns = list(fqns or ())
        self._handles: list[Any] = []
        self._found: dict[str, dict[str, Any]] = {}
        if self._fqns and root is None:
            raise ExportInputError(
                "preserve_module_call_signature names submodules, but the exported program is a "
                "plain function with no submodules.", fix="Pass preserve_module_call_signature=().")
        if root is not None:
            modules = dict(root.named_modules(remove_duplicate=False))
            missing = [f for f in self._fqns if f not in modules]
            if missing:
                raise ExportInputError(
                    f"preserve_module_call_signature names {missing}, which are not submodules of "
                    f"{type(root).__name__}.",
                    fix=f"Use paths as in model.named_modules(); some that exist: {list(modules)[1:6]}.")
            self._modules = {f: modules[f] for f in self._fqns}

    def __enter__(self):
        for fqn, mod in getattr(self, "_modules", {}).items():
            self._handles.append(mod.register_forward_pre_hook(self._pre(fqn), with_kwargs=True))
            self._handles.append(mod.register_forward_hook(self._post(fqn), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, fqn: str):
        def hook(module, args, kwargs):
            leaves, spec = pytree.tree_flatten((args, kwargs))
            self._found.setdefault(fqn, {}).update(
                inputs=[_graph_value(v) for v in leaves], in_spec=spec)
        return hook

    def _post(self, fqn: str):
        def hook(module, args, kwargs, output):
            leaves, spec = pytree.tree_flatten(output)
            self._found.setdefault(fqn, {}).update(
                outputs=[_graph_value(v) for v in leaves], out_spec=spec)
        return hook

    def entries(self) -> list[ModuleCallEntry]:
        out = []
        for fqn in self._fqns:
            found = self._found.get(fqn)
            if found is None or "out_spec" not in found:
                out.append(ModuleCallEntry(fqn, None))  # the submodule was never called
                continue
            out.append(ModuleCallEntry(fqn, ModuleCallSignature(
                [_argument(v) for v in found["inputs"]], [_argument(v) for v in found["outputs"]],
                found["in_spec"], found["out_spec"])))
        return out
