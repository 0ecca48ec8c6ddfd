"""Control-flow operators (``cond``, ``map``, ``while_loop``, ``scan``) in a recording.

graphcap captures each call of a control-flow operator itself
(:mod:`.hop_capture`): the operator is called with graphcap's branch
callables, and ``make_fx(pre_dispatch=True)`` records it as one node whose
branches and bodies are ``get_attr`` submodules (``true_graph_0``,
``body_graph_0``, ...), traced with the same fake mode and ``ShapeEnv``.
What is left for the exporter is done here:

* tensors a branch closes over, and tensor constants it makes
  (``torch.tensor([1., 2.])`` inside a body), are constants of the subgraph;
  they are hoisted to the enclosing graph and passed in as extra operands —
  a closed-over value as the node that made it, a constant as a lifted
  ``c_...`` input (:func:`hoist_constants`);
* node metadata is made to read as the user's program
  (:func:`clean_metadata`);
* subgraph placeholders are anonymous (``arg0_1``); after lifting they are
  named after the operands passed in (:func:`name_subgraph_inputs`);
* when a branch pair cannot be captured, the error says which output differs
  and how, or what the branch did that a subgraph cannot hold
  (:func:`explain_failure`).
"""
from __future__ import annotations

import contextlib
import logging
import re
import traceback
import types
from typing import Any, Optional

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
from ..torch_private import pytree

from ..torch_private.fake import same_storage
from ..torch_private.ops import is_higher_order_operator
from ..errors import GraphcapError, UnsupportedError, describe_frame, user_frame
from .branch_checks import BranchRefused
from .closures import closure_source, forget_recording

hop = torch.ops.higher_order

# operator → (index of the argument that carries extra operands, or None)
_EXTRA_OPERANDS_AT = {
    "cond": 3,
    "map_impl": 2,
    "while_loop": 3,
    "scan": 3,
    "wrap_with_set_grad_enabled": None,
    "wrap_with_autocast": None,
}


def _hop_name(node: torch.fx.Node) -> Optional[str]:
    if node.op == "call_function" and is_higher_order_operator(node.target):
        return node.target.name()
    return None


def subgraph_operands(node: torch.fx.Node) -> list[tuple[torch.fx.Node, list[Any]]]:
    """For a control-flow node: each subgraph (its ``get_attr`` node) with the
    values bound to that subgraph's placeholders, in order. Empty for other nodes."""
    name, a = _hop_name(node), node.args
    if name == "cond":
        return [(a[1], list(a[3])), (a[2], list(a[3]))]
    if name == "map_impl":
        return [(a[0], [*a[1], *a[2]])]
    if name == "while_loop":
        return [(a[0], [*a[2], *a[3]]), (a[1], [*a[2], *a[3]])]
    if name == "scan":
        return [(a[0], [*a[1], *a[2], *a[3]])]
    if name == "wrap_with_set_grad_enabled":
        return [(a[1], list(a[2:]))]
    if name == "wrap_with_autocast":
        return [(a[4], list(a[5:]))]
    return []


def _submodule(gm: torch.fx.GraphModule, attr: Any) -> Optional[torch.fx.GraphModule]:
    if isinstance(attr, torch.fx.Node) and attr.op == "get_attr":
        value = getattr(gm, attr.target, None)
        if isinstance(value, torch.fx.GraphModule):
            return value
    return None


def subgraphs(gm: torch.fx.GraphModule):
    """Every (node, subgraph module, operands) of ``gm``'s control-flow calls, not recursive."""
    for node in gm.graph.nodes:
        for attr, operands in subgraph_operands(node):
            sub = _submodule(gm, attr)
            if sub is not None:
                yield node, sub, operands


# -- constants made inside branches -----------------------------------------

def _tensor_constants(sub: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in sub.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(sub, n.target, None), torch.Tensor)]


def _append_placeholder(sub: torch.fx.GraphModule, name: str, val: Any) -> torch.fx.Node:
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    where = (sub.graph.inserting_after(placeholders[-1]) if placeholders
             else sub.graph.inserting_before(next(iter(sub.graph.nodes))))
    with where:
        ph = sub.graph.placeholder(name)
    ph.meta["val"] = val
    return ph


