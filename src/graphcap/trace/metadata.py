"""Node metadata the IR promises: ``val``, ``stack_trace``, ``nn_module_stack``,
``source_fn_stack``.

Recorded, never defaulted. The recorder leaves ``val`` (fake tensors),
``stack_trace`` (the user frames) and ``nn_module_stack`` (module path → (FQN,
class)) on the operator nodes it makes. Nodes made afterwards record theirs
where they are made:

* an operator that returns nothing (``_assert_scalar``, ``_assert_async``, a
  custom op that only writes) has ``val`` None, read from its schema
  (:func:`record_results_of_effect_ops`; the recorder keeps no value for it);
* the size reads and checks torch's runtime-assert pass adds take the source
  line of the operation they serve (:func:`attribute_added_nodes`), and those
  it adds at the top of the graph (input-size reads) belong to the root
  module's forward (:func:`_place_unowned_nodes_in_root`);
* a function (not a module) exported has the empty module stack on every node
  (:func:`record_function_module_stacks`).

:func:`finalize` then makes the set uniform, in control-flow subgraphs too:
placeholders and the output carry no source information, and
``source_fn_stack`` names, for each node, the ``torch.nn`` module or the
function the user called that produced it, as objects source-partition tools
compare (``source_fns``; torch's branch capture leaves operator objects there,
which are replaced). A node still without metadata is left as
it is, so that the verifier (``every-node-has-val``, ``operator-metadata``)
names it.
"""
from __future__ import annotations

import contextlib
import operator
from typing import Optional

import torch
import torch.fx

from ..torch_private.dynamo import DYNAMO_META_KEY_PREFIX
from ..torch_private.fx import extract_tensor_metadata
from ..torch_private.ops import OpOverload, is_higher_order_operator, schema_of
from . import source_fns


def _recorded_by_branch_capture(stack: object) -> bool:
    """A ``source_fn_stack`` torch's branch capture wrote: it names operator objects
    (``('cond', <CondOp>)``) where graphcap's names what the user called."""
    return isinstance(stack, list) and any(
        not (isinstance(entry, tuple) and len(entry) == 2) or isinstance(entry[1], OpOverload)
        or is_higher_order_operator(entry[1]) for entry in stack)


def finalize(gm: torch.fx.GraphModule) -> None:
    """Make the metadata of ``gm`` and of its control-flow subgraphs uniform (see the module docstring)."""
    record_function_module_stacks(gm)
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            record_results_of_effect_ops(sub)
            _finalize_graph(sub)
    _place_unowned_nodes_in_root(gm)


def record_results_of_effect_ops(gm: torch.fx.GraphModule) -> None:
    """``val`` None for operator nodes whose operator returns nothing (by its schema); for an
    element of a result tuple that the tracer did not track (None from a functionalized custom op
    that only writes, a plain int an operator returns beside a tensor), the element of the
    operator's recorded result."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or "val" in node.meta:
            continue
        if isinstance(node.target, OpOverload) and _returns_nothing(node.target):
            node.meta["val"] = None
        elif node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
                and isinstance(node.args[1], int):
            whole = node.args[0].meta.get("val")
            if isinstance(whole, (tuple, list)) and node.args[1] < len(whole):
                node.meta["val"] = whole[node.args[1]]


def _returns_nothing(op: OpOverload) -> bool:
    schema = schema_of(op)
    return schema is not None and len(schema.returns) == 0


def propagate_missing_vals(gm: torch.fx.GraphModule, fake_mode) -> None:
    """``val`` for operator nodes the recorder left without one (a view a decomposition returns
    as the tensor another node already made): the operator run on its inputs' fake values."""
    from ..torch_private import pytree
    for node in gm.graph.nodes:
        if node.op != "call_function" or "val" in node.meta or not isinstance(node.target, OpOverload) \
                or _returns_nothing(node.target):
            continue
        args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs))
        with fake_mode:
            try:
                node.meta["val"] = node.target(*args, **kwargs)
            except (RuntimeError, ValueError):
                if node.target is not torch.ops.aten.view.default:
                    continue  # left without: the verifier names it
                # a view recorded on a value whose fake strides say it cannot be viewed (the
                # decomposition's own input was contiguous): its result's shape is reshape's
                node.meta["val"] = torch.ops.aten.reshape.default(*args, **kwargs)


