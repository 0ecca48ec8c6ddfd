"""What a control-flow branch or body may not do, checked while graphcap captures it.

A branch becomes a subgraph run by the operator: only its tensor computation
on its operands survives. Two things a Python branch can do would make the
program differ from eager, so graphcap refuses them with an explanation
(:func:`graphcap.trace.control_flow.control_flow_errors.explain_failure` turns :class:`BranchRefused`
into the user-facing error):

* a write to a module attribute (``self.last = x``): the program cannot
  replay it, and code after the ``torch.cond`` would see whichever branch was
  traced last;
* an output that is one of the branch's operands (or a view of one): the
  operator's outputs are new tensors.

One more is found once the program is lifted (:func:`refuse_operand_writes`): a branch
or body that writes one of its operands in place — an input, a buffer, a parameter or
an intermediate it closes over, directly or through a view or a nested call. torch's
operators refuse such a subgraph when they run it, so the program would fail on its
first call; export refuses it instead, naming the state and the operator.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch

from ...errors import UnsupportedError
from ...graph_arguments import InputKind
from ...node_facts import hop_name
from ...torch_private import pytree
from ...torch_private.fake import same_storage
from ..mutations import base_placeholder, first_writer, written_placeholders
from .hops import subgraph_module, subgraphs


class BranchRefused(Exception):
    """A branch did something a subgraph cannot hold (see the module docstring)."""

    def __init__(self, operator: str, what: str, fix: str):
        super().__init__(what)
        self.operator, self.what, self.fix = operator, what, fix


def _attributes(module: torch.nn.Module) -> dict:
    """Everything a branch could assign on ``module``: its plain attributes and its own
    parameters, buffers and submodules (by name, through nn.Module's public accessors)."""
    return {**vars(module),
            **{("parameter", k): v for k, v in module.named_parameters(recurse=False)},
            **{("buffer", k): v for k, v in module.named_buffers(recurse=False)},
            **{("module", k): v for k, v in module.named_children()}}


def _module_state(root: Optional[torch.nn.Module]) -> list[tuple[str, torch.nn.Module, dict]]:
    if root is None:
        return []
    return [(name, m, _attributes(m)) for name, m in root.named_modules(remove_duplicate=True)]


def _written(before: list[tuple[str, torch.nn.Module, dict]]) -> Optional[str]:
    for name, module, old in before:
        new = _attributes(module)
        for key in list(old) + [k for k in new if k not in old]:
            if old.get(key, _MISSING) is not new.get(key, _MISSING):
                attr = key[1] if isinstance(key, tuple) else key
                return f"self.{name}.{attr}" if name else f"self.{attr}"
    return None


_MISSING = object()


@contextlib.contextmanager
def no_module_writes(root: Optional[torch.nn.Module], operator: str, side: str) -> Iterator[None]:
    """Refuse a branch that assigns an attribute of one of ``root``'s modules."""
    before = _module_state(root)
    yield
    path = _written(before)
    if path is not None:
        raise BranchRefused(
            operator,
            f"the {side} writes {path}, a Python side effect the captured program cannot replay "
            "(code after the call would see whichever branch graphcap traced last).",
            "Keep branches and loop bodies to tensor operations on their operands: return the value "
            "instead of storing it on the module (or register a buffer and update it outside the call).")


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return same_storage(a, b)


def check_fresh_outputs(operator: str, side: str, operands: tuple, out: Any) -> None:
    """Refuse a branch whose output is one of its operands or a view of one."""
    flat_in = [t for t in pytree.tree_leaves(operands) if isinstance(t, torch.Tensor)]
    for path, leaf in pytree.tree_flatten_with_path(out)[0]:
        if isinstance(leaf, torch.Tensor) and any(leaf is t or _same_storage(leaf, t) for t in flat_in):
            where = output_name(path)
            raise BranchRefused(
                operator,
                f"{where} of the {side} is one of its operands (or a view of one); branches must "
                "return new tensors.",
                "Return a copy, e.g. `return x.clone()` instead of `return x`.")


def output_name(path: Any) -> str:
    """``output[1]`` (a leaf's pytree path in an output), or "the output" for a lone leaf."""
    return f"output{pytree.keystr(path)}" if path else "the output"


def structure(value: Any) -> str:
    """A short description of an output's container structure, for messages."""
    if isinstance(value, torch.Tensor):
        return "a single tensor"
    if isinstance(value, (tuple, list, dict)):
        return f"a {type(value).__name__} of {len(value)} ({len(pytree.tree_leaves(value))} leaves)"
    return f"{type(value).__name__} {value!r}"


# control-flow operator -> (user's name, what it calls each subgraph by its argument position)
_RUNS_SUBGRAPHS = {
    "cond": ("torch.cond", {1: "true branch", 2: "false branch"}),
    "while_loop": ("while_loop", {0: "loop condition", 1: "loop body"}),
    "map_impl": ("map", {0: "map body"}),
    "scan": ("scan", {0: "combine function"}),
}

_KIND_WORDS = {InputKind.USER_INPUT: "input", InputKind.BUFFER: "buffer", InputKind.PARAMETER: "parameter",
               InputKind.CONSTANT_TENSOR: "constant"}


def _trace_tail(node: Optional[torch.fx.Node]) -> Optional[str]:
    lines = (node.meta.get("stack_trace") or "").rstrip().splitlines() if node is not None else []
    return "\n".join(lines[-2:]).strip() or None


def _state_name(value: Any, specs: dict) -> tuple[str, Optional[str]]:
    """What the user calls the outer value a subgraph placeholder is bound to, and how their code
    names it (None for an intermediate)."""
    base = base_placeholder(value)
    spec = specs.get(base) if base is not None else None
    if spec is None:
        return "a tensor forward computed before the call (passed in as an operand)", None
    kind = _KIND_WORDS.get(spec.kind, str(spec.kind).lower())
    code = spec.arg.name if spec.kind is InputKind.USER_INPUT else f"self.{spec.target}"
    return f"{kind} `{code}`", code


def _innermost_writer(sub: torch.fx.GraphModule, placeholder: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The node that writes ``placeholder``: in ``sub`` itself or in a subgraph it calls."""
    writer = first_writer(sub.graph, placeholder)
    if writer is not None:
        return writer
    for node, inner, operands in subgraphs(sub):
        inner_ph = [n for n in inner.graph.nodes if n.op == "placeholder"]
        for p in written_placeholders(inner.graph):
            at = inner_ph.index(p)
            if at < len(operands) and operands[at] is placeholder:
                return _innermost_writer(inner, p) or node
    return None


def refuse_operand_writes(gm: torch.fx.GraphModule, input_specs: list, where_outer: Optional[str] = None) -> None:
    """Raise UnsupportedError if a control-flow subgraph of ``gm`` (at any depth) writes one of
    its operands in place (see the module docstring). ``input_specs``: the lifted program's, in
    placeholder order, to name the written state."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = dict(zip(placeholders, input_specs))
    for node, sub, operands in list(subgraphs(gm)):
        name = hop_name(node)
        if name not in _RUNS_SUBGRAPHS:
            refuse_operand_writes(sub, [], where_outer)  # a grad/autocast region may write; look inside it
            continue
        user_name, sides = _RUNS_SUBGRAPHS[name]
        side = next((sides[i] for i, a in enumerate(node.args) if i in sides and subgraph_module(gm, a) is sub),
                    "branch")
        inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
        written = written_placeholders(sub.graph)
        if written:
            p = written[0]
            at = inner.index(p)
            state, code = _state_name(operands[at], specs) if at < len(operands) else ("one of its operands", None)
            writer = _innermost_writer(sub, p)
            op = str(getattr(getattr(writer, "target", None), "__name__", "in place")).split(".")[0]
            target = code or "the tensor"
            raise UnsupportedError(
                f"The {side} of a {user_name} call writes {state} in place ({op}); {user_name}'s subgraphs "
                f"may not write their operands (torch runs them as functions of their operands, and refuses "
                f"such a subgraph when the program runs).",
                where=_trace_tail(node) or _trace_tail(writer) or where_outer,
                fix=f"Compute the new value in the {side} and return it, then write it after the call: "
                    f"`out, new = {user_name}(...)` with the {side} returning the new value too, then "
                    f"`{target}.copy_(new)`. Or write to a copy inside the {side} (`t = t.clone()` first).")
        refuse_operand_writes(sub, [], _trace_tail(node) or where_outer)