def hoist_constants(gm: torch.fx.GraphModule, fake_mode) -> None:
    """Move tensor constants out of control-flow subgraphs into ``gm``, innermost first.

    A tensor a branch closed over (made by the enclosing graph, or one of its
    inputs) is passed as that value; any other constant becomes a ``get_attr``
    of ``gm``. Either is an extra operand of the operator, and every subgraph
    of that operator gets a matching placeholder at the end of its inputs (the
    operators bind them last).
    """
    _hoist_constants(gm, fake_mode)
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            forget_recording(sub.graph)


def _hoist_constants(gm: torch.fx.GraphModule, fake_mode) -> None:
    for node in list(gm.graph.nodes):
        pairs = [(attr, _submodule(gm, attr)) for attr, _ in subgraph_operands(node)]
        pairs = [(attr, sub) for i, (attr, sub) in enumerate(pairs)
                 if sub is not None and all(sub is not other for _, other in pairs[:i])]
        for _, sub in pairs:
            _hoist_constants(sub, fake_mode)
        found: dict[int, torch.Tensor] = {}
        for _, sub in pairs:
            for c in _tensor_constants(sub):
                value = getattr(sub, c.target)
                found.setdefault(id(value), value)
        if not found:
            continue
        at = _EXTRA_OPERANDS_AT.get(_hop_name(node))
        if at is None:
            raise UnsupportedError(
                f"A tensor constant is created inside the body of {_hop_name(node)}, which graphcap "
                "cannot pass in as an operand.",
                where=f"graph node {node.name}",
                fix="Create the tensor outside the region (or register it as a buffer) and use it there.")
        new_operands = []
        for i, value in enumerate(found.values()):
            source = closure_source(gm.graph, value)
            if source is not None:  # a tensor the enclosing graph made (or took in), closed over
                new_operands.append(source)
                val = source.meta.get("val", value)
            else:
                name = f"_cf_constant_{len([a for a in dir(gm) if a.startswith('_cf_constant_')])}"
                setattr(gm, name, value)
                with gm.graph.inserting_before(node):
                    new_operands.append(gm.graph.get_attr(name))
                val = fake_mode.from_tensor(value, static_shapes=True)
            for _, sub in pairs:
                ph = _append_placeholder(sub, f"constant_{i}", val)
                for c in _tensor_constants(sub):
                    if getattr(sub, c.target) is value:
                        c.replace_all_uses_with(ph)
                        sub.graph.erase_node(c)
        for _, sub in pairs:
            used = {n.target for n in sub.graph.nodes if n.op == "get_attr"}
            held = [*(t for t, v in vars(sub).items() if isinstance(v, torch.Tensor)),
                    *(t for t, _ in sub.named_buffers(recurse=False))]
            for target in [t for t in held if t not in used]:
                delattr(sub, target)
        args = list(node.args)
        args[at] = type(args[at])([*args[at], *new_operands])
        node.args = tuple(args)
        if _hop_name(node) == "cond":
            _order_cond_operands(node, [sub for _, sub in pairs], len(args[at]) - len(new_operands))


def _placeholders(sub: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in sub.graph.nodes if n.op == "placeholder"]


def _order_cond_operands(node: torch.fx.Node, branches: list, given: int) -> None:
    """Order a cond's operands as torch's capture orders them: values both branches close
    over, the operands the user gave, then values only the true branch, then only the false
    branch closes over (each subgraph's placeholders follow)."""
    if len(branches) != 2:
        return
    operands = list(node.args[3])
    used = [[bool(ph.users) for ph in _placeholders(sub)] for sub in branches]
    extra = range(given, len(operands))
    shared = [i for i in extra if used[0][i] and used[1][i]]
    true_only = [i for i in extra if used[0][i] and not used[1][i]]
    false_only = [i for i in extra if used[1][i] and not used[0][i]]
    unused = [i for i in extra if not used[0][i] and not used[1][i]]
    order = [*shared, *range(given), *true_only, *false_only, *unused]
    if order == list(range(len(operands))):
        return
    for sub in branches:
        placeholders = _placeholders(sub)
        anchor = next(n for n in sub.graph.nodes if n.op != "placeholder")
        for i in order:
            anchor.prepend(placeholders[i])
    args = list(node.args)
    args[3] = type(node.args[3])(operands[i] for i in order)
    node.args = tuple(args)