def record_function_module_stacks(gm: torch.fx.GraphModule) -> None:
    """A function exported (no module anywhere in the program) runs in no module: each
    operator node's module stack is the empty one. A module's program always records the
    root module's entry on the nodes of its forward, so this leaves module programs alone."""
    nodes = [n for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule) for n in sub.graph.nodes
             if n.op == "call_function"]
    if any(n.meta.get("nn_module_stack") for n in nodes):
        return
    for node in nodes:
        if "nn_module_stack" not in node.meta:
            node.meta["nn_module_stack"] = {}


_SOURCE_KEYS = ("stack_trace",)  # the module stack stays the one the pass gave (the root's: see below)


NO_USER_FRAME = "<graphcap: no user frame>"
"""A retrace's stand-in for ``stack_trace`` None (torch's tracer copies only a non-empty one)."""

SPEC_CHECK_FRAME = "<graphcap: a check the spec asks for>"
"""A retrace's stand-in for ``stack_trace`` "" (a check of input sizes the spec alone asks for)."""

_STAND_INS = {None: NO_USER_FRAME, "": SPEC_CHECK_FRAME}


@contextlib.contextmanager
def no_user_frame_marked(gm: torch.fx.GraphModule):
    """While a pass retraces ``gm`` with its node metadata preserved, the nodes recorded as
    having no user frame (``stack_trace`` None, or "" for a check the spec asks for) hold a
    stand-in (:data:`NO_USER_FRAME`, :data:`SPEC_CHECK_FRAME`) instead, so the nodes they become
    carry that record too; :func:`unmark_no_user_frame` turns it back."""
    marked = [(n, n.meta["stack_trace"]) for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
              for n in sub.graph.nodes if "stack_trace" in n.meta and n.meta["stack_trace"] in _STAND_INS]
    for node, value in marked:
        node.meta["stack_trace"] = _STAND_INS[value]
    try:
        yield
    finally:
        for node, value in marked:
            node.meta["stack_trace"] = value


def unmark_no_user_frame(gm: torch.fx.GraphModule) -> None:
    originals = {stand_in: value for value, stand_in in _STAND_INS.items()}
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            for node in sub.graph.nodes:
                trace = node.meta.get("stack_trace")
                if trace in originals:
                    node.meta["stack_trace"] = originals[trace]


def attribute_size_reads(gm: torch.fx.GraphModule) -> None:
    """Size reads the recorder made for a symbolic input size (``sym_size``, when a size is
    first used, with no user line of their own) take the line of the operation they serve."""
    size_reads = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default}
    attribute_added_nodes(gm, {n for n in gm.graph.nodes if n.target not in size_reads})
    for node in gm.graph.nodes:
        if node.target in size_reads and "stack_trace" not in node.meta:
            # serving no line of the user's (a size the program returns, read when the outputs
            # were collected): recorded as having none
            node.meta["stack_trace"] = None


def attribute_added_nodes(gm: torch.fx.GraphModule, before: set) -> None:
    """Nodes a pass added to ``gm`` (not in ``before``) without a source take the source of the
    operation they serve: an input-size read and its check belong to the user's line that
    needed the size (torch's runtime-assert pass adds them with none). Their first user with a
    source is taken, else the first argument with one; a node with neither keeps none."""
    added = [n for n in gm.graph.nodes if n not in before and n.op == "call_function"]
    for node in reversed(added):  # users first: a read feeds a comparison that feeds an assert
        if node.meta.get("stack_trace"):
            continue
        donor = next((u for u in node.users if u.meta.get("stack_trace")), None) or next(
            (a for a in node.all_input_nodes if a.meta.get("stack_trace")), None)
        if donor is None:
            continue
        for key in _SOURCE_KEYS:
            if key in donor.meta and not node.meta.get(key):
                node.meta[key] = donor.meta[key]
    for node in added:  # an argument's source, for nodes whose users had none either
        if not node.meta.get("stack_trace"):
            donor = next((a for a in node.all_input_nodes if a.meta.get("stack_trace")), None)
            if donor is not None:
                for key in _SOURCE_KEYS:
                    if key in donor.meta and not node.meta.get(key):
                        node.meta[key] = donor.meta[key]
    for node in added:  # a check the spec alone asks for (an input size's range): no user line
        if "stack_trace" not in node.meta and _checks_inputs_only(node):
            node.meta["stack_trace"] = ""


