"""torch.fx and the proxy-tensor tracer, where graphcap reaches past their public surface.

- ``torch.fx.graph._PyTreeCodeGen`` / ``_PyTreeInfo``: the code generator that
  gives ``module()``'s graph the user's own signature (flatten the arguments,
  rebuild the outputs), installed through the private ``Graph._codegen``.
- ``Graph._graph_namespace._rename_object``: keeps fx's name table in step when
  a node is renamed, so later nodes do not reuse the old name.
- ``torch.fx.proxy._STACK_TRACE_ANCHORS`` / ``_register_stack_trace_anchor``:
  functions whose frames count as user frames in ``stack_trace``.
- ``proxy_tensor._CURRENT_MAKE_FX_TRACER``: the running ``make_fx`` tracer.
- A traced function's ``_orig_mod``: the module ``make_fx`` records
  ``nn_module_stack`` against.
- ``Interpreter._set_current_node``: sets the node whose metadata new nodes copy.
- ``torch.fx.passes.shape_prop._extract_tensor_metadata``.
- ``torch._functorch.predispatch``: functions the pre-dispatch tracer records.
"""
from __future__ import annotations

from typing import Any, Callable

import torch.fx
from torch.fx.experimental import proxy_tensor

RELIES_ON = {
    "torch.fx.graph._PyTreeCodeGen": ("pytree_info",),
    "torch.fx.graph._PyTreeInfo": ("orig_args", "in_spec", "out_spec"),
    "torch.fx.Graph#_codegen": None,
    "torch.fx.Graph#_graph_namespace": None,
    "torch.fx.graph._Namespace._rename_object": ("self", "obj", "name"),
    "torch.fx.proxy._STACK_TRACE_ANCHORS": None,
    "torch.fx.proxy._register_stack_trace_anchor": ("fn",),
    "torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER": None,
    "torch.fx.Interpreter._set_current_node": ("self", "node"),
    "torch.fx.passes.shape_prop._extract_tensor_metadata": ("result",),
    "torch._functorch.predispatch": None,
    "torch._functorch.predispatch._add_batch_dim": (),
    "torch._functorch.predispatch._vmap_increment_nesting": (),
    "torch.amp.autocast_mode._enter_autocast": (),
    "torch.amp.autocast_mode._exit_autocast": (),
}

__all__ = ["set_pytree_codegen", "rename_in_namespace", "stack_trace_anchors", "register_stack_trace_anchor",
           "current_make_fx_tracer", "set_module_stack_root", "interpreting_node", "extract_tensor_metadata",
           "predispatch_functions"]


def set_pytree_codegen(graph: torch.fx.Graph, arg_names: list[str], in_spec: Any, out_spec: Any) -> None:
    """Make ``graph``'s generated ``forward`` take ``arg_names``, flatten them by ``in_spec``, rebuild outputs by ``out_spec``.

    Relies on ``torch.fx.graph._PyTreeCodeGen(_PyTreeInfo(orig_args, in_spec, out_spec))``
    assigned to the field ``Graph._codegen``.
    """
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    graph._codegen = _PyTreeCodeGen(_PyTreeInfo(arg_names, in_spec, out_spec))


def rename_in_namespace(node: torch.fx.Node, name: str) -> None:
    """Record in ``node``'s graph that ``node`` is now called ``name`` (after setting ``node.name``).

    Relies on ``Graph._graph_namespace._rename_object(obj, name)``.
    """
    node.graph._graph_namespace._rename_object(node, name)


def stack_trace_anchors() -> set[tuple[str, str]]:
    """The live set of ``(file, function)`` pairs whose frames fx keeps in a node's stack trace.

    Relies on the module global ``torch.fx.proxy._STACK_TRACE_ANCHORS``.
    """
    return torch.fx.proxy._STACK_TRACE_ANCHORS


def register_stack_trace_anchor(fn: Callable[..., Any]) -> None:
    """Count ``fn``'s frames as user frames in recorded stack traces.

    Relies on ``torch.fx.proxy._register_stack_trace_anchor(fn)``.
    """
    torch.fx.proxy._register_stack_trace_anchor(fn)


def current_make_fx_tracer() -> Any:
    """The ``make_fx`` tracer running now (its ``fx_tracer`` records nodes), or None.

    Relies on the module global ``proxy_tensor._CURRENT_MAKE_FX_TRACER`` (read at call time).
    """
    return proxy_tensor._CURRENT_MAKE_FX_TRACER


def set_module_stack_root(fn: Callable[..., Any], module: Any) -> None:
    """Have ``make_fx(fn)`` record ``nn_module_stack`` against ``module``'s tree.

    Relies on ``make_fx`` reading the attribute ``_orig_mod`` of the function it traces.
    """
    fn._orig_mod = module


def interpreting_node(interpreter: torch.fx.Interpreter, node: torch.fx.Node) -> Any:
    """A context manager: within it, nodes the interpreter's tracer creates copy ``node``'s metadata.

    Relies on ``Interpreter._set_current_node(self, node)``.
    """
    return interpreter._set_current_node(node)


def extract_tensor_metadata(value: Any) -> Any:
    """fx's ``TensorMetadata`` of a tensor (``meta["tensor_meta"]``).

    Relies on ``torch.fx.passes.shape_prop._extract_tensor_metadata(result)``.
    """
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    return _extract_tensor_metadata(value)


_PREDISPATCH_NAMES = ("_add_batch_dim", "_remove_batch_dim", "_vmap_increment_nesting", "_vmap_decrement_nesting",
                      "lazy_load_decompositions", "_make_dual", "_unpack_dual", "_jvp_increment_nesting",
                      "_jvp_decrement_nesting", "_unwrap_for_grad", "_enter_dual_level", "_exit_dual_level")


def predispatch_functions() -> set[Any]:
    """Python functions the pre-dispatch tracer records as calls of their own (vmap/jvp levels, autocast).

    Relies on the functions of ``torch._functorch.predispatch`` named above (the
    ones present) and ``torch.amp.autocast_mode._enter_autocast`` / ``_exit_autocast``.
    """
    import torch._functorch.predispatch as predispatch
    from torch.amp import autocast_mode
    found = {getattr(predispatch, n) for n in _PREDISPATCH_NAMES if hasattr(predispatch, n)}
    found |= {getattr(autocast_mode, n) for n in ("_enter_autocast", "_exit_autocast") if hasattr(autocast_mode, n)}
    return found