# -- source locations -------------------------------------------------------

_FRAME = re.compile(r'^\s*File "', re.M)


def _user_frames(stack_trace: Optional[str]) -> Optional[str]:
    """``stack_trace`` without the frames of code torch generated for a branch."""
    if not stack_trace:
        return stack_trace
    starts = [m.start() for m in _FRAME.finditer(stack_trace)] + [len(stack_trace)]
    frames = [stack_trace[a:b].strip("\n") for a, b in zip(starts, starts[1:])]
    kept = [f.strip() if i == 0 else f for i, f in enumerate(x for x in frames if "<eval_with_key>" not in x)]
    return "\n".join(kept) if kept else None


def _torch_internal_stack(stack: Any) -> bool:
    """An nn_module_stack written by torch's branch capture (paths like ``L['args'][1]...``)."""
    return not stack or any(str(path).startswith(("L[", "G[")) for path, _ in stack.values())


def clean_metadata(gm: torch.fx.GraphModule, enclosing: Optional[torch.fx.Node] = None) -> None:
    """Make node metadata read as the user's program, subgraphs included.

    Stack traces lose frames of generated code; a subgraph node left with no
    user frame gets the trace of the control-flow call that contains it (the
    user's ``torch.cond(...)`` line). Subgraph nodes take the module stack of
    that call (torch's capture names modules by its own access paths).
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
        if enclosing is not None and node.op not in ("placeholder", "output") \
                and _torch_internal_stack(node.meta.get("nn_module_stack")):
            node.meta["nn_module_stack"] = dict(enclosing.meta.get("nn_module_stack") or {})
    for node, sub, _ in list(subgraphs(gm)):
        clean_metadata(sub, node)


def recompile_subgraphs(gm: torch.fx.GraphModule) -> None:
    """Regenerate the code of every subgraph once, after all edits.

    The passes here edit graphs in place and leave code generation to the end:
    it is the costly part, and the top-level module gets its code when lifting
    builds the final GraphModule.
    """
    for sub in gm.modules():
        if sub is not gm and isinstance(sub, torch.fx.GraphModule):
            sub.recompile()


def name_subgraph_inputs(gm: torch.fx.GraphModule) -> None:
    """Name each subgraph placeholder after the operand bound to it, recursively
    (other subgraph nodes move aside, as torch.export names them)."""
    _name_inputs(gm)
    recompile_subgraphs(gm)


def _name_inputs(gm: torch.fx.GraphModule) -> None:
    for node, sub, operands in list(subgraphs(gm)):
        _name_from_operands(sub, operands)
        _name_inputs(sub)


def _name_from_operands(sub: torch.fx.GraphModule, operands: list[Any]) -> None:
    """Placeholders take the names of the enclosing values bound to them."""
    from .owed_names import apply_owed_names
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    apply_owed_names(sub.graph, [(ph, value.name) for ph, value in zip(placeholders, operands)
                                 if isinstance(value, torch.fx.Node)])


@contextlib.contextmanager
def capture_context(root: Optional[torch.nn.Module] = None):
    """What a trace needs around it for control-flow operators to record well: graphcap's
    own capture of them (:mod:`.hop_capture`)."""
    from .hop_capture import capturing
    with capturing(root):
        yield


def prepare(gm: torch.fx.GraphModule, fake_mode, grad_enabled: bool) -> torch.fx.GraphModule:
    """Everything this module and ``regions`` do between recording and lifting."""
    from . import regions, tracer_artifacts
    tracer_artifacts.drop_dead(gm)
    hoist_constants(gm, fake_mode)
    regions.wrap_regions(gm, grad_enabled)
    clean_metadata(gm)
    return gm  # subgraph code is generated once, by name_subgraph_inputs after lifting


# -- errors -----------------------------------------------------------------

def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{'an' if dtype[0] in 'aeiou' else 'a'} {dtype} tensor of shape {list(value.shape)}"
    return f"{type(value).__name__} {value!r}"


def _structure(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a single tensor"
    if isinstance(value, (tuple, list, dict)):
        return f"a {type(value).__name__} of {len(value)} ({len(pytree.tree_leaves(value))} leaves)"
    return _describe(value)


def _output_name(path) -> str:
    return f"output{pytree.keystr(path)}" if path else "the output"


def _torch_reason(e: BaseException) -> str:
    """The explanation torch gave for an uncapturable branch, without its debug boilerplate."""
    text = str(e)
    if "Got graph break/error:" in text:
        text = text.split("Got graph break/error:", 1)[1]
    keep = []
    for line in text.strip().splitlines():
        if line.strip().startswith(("Developer debug context", "For more details", "from user code",
                                    "Set TORCHDYNAMO_VERBOSE")):
            break
        if line.strip():
            keep.append(line.strip())
    return " ".join(keep)[:600]


def _difference(a: Any, b: Any) -> Optional[str]:
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return "one is a tensor and the other is not"
    if not isinstance(a, torch.Tensor):
        return None
    diffs = []
    if a.dtype != b.dtype:
        diffs.append(f"dtype {a.dtype} vs {b.dtype}")
    if a.dim() != b.dim():
        diffs.append(f"rank {a.dim()} vs {b.dim()}")
    elif list(a.shape) != list(b.shape):
        diffs.append(f"shape {list(a.shape)} vs {list(b.shape)}")
    if a.device != b.device:
        diffs.append(f"device {a.device} vs {b.device}")
    return ", ".join(diffs) or None


def _frame_locals(tb: Optional[types.TracebackType], func_name: str, file_suffix: str) -> Optional[dict]:
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == func_name and code.co_filename.endswith(file_suffix):
            return dict(tb.tb_frame.f_locals)
        tb = tb.tb_next
    return None


def _run_fake(fn, operands) -> Any:
    """Run a branch again on its fake operands, outside any recording, quietly."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    fake_mode = next((t.fake_mode for t in pytree.tree_leaves(operands) if hasattr(t, "fake_mode")), None)
    if fake_mode is None:
        raise ValueError("no fake operands")
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level, fake_log.disabled = fake_log.disabled, True
    try:
        with disable_proxy_modes_tracing(), fake_mode:
            return fn(*operands)
    finally:
        fake_log.disabled = level