def place_added_nodes_with_their_origin(gm: torch.fx.GraphModule, before: set) -> None:
    """Nodes a pass added to ``gm`` (not in ``before``) without a module stack take the stack of
    the node they follow: torch's runtime-assert pass inserts a check right after the node whose
    value made it checkable (``b < n`` after ``b = x.item()`` in ``self.first``), so the check
    runs in that module, where the value exists. torch 2.11 and later give them that node's stack
    themselves; torch 2.10 gives some none, and the root would then own a check of a value
    computed inside a submodule (``unflatten`` would split that submodule's call around it).
    Nodes after the placeholders (input-size reads) follow no operator: they stay unowned, and
    :func:`_place_unowned_nodes_in_root` gives them the root's entry. The node's ``custom``
    annotations come along, as torch 2.11 and later give them."""
    origin: Optional[torch.fx.Node] = None
    for node in gm.graph.nodes:
        if node not in before:
            stack = origin.meta.get("nn_module_stack") if origin is not None else None
            if node.op == "call_function" and stack and not node.meta.get("nn_module_stack"):
                node.meta["nn_module_stack"] = dict(stack)
                if origin.meta.get("custom") and not node.meta.get("custom"):  # its annotations too
                    node.meta["custom"] = dict(origin.meta["custom"])
        elif node.op != "get_attr":
            origin = node


def _checks_inputs_only(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes only from input placeholders (a size read, a comparison, an assert)."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            continue
        if n.op != "call_function":
            return False
        todo.extend(n.all_input_nodes)
    return True


def _place_unowned_nodes_in_root(gm: torch.fx.GraphModule) -> None:
    """Operator nodes no module call produced (the input-size reads runtime asserts add
    at the top of the graph) belong to the root module's forward: they get its entry.

    An empty module stack is no stack at all to consumers such as ``unflatten``, which
    place every node in the module its stack's innermost entry names.
    """
    root = next((entry for node in gm.graph.nodes
                 for key, entry in (node.meta.get("nn_module_stack") or {}).items()
                 if isinstance(entry, tuple) and entry[0] == ""), None)
    unowned = [n for n in gm.graph.nodes if n.op == "call_function" and not n.meta.get("nn_module_stack")]
    if root is None:
        # a function or a bound method (not a module's forward) was exported: there is no root
        # entry to name; the nodes run outside any submodule call, which the empty stack says
        for node in unowned:
            node.meta.setdefault("nn_module_stack", {})
        return
    _share_whole_program_disable_mark(gm, unowned)
    for node in unowned:
        node.meta["nn_module_stack"] = {"": root}


def _share_whole_program_disable_mark(gm: torch.fx.GraphModule, unowned: list) -> None:
    """When every operator the user's code produced ran inside one ``torch._dynamo.disable``d
    call (a disabled ``forward``), the unowned nodes made on its behalf (input-size reads
    for runtime asserts) carry that call's mark too, so the whole program reads as disabled.

    Only dynamo's keys are shared: the user's own ``fx.traceback.annotate`` blocks mark the
    lines inside them, and a size read at the top of the graph is not one of those lines.
    """
    unowned_set, shared = set(unowned), None
    for node in gm.graph.nodes:
        if node.op != "call_function" or node in unowned_set:
            continue
        mark = {k: v for k, v in (node.meta.get("custom") or {}).items() if str(k).startswith(DYNAMO_META_KEY_PREFIX)}
        if not mark or (shared is not None and mark != shared):
            return  # (most programs stop at their first operator: it has no mark)
        shared = mark
    if shared is None:
        return
    for node in unowned:
        node.meta["custom"] = {**shared, **(node.meta.get("custom") or {})}


def _finalize_graph(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            node.meta.pop("stack_trace", None)
            node.meta.pop("nn_module_stack", None)
            node.meta.pop("torch_fn", None)
            if node.op == "placeholder" and "tensor_meta" not in node.meta \
                    and isinstance(node.meta.get("val"), torch.Tensor):
                # a subgraph's input (a branch's operand, a region's) is described as the
                # top level's inputs are, for passes that read shapes from tensor_meta
                node.meta["tensor_meta"] = extract_tensor_metadata(node.meta["val"])
            continue
        if node.op == "call_function":
            if "source_fn_stack" not in node.meta or _recorded_by_branch_capture(node.meta["source_fn_stack"]):
                node.meta["source_fn_stack"] = source_fns.source_fn_stack(node)
