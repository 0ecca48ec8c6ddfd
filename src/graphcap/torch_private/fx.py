"""torch.fx and the proxy-tensor tracer, where graphcap reaches past their public surface.

- ``torch.fx.graph._PyTreeCodeGen`` / ``_PyTreeInfo``: the code generator that
  gives ``module()``'s graph the user's own signature (flatten the arguments,
  rebuild the outputs), installed through the private ``Graph._codegen``.
- ``Graph._graph_namespace`` (``_rename_object``, ``_used_names``) and
  ``Node._rename``: renaming nodes with fx's name table kept in step, so later
  nodes do not reuse an old name.
- ``torch.fx.proxy._STACK_TRACE_ANCHORS``:
  functions whose frames count as user frames in ``stack_trace``.
- ``proxy_tensor._CURRENT_MAKE_FX_TRACER``: the running ``make_fx`` tracer, and
  through it the recording's graph and tensor tracker (what a control-flow
  call's closed-over tensors are read from).
- A traced function's ``_orig_mod``: the module ``make_fx`` records
  ``nn_module_stack`` against.
- ``Interpreter._set_current_node``: sets the node whose metadata new nodes copy.
- ``torch.fx.passes.shape_prop._extract_tensor_metadata``.
- ``torch.fx._lazy_graph_module``: graph modules whose Python code is generated
  on first use, for the recorder's graph, which lifting replaces unused.
- ``PythonKeyTracer.create_node`` and the tracer's ``record_stack_traces``: the stack trace torch
  formats for a placeholder or output node and then deletes, skipped.
- ``torch._functorch.predispatch`` and the autocast markers
  (``torch.amp.autocast_mode._enter_autocast`` / ``_exit_autocast``): functions
  the pre-dispatch tracer records.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

import torch.fx
from torch.fx.experimental import proxy_tensor

from .thread_scoped import ThreadScopedPatch

RELIES_ON = {
    "torch.fx.graph._PyTreeCodeGen": ("pytree_info",),
    "torch.fx.graph._PyTreeInfo": ("orig_args", "in_spec", "out_spec"),
    "torch.fx.Graph#_codegen": None,
    "torch.fx.graph._PyTreeCodeGen.gen_var_bindings": ("self", "fn_args", "free_vars", "expanded_def"),
    "torch.fx.graph._PyTreeCodeGen.generate_output": ("self", "output_args"),
    "torch.fx.graph._PyTreeCodeGen.process_outputs": ("self", "out"),
    "torch.fx.graph._PyTreeCodeGen.additional_globals": ("self",),
    "torch.fx.graph.CodeGen._gen_python_code": ("self", "nodes", "root_module", "namespace"),
    "torch.fx.GraphModule.recompile": ("self",),
    "torch.fx.Graph#_graph_namespace": None,
    "torch.fx.graph._Namespace._rename_object": ("self", "obj", "name"),
    "torch.fx.graph._Namespace#_used_names": None,
    "torch.fx.Node._rename": ("self", "candidate"),
    "torch.fx.proxy._STACK_TRACE_ANCHORS": None,
    "torch.fx.experimental.proxy_tensor._CURRENT_MAKE_FX_TRACER": None,
    "torch.fx.experimental.proxy_tensor._MakefxTracer#fx_tracer": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#tensor_tracker": None,
    "torch.fx.experimental.proxy_tensor._ProxyTensor#proxy": None,
    "torch.fx.Interpreter._set_current_node": ("self", "node"),
    "torch.fx.passes.shape_prop._extract_tensor_metadata": ("result",),
    "torch.fx.Graph._target_to_str": ("self", "target"),
    "torch._functorch.predispatch": None,
    "torch._functorch.predispatch._add_batch_dim": (),
    "torch._functorch.predispatch._vmap_increment_nesting": (),
    "torch.amp.autocast_mode._enter_autocast": (),
    "torch.amp.autocast_mode._exit_autocast": (),
    "torch.autograd.grad_mode._enter_inference_mode": ("mode",),
    "torch.autograd.grad_mode._exit_inference_mode": ("mode",),
    "torch.fx._lazy_graph_module._use_lazy_graph_module": ("should_use",),
    "torch.fx._lazy_graph_module._LazyGraphModule": None,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer.create_node": ("self", "kind", "target", "args", "kwargs"),
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer#record_stack_traces": None,
    "torch.fx.experimental.proxy_tensor._ModuleStackTracer#proxy_paths": None,
    "torch.fx.experimental.proxy_tensor._ModuleStackTracer#proxy_modules": None,
}


# Entries older supported torch lines lack (the first release that has each); see stack_trace_anchors
SINCE = {"torch.fx.proxy._STACK_TRACE_ANCHORS": "2.13"}


def _sample_namespace() -> Any:
    return torch.fx.Graph()._graph_namespace


def _sample_make_fx_tracer() -> Any:
    return proxy_tensor._MakefxTracer(decomposition_table=None, tracing_mode="real", _allow_non_fake_inputs=False,
                                      pre_dispatch=False, record_module_stack=False, _allow_fake_constant=False,
                                      _error_on_data_dependent_ops=False)


SAMPLES = {
    "torch.fx.graph._Namespace": _sample_namespace,
    "torch.fx.experimental.proxy_tensor._MakefxTracer": _sample_make_fx_tracer,
    "torch.fx.experimental.proxy_tensor.PythonKeyTracer": lambda: proxy_tensor.PythonKeyTracer(),
    "torch.fx.experimental.proxy_tensor._ProxyTensor": lambda: proxy_tensor._ProxyTensor(proxy=None, constant=None),
    "torch.fx.experimental.proxy_tensor._ModuleStackTracer":
        lambda: proxy_tensor._ModuleStackTracer(torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())),
}

__all__ = ["set_pytree_codegen", "own_pytree_info_reads",
           "rename_in_namespace", "rename_node", "rename_node_reusing", "stack_trace_anchors",
           "stack_trace_anchor", "current_make_fx_tracer", "current_recording", "recorded_node",
           "share_module_proxies",
           "set_module_stack_root",
           "current_fx_tracer", "tracked_as_constant", "operator_node_name", "interpreting_node",
           "extract_tensor_metadata", "autocast_markers", "inference_mode_markers",
           "predispatch_functions", "code_generated_on_first_use", "dropped_stack_traces_skipped",
           "generate_code_of_submodules",
           "plain_graph_module"]


def set_pytree_codegen(graph: torch.fx.Graph, arg_names: list[str], in_spec: Any, out_spec: Any,
                       own_walks: bool = False) -> None:
    """Make ``graph``'s generated ``forward`` take ``arg_names``, flatten them by ``in_spec``, rebuild outputs by
    ``out_spec``.

    ``own_walks`` makes the generated code take inputs apart and build outputs
    with graphcap's walks (``graphcap.auto_flatten``) instead of torch's pytree:
    needed when the structure has a class graphcap flattens by its attributes,
    which is a torch pytree node only while a trace runs. Such a generator
    hands the structure over to torch (``auto_flatten.register_for_torch``)
    when code other than fx's code generation and graphcap's own reads its
    ``pytree_info``: AOTInductor reads ``module()``'s specs there and writes
    them with torch's pytree (see :func:`own_pytree_info_reads`).

    Relies on ``torch.fx.graph._PyTreeCodeGen(_PyTreeInfo(orig_args, in_spec, out_spec))``
    assigned to the field ``Graph._codegen``, and for ``own_walks`` on the
    generator's overridable steps (``gen_var_bindings``, ``generate_output``,
    ``process_outputs``, ``additional_globals``, ``_gen_python_code``), the field
    ``pytree_info`` that torch's code reads, and the names it writes
    (``fx_pytree.tree_flatten_spec(``, ``pytree.tree_unflatten(``).
    """
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    codegen = _own_walks_codegen() if own_walks else _PyTreeCodeGen
    graph._codegen = codegen(_PyTreeInfo(arg_names, in_spec, out_spec))


_RECOMPILE_CODE = torch.fx.GraphModule.recompile.__code__
_OWN_READS = threading.local()  # .depth: graphcap's (or fx's code generation's) reads in progress


@contextlib.contextmanager
def own_pytree_info_reads() -> Iterator[None]:
    """Within the block, reading an own-walks generator's ``pytree_info`` (in this thread) is
    graphcap's own read, or fx generating a module's code: nothing is handed over to torch's
    pytree registry."""
    _OWN_READS.depth = getattr(_OWN_READS, "depth", 0) + 1
    try:
        yield
    finally:
        _OWN_READS.depth -= 1


def _own_walks_codegen() -> type:
    """torch's pytree code generator with graphcap's flatten/unflatten in place of torch's."""
    from torch.fx.graph import _PyTreeCodeGen

    from .. import auto_flatten

    class OwnWalksCodeGen(_PyTreeCodeGen):
        _FLATTEN, _UNFLATTEN = "graphcap_flatten_by_spec", "graphcap_unflatten"

        @property  # type: ignore[override]
        def pytree_info(self) -> Any:
            """The structure; read by code other than graphcap's, it is handed over to torch.
            fx's ``GraphModule.recompile`` (of any module over this graph: ``module()``'s, pt2e's)
            only copies the specs for the generated code, which passes them to graphcap's walks."""
            if not getattr(_OWN_READS, "depth", 0) and sys._getframe(1).f_code is not _RECOMPILE_CODE:
                auto_flatten.register_for_torch(self._info.in_spec)
                auto_flatten.register_for_torch(self._info.out_spec)
            return self._info

        @pytree_info.setter
        def pytree_info(self, info: Any) -> None:
            self._info = info

        def _gen_python_code(self, *args: Any, **kwargs: Any) -> Any:
            with own_pytree_info_reads():
                return super()._gen_python_code(*args, **kwargs)

        def process_outputs(self, out: Any) -> Any:
            if self._info is None or self._info.out_spec is None:
                return out
            return auto_flatten.unflatten(out if isinstance(out, (list, tuple)) else [out], self._info.out_spec)

        def additional_globals(self) -> list[tuple[str, Any]]:
            return [*super().additional_globals(), (self._FLATTEN, auto_flatten.flatten_by_spec),
                    (self._UNFLATTEN, auto_flatten.unflatten)]

        def gen_var_bindings(self, fn_args, free_vars, expanded_def):
            code = super().gen_var_bindings(fn_args, free_vars, expanded_def)
            return code.replace("fx_pytree.tree_flatten_spec(", f"{self._FLATTEN}(")

        def generate_output(self, output_args, *args, **kwargs):
            code = super().generate_output(output_args, *args, **kwargs)
            return code.replace("pytree.tree_unflatten(", f"{self._UNFLATTEN}(")

    return OwnWalksCodeGen


def rename_in_namespace(node: torch.fx.Node, name: str) -> None:
    """Record in ``node``'s graph that ``node`` is now called ``name`` (after setting ``node.name``).

    Relies on ``Graph._graph_namespace._rename_object(obj, name)``.
    """
    node.graph._graph_namespace._rename_object(node, name)


def rename_node(node: torch.fx.Node, name: str) -> None:
    """Rename an fx node (to ``name`` if free in its graph, else a numbered variant).
    Relies on ``torch.fx.Node._rename(candidate)``."""
    node._rename(name)


def rename_node_reusing(graph: torch.fx.Graph, node: torch.fx.Node, name: str) -> None:
    """Rename ``node`` to ``name``, which an erased node of ``graph`` held (fx never frees
    names by itself). Relies on ``Graph._graph_namespace._used_names`` and ``Node._rename``."""
    graph._graph_namespace._used_names.discard(name)
    node._rename(name)


def stack_trace_anchors() -> set[tuple[str, str]]:
    """The live set of ``(file, function)`` pairs whose frames fx keeps in a node's stack trace.

    Relies on the module global ``torch.fx.proxy._STACK_TRACE_ANCHORS`` (torch 2.13 on, SINCE).
    An older torch has no such set: its tracers keep ``forward`` frames only, and the set returned
    is graphcap's own, read by graphcap's recorder (the top-level graph) alone.
    """
    return getattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", _OWN_STACK_TRACE_ANCHORS)


_OWN_STACK_TRACE_ANCHORS: set[tuple[str, str]] = set()


@contextlib.contextmanager
def stack_trace_anchor(fn: Any) -> Iterator[None]:
    """Make ``fn``'s frames count as user frames in recorded stack traces, for the block only.

    torch keeps the anchors in a process-wide set (:func:`stack_trace_anchors`) that its
    own tracers read too; an anchor added here is taken out again (one the set already had stays).
    """
    anchors = stack_trace_anchors()
    code = getattr(fn, "__code__", None)
    key = (code.co_filename, code.co_name) if code is not None else None
    added = key is not None and key not in anchors
    if added:
        anchors.add(key)
    try:
        yield
    finally:
        if added:
            anchors.discard(key)


def current_make_fx_tracer() -> Any:
    """The ``make_fx`` tracer running now (its ``fx_tracer`` records nodes), or None.

    Relies on the module global ``proxy_tensor._CURRENT_MAKE_FX_TRACER`` (read at call time).
    """
    return proxy_tensor._CURRENT_MAKE_FX_TRACER


def current_recording() -> Optional[tuple[torch.fx.Graph, Any]]:
    """(graph, tensor tracker) of the make_fx recording running now (a branch's while one is
    traced), or None: what a control-flow call's closed-over tensors are read from.

    Relies on :func:`current_make_fx_tracer` (set for the top-level trace and for each
    subgraph trace), its ``fx_tracer`` and that tracer's ``graph`` and ``tensor_tracker``
    (a weak map from each tensor the recording made or took as input to its ``_ProxyTensor``).
    """
    fx_tracer = getattr(current_make_fx_tracer(), "fx_tracer", None)
    tracker = getattr(fx_tracer, "tensor_tracker", None)
    if fx_tracer is None or tracker is None:
        return None
    return fx_tracer.graph, tracker


def current_fx_tracer() -> Any:
    """The fx tracer of the ``make_fx`` recording running now (what a tensor's node is tracked
    under), or None. Relies on :func:`current_make_fx_tracer` and its ``fx_tracer``."""
    return getattr(current_make_fx_tracer(), "fx_tracer", None)


class _WithParentEntries(weakref.WeakKeyDictionary):
    """A tracer's table of module proxies that also answers with its parent tracer's entries,
    those made before and those made while the branch runs."""

    def __init__(self, own: Any, parent: Any):
        super().__init__()
        self.update(own)
        self._parent = parent

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return self._parent[key]

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(key) or key in self._parent


def share_module_proxies(parent: Any) -> None:
    """Let the fx tracer running now (a control-flow branch's) find the module proxies that
    ``parent`` (the tracer of the code that made the call) hands out.

    A model holding one module under two names is traced with proxies standing for its modules
    (``_ModuleStackTracer``'s ``AttrProxy``, each with the path it was reached by). A branch
    function closes over such proxies (``self.lin`` in ``lambda t: self.lin(t)``; reading
    ``self.lin`` makes the proxy in the parent's tables), but torch traces the branch with a new
    tracer whose tables (``proxy_paths``, ``proxy_modules``) are empty, so calling the module
    failed with a ``KeyError``. The running tracer's tables fall back to the parent's.
    """
    current = current_fx_tracer()
    if current is None or parent is None or current is parent:
        return
    for table in ("proxy_paths", "proxy_modules"):
        mine, theirs = getattr(current, table, None), getattr(parent, table, None)
        if isinstance(mine, weakref.WeakKeyDictionary) and isinstance(theirs, weakref.WeakKeyDictionary) \
                and not isinstance(mine, _WithParentEntries):
            setattr(current, table, _WithParentEntries(mine, theirs))


def tracked_as_constant(tracker: Any, tensor: Any) -> bool:
    """Whether the recording tracks ``tensor`` with a constant value beside its node (make_fx's
    constant propagation). Relies on the tracker's ``_ProxyTensor`` and its ``constant``."""
    try:
        slot = tracker.get(tensor)
    except TypeError:
        return False
    return getattr(slot, "constant", None) is not None


def operator_node_name(graph: torch.fx.Graph, op: Any) -> str:
    """The name make_fx asks for when it records ``op`` (the graph makes it unique): the operator's
    packet name, snake-cased. Relies on ``Graph._target_to_str`` and ``OpOverload.overloadpacket``."""
    return graph._target_to_str(op.overloadpacket.__name__)


def recorded_node(tracker: Any, tensor: Any) -> Optional[torch.fx.Node]:
    """The graph node a recording's tensor tracker holds for ``tensor``, or None.

    Relies on the tracker's values being ``_ProxyTensor`` with a ``proxy`` attribute.
    """
    try:
        slot = tracker.get(tensor)
    except TypeError:
        return None
    proxy = getattr(slot, "proxy", None)
    return getattr(proxy, "node", None)


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


def autocast_markers() -> tuple[Callable, Callable]:
    """The functions the pre-dispatch recorder writes at the start and end of an autocast block
    (``torch.amp.autocast_mode._enter_autocast`` / ``_exit_autocast``)."""
    from torch.amp.autocast_mode import _enter_autocast, _exit_autocast
    return _enter_autocast, _exit_autocast


def inference_mode_markers() -> tuple[Callable, Callable]:
    """The functions dynamo's graph calls where a ``with torch.inference_mode():`` block starts and
    ends (``torch.autograd.grad_mode._enter_inference_mode(mode)`` returning the entered context,
    ``_exit_inference_mode(context)``)."""
    from torch.autograd.grad_mode import _enter_inference_mode, _exit_inference_mode
    return _enter_inference_mode, _exit_inference_mode


def predispatch_functions() -> set[Any]:
    """Python functions the pre-dispatch tracer records as calls of their own (vmap/jvp levels, autocast).

    Relies on the functions of ``torch._functorch.predispatch`` named above (the
    ones present) and :func:`autocast_markers`.
    """
    import torch._functorch.predispatch as predispatch
    found = {getattr(predispatch, n) for n in _PREDISPATCH_NAMES if hasattr(predispatch, n)}
    return found | set(autocast_markers())


def pytree_specs_of(gm: torch.fx.GraphModule) -> tuple[Any, Any]:
    """The input and output TreeSpecs dynamo's export graph was generated with (None when absent).

    Relies on the graph's code generator ``Graph._codegen`` keeping a ``pytree_info``
    (``torch.fx.graph._PyTreeInfo``) when it is a pytree one.
    """
    with own_pytree_info_reads():
        info = getattr(gm.graph._codegen, "pytree_info", None)
    return (info.in_spec, info.out_spec) if info is not None else (None, None)


@contextlib.contextmanager
def code_generated_on_first_use() -> Iterator[None]:
    """Graph modules ``make_fx`` builds in the block generate their Python code when first
    used (called, or ``.code`` read), not when built.

    The recorder's top-level graph module is never run: lifting builds the
    program's own module from its graph. Generating its code anyway was about
    6% of a warm static export (resnet18, GPT-2).

    Relies on ``torch.fx._lazy_graph_module._use_lazy_graph_module``.
    """
    from torch.fx._lazy_graph_module import _use_lazy_graph_module
    with _use_lazy_graph_module(True):
        yield


_NODES_WITHOUT_STACK_TRACE = ("placeholder", "output")
_torch_create_node = proxy_tensor.PythonKeyTracer.create_node


def _create_node_without_dropped_trace(self: Any, kind: str, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """torch's ``PythonKeyTracer.create_node``, without formatting a stack trace it deletes."""
    create = _DROPPED_TRACES.saved or _torch_create_node  # what the class had when the patch went in
    if kind in _NODES_WITHOUT_STACK_TRACE and self.record_stack_traces and _DROPPED_TRACES.in_scope():
        self.record_stack_traces = False
        try:
            return create(self, kind, *args, **kwargs)
        finally:
            self.record_stack_traces = True
    return create(self, kind, *args, **kwargs)


def _install_create_node() -> Any:
    saved = proxy_tensor.PythonKeyTracer.__dict__["create_node"]
    proxy_tensor.PythonKeyTracer.create_node = _create_node_without_dropped_trace  # type: ignore[method-assign]
    return saved


def _restore_create_node(saved: Any) -> None:
    proxy_tensor.PythonKeyTracer.create_node = saved  # type: ignore[method-assign]


_DROPPED_TRACES = ThreadScopedPatch(_install_create_node, _restore_create_node)


@contextlib.contextmanager
def dropped_stack_traces_skipped() -> Iterator[None]:
    """In the block, on this thread, the proxy-tensor tracers do not format a stack trace for a
    placeholder or output node.

    torch's ``TracerBase.create_node`` formats the whole Python stack (50+ frames, with source
    lines) for every node while ``record_stack_traces`` is on, and ``PythonKeyTracer.create_node``
    (every torch line graphcap supports) then deletes it from placeholder and output nodes: for
    resnet18's 123 placeholders that was about 5% of a warm export. The nodes come out the same.

    Relies on ``PythonKeyTracer.create_node(self, kind, ...)`` (which ``_ModuleStackTracer``'s calls)
    and the tracer's ``record_stack_traces`` field, read while the node is made; the class method
    is replaced for the process while some thread is inside, and defers to torch's elsewhere.
    """
    with _DROPPED_TRACES.active():
        yield


def graph_module_with_code_deferred(root: torch.nn.Module, graph: torch.fx.Graph,
                                    class_name: str = "GraphModule") -> torch.fx.GraphModule:
    """``torch.fx.GraphModule(root, graph, class_name=...)`` whose Python code is generated when first
    used (called, ``.code`` or ``str`` read) or by :func:`generate_code`, not when built nor at
    each ``recompile()``: for the program's module, which several passes edit (and recompile)
    before anything reads its code. Generating the code of a deep program's graph takes 0.18 s
    (Llama-3-70B architecture, 5,900 nodes); the export pipeline did it three times.

    Relies on ``torch.fx._lazy_graph_module._LazyGraphModule``.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule
    return _LazyGraphModule(root, graph, class_name=class_name)


def generate_code(gm: torch.fx.GraphModule) -> None:
    """Make ``gm``, built by :func:`graph_module_with_code_deferred`, the plain ``GraphModule`` that
    ``torch.fx.GraphModule(root, graph)`` would have built (same object, same attributes), its
    code generated now from its graph as it is. A plain graph module is left as it is.

    ``GraphModule.__new__`` gives every instance a class of its own (``GraphModuleImpl``, named
    after the module's class name) so that each holds its own ``forward``: the deferred module
    gets such a class over ``GraphModule`` in place of the one over ``_LazyGraphModule``.

    Relies on ``torch.fx._lazy_graph_module._LazyGraphModule`` and on ``GraphModule.__new__``'s
    per-instance class.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule
    if not isinstance(gm, _LazyGraphModule):
        return
    own_class = type("GraphModuleImpl", (torch.fx.GraphModule,), {"__module__": torch.fx.GraphModule.__module__})
    own_class.__name__ = type(gm).__name__
    gm.__class__ = own_class
    gm.recompile()


def plain_graph_module(gm: torch.fx.GraphModule, class_name: str = "GraphModule") -> torch.fx.GraphModule:
    """A plain ``GraphModule`` over ``gm``'s graph (its code generated now, once), holding what the
    graph reads from ``gm`` and ``gm.meta``: what a graph module built under
    :func:`code_generated_on_first_use` becomes once its graph is final.

    Relies on ``torch.fx._lazy_graph_module._LazyGraphModule`` (via :func:`generate_code_of_submodules`).
    """
    generate_code_of_submodules(gm)
    plain = torch.fx.GraphModule(gm, gm.graph, class_name=class_name)
    plain.meta = gm.meta
    return plain


def generate_code_of_submodules(gm: torch.fx.GraphModule) -> None:
    """Replace each lazy graph module under ``gm`` (control-flow subgraphs, which the program
    keeps) by a plain ``GraphModule`` over the same graph, so that programs hold only plain ones.

    Innermost first, so that a copied parent holds the plain children.
    Relies on ``torch.fx._lazy_graph_module._LazyGraphModule``.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule
    lazy = [(name, mod) for name, mod in gm.named_modules(remove_duplicate=False)
            if name and isinstance(mod, _LazyGraphModule)]
    for name, mod in reversed(lazy):
        parent_name, _, attr = name.rpartition(".")
        parent = gm.get_submodule(parent_name) if parent_name else gm
        plain = torch.fx.GraphModule(mod, mod.graph, class_name=type(mod).__name__)
        plain.meta = mod.meta
        setattr(parent, attr, plain)