def _same_storage(a: Any, b: Any) -> bool:
    return same_storage(a, b)


def _compare_branches(locals_: dict) -> Optional[tuple[str, str]]:
    """(what differs, how to fix) for a cond whose branches disagree, or None."""
    operands = locals_.get("operands", ())
    outs = []
    for side in ("true", "false"):
        try:
            outs.append(_run_fake(locals_[f"{side}_fn"], operands))
        except Exception as err:  # the branch itself fails on these operands
            text = str(err).strip().splitlines()[0] if str(err).strip() else ""
            return (f"the {side} branch raised {type(err).__name__}: {text}",
                    "Both branches are traced, whichever the example takes: each must run on the "
                    "operands given to torch.cond (same shapes and dtypes).")
    flat_in = pytree.tree_leaves(operands)
    for side, out in zip(("true", "false"), outs):
        for path, leaf in pytree.tree_flatten_with_path(out)[0]:
            if isinstance(leaf, torch.Tensor) and any(_same_storage(leaf, t) for t in flat_in):
                return (f"{_output_name(path)} of the {side} branch is one of its operands "
                        "(or a view of one); branches must return new tensors.",
                        "Return a copy, e.g. `return x.clone()` instead of `return x`.")
    (lt, st), (lf, sf) = (pytree.tree_flatten_with_path(o) for o in outs)
    if st != sf:
        return (f"the branches return different structures: the true branch returns "
                f"{_structure(outs[0])}, the false branch {_structure(outs[1])}.",
                "Return the same structure (same number of tensors, same containers) from both branches.")
    for (path, a), (_, b) in zip(lt, lf):
        diff = _difference(a, b)
        if diff:
            return (f"{_output_name(path)} differs between the branches ({diff}): the true branch "
                    f"returns {_describe(a)}, the false branch {_describe(b)}.",
                    "Make both branches return tensors of the same dtype and shape at every output "
                    "(cast with .to(dtype), reshape or expand), or compute the differing value outside "
                    "torch.cond.")
    return None


def _compare_loop_body(locals_: dict) -> Optional[tuple[str, str]]:
    """(what differs, how to fix) for a while_loop whose body changes what it carries, or None."""
    carried = locals_.get("carried_inputs", ())
    try:
        out = _run_fake(locals_["body_fn"], carried)
    except Exception:
        return None
    out = out if isinstance(out, (tuple, list)) else (out,)
    if len(out) != len(carried):
        return (f"the body returns {len(out)} value(s) for {len(carried)} carried input(s).",
                "Return one new value per carried input, in the same order.")
    for i, (before, after) in enumerate(zip(carried, out)):
        diff = _difference(before, after)
        if diff:
            return (f"carried value [{i}] changes from one iteration to the next ({diff}): it enters as "
                    f"{_describe(before)} and the body returns {_describe(after)}.",
                    "A loop carries values of fixed dtype and shape: make the body return each carried "
                    "value with the dtype and shape it came in with.")
    return None


def _operator_call_site(tb: Optional[types.TracebackType]):
    """The user's line that called the (outermost) control-flow operator, else the innermost user line."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    for before, frame in zip(frames, frames[1:]):
        if _in_hop_module(frame.filename) and user_frame_of([before]) is not None:
            return before
    return user_frame(tb)


def user_frame_of(frames: list) -> Any:
    """The frame of ``frames`` that is the user's (not torch's or graphcap's), if any."""
    from ..errors import is_user_file
    for frame in frames:
        if is_user_file(frame.filename):
            return frame
    return None


def _in_hop_module(filename: str) -> bool:
    """A file of torch's control-flow operators, or graphcap's ``torch.cond`` entry in front of them."""
    path = filename.replace("\\", "/")
    return "_higher_order_ops" in path or path.endswith("graphcap/trace/nested_cond_operands.py")


def _refusal(e: BaseException) -> Optional[BaseException]:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BranchRefused):
            return e
        e = e.__cause__ or e.__context__
    return None


_NESTED_OPERANDS = re.compile(r"can only be of \(<class 'torch\.Tensor'>, <class 'int'>, <class 'torch\.SymInt'>\) "
                              r"but got")


def explain_failure(e: BaseException, program_name: str) -> Optional[GraphcapError]:
    """A graphcap error for a ``torch.cond`` or ``while_loop`` that could not be captured, or None."""
    refused = _refusal(e)
    if refused is not None:
        return UnsupportedError(f"While tracing {program_name}, {refused.operator} could not be captured: "
                                f"{refused.what}", where=describe_frame(_operator_call_site(e.__traceback__)),
                                fix=refused.fix)
    if _NESTED_OPERANDS.search(str(e)) and _frame_locals(e.__traceback__, "cond", "_higher_order_ops/cond.py"):
        return UnsupportedError(
            f"While tracing {program_name}, torch.cond could not be captured: its operands hold a "
            "container (dict, list or tuple), and this `cond` was bound before the export "
            "(`from torch import cond` or functorch's control_flow.cond), so graphcap could not "
            "flatten them: torch's cond itself takes them flat unless dynamo compiles it.",
            where=describe_frame(user_frame(e.__traceback__)),
            fix="Call it as `torch.cond(...)` (graphcap flattens nested operands there), or pass the "
                "tensors one by one, e.g. `cond(p, t, f, (d['a'], d['b']))` with branches taking "
                "them as separate arguments.")
    locals_ = _frame_locals(e.__traceback__, "cond", "_higher_order_ops/cond.py")
    operator_name, found = "torch.cond", None
    if locals_ is not None and "true_fn" in locals_:
        found = _compare_branches(locals_)
    else:
        locals_ = _frame_locals(e.__traceback__, "while_loop", "_higher_order_ops/while_loop.py")
        if locals_ is None or "body_fn" not in locals_:
            return None
        operator_name, found = "while_loop", _compare_loop_body(locals_)
    if found is None:
        if "higher order operator" not in str(e).lower() and "dynamo" not in str(e).lower():
            return None
        found = (f"a branch or body does something the control-flow capture cannot record "
                 f"({_torch_reason(e)}).",
                 "Keep branches and loop bodies to tensor operations on their operands: no Python side "
                 "effects (writes to self or globals), no in-place writes to operands, and outputs of "
                 "fixed metadata.")
    what, fix = found
    return UnsupportedError(f"While tracing {program_name}, {operator_name} could not be captured: {what}",
                            where=describe_frame(user_frame(e.__traceback__)), fix=fix)
