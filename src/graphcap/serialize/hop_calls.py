"""Does each loaded call of a higher-order operator have that operator's form?

``call_types`` checks the calls of ordinary operators against their schemas; a higher-order
operator (``cond``, ``while_loop``, ``scan``, ``map_impl``, ``auto_functionalized``,
``with_effects``, ``flex_attention``, ...) has no schema, and a damaged call of one loads and then
fails at the first call with an error from inside torch (``KeyError: '_buf_base_index'``,
``IndexError``), or computes other numbers (``scan``'s carry moved into its scanned inputs, a
subgraph operand set to ``None``). :func:`check_hop_call` reads each such call the way the operator
will when it runs, and refuses at load, naming the node, what does not fit and where:

* its arguments: how many, which are subgraphs (a ``get_attr`` of a graph the file holds), which
  sequences, flags, devices and dtypes;
* each subgraph's inputs against the operands bound to them (:func:`bound_operands`): a tensor
  input given a tensor of the same rank and dtype (one rank more where the operator slices the
  operand along its first dimension: ``map``'s and ``scan``'s ``xs``), a number input given a number;
* the number of results the call's saved value holds against what its subgraph returns;
* ``auto_functionalized`` / ``_v2``: the custom operator's arguments against its schema, each
  written argument's base index inside ``_all_bases`` and its view keywords complete;
  ``with_effects``: a token, then a call the wrapped operator's schema accepts.

:func:`check_item_read` refuses an item read (``getitem``) past the results its producer's saved
value holds. A call of a higher-order operator not named here is left to the call itself. Every
check reads only what graphcap's save writes for a real program, so no saved program is refused.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import torch
import torch.fx

from ..node_facts import hop_name, subgraph_operands
from ..torch_private.ops import HigherOrderOperator, OpOverload, schema_of
from .call_types import check_call
from .values import bad

# name -> (fewest, most positional arguments; None: no limit), for the operators checked here
_ARITY = {
    "cond": (4, 4), "while_loop": (4, 4), "scan": (4, 4), "map_impl": (3, 3),
    "flex_attention": (7, 9), "wrap_with_set_grad_enabled": (2, None), "wrap_with_autocast": (5, None),
    "invoke_subgraph": (2, None), "with_effects": (2, None),
    "auto_functionalized": (1, 1), "auto_functionalized_v2": (1, 1),
}
# operators whose keywords belong to a wrapped operator
_KEYWORDS_PASSED_ON = frozenset({"with_effects", "auto_functionalized", "auto_functionalized_v2"})
# the keywords the others take (a string, from torch 2.14 on: which operands the subgraph writes)
_KEYWORDS = {"while_loop": ("mutated_arg_indices",), "scan": ("mutated_arg_indices",),
             "map_impl": ("mutated_arg_indices",)}

SubgraphOf = Callable[[Any], Optional[torch.fx.GraphModule]]


def _args(node: torch.fx.Node) -> tuple[Any, ...]:
    """The call's positional arguments, as loaded: values of any kind (the checks here read them)."""
    return tuple(node.args)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _value(v: Any) -> Any:
    return v.meta.get("val") if isinstance(v, torch.fx.Node) else v


def _what(v: Any) -> str:
    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        return f"node {v.name} ({type(val).__name__})" if val is not None else f"node {v.name}"
    return type(v).__name__


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _returned(gm: torch.fx.GraphModule) -> list[Any]:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]


def bound_operands(node: torch.fx.Node) -> list[tuple[Any, list[tuple[Any, bool]], int]]:
    """For a call of a higher-order operator: each subgraph argument with the operands bound to its
    inputs, each marked True where the operator slices it along its first dimension, and how many
    inputs the operator itself passes before them (``flex_attention``'s score and indices)."""
    name, a = hop_name(node), _args(node)
    if name == "map_impl":
        return [(a[0], [(v, True) for v in a[1]] + [(v, False) for v in a[2]], 0)]
    if name == "scan":
        return [(a[0], [(v, False) for v in a[1]] + [(v, True) for v in a[2]] + [(v, False) for v in a[3]], 0)]
    if name == "invoke_subgraph":
        return [(a[0], [(v, False) for v in a[2:]], 0)]
    if name == "flex_attention":
        mask = a[4][-1] if isinstance(a[4], (tuple, list)) and a[4] else None
        found = [(a[3], [(v, False) for v in (a[7] if len(a) > 7 else ())], 5)]
        if isinstance(mask, torch.fx.Node):  # a block mask holds its mask_mod last (None without one)
            found.append((mask, [(v, False) for v in (a[8] if len(a) > 8 else ())], 4))
        return found
    return [(graph, [(v, False) for v in values], 0) for graph, values in subgraph_operands(node)]


def check_hop_call(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    """Refuse a loaded call of a higher-order operator that does not have its operator's form
    (``subgraph_of(arg)``: the graph module a ``get_attr`` node reads, else None)."""
    name = hop_name(node)
    if name is None or name not in _ARITY:
        return
    fewest, most = _ARITY[name]
    count = len(_args(node))
    if count < fewest or (most is not None and count > most):
        takes = f"{fewest}" if fewest == most else f"at least {fewest}" if most is None else f"{fewest} to {most}"
        raise bad(f"Node {node.name} passes {count} positional arguments to {name}, which takes {takes}.",
                  where=where)
    if name not in _KEYWORDS_PASSED_ON:
        for key, value in node.kwargs.items():
            if key not in _KEYWORDS.get(name, ()) or not isinstance(value, str):
                raise bad(f"Node {node.name} passes the keyword {key!r} ({_what(value)}) to {name}, which takes "
                          f"{'only ' + repr(_KEYWORDS[name][0]) + ' (a string)' if name in _KEYWORDS else 'none'}.",
                          where=where)
    try:
        bound = bound_operands(node)
        if any(isinstance(v, str) for _, values, _ in bound for v, _ in values):
            raise TypeError  # a string read as a sequence of operands
    except (TypeError, IndexError, AttributeError):
        raise bad(f"Node {node.name} calls {name} with arguments not of its form "
                  f"({count} arguments: {', '.join(type(a).__name__ for a in _args(node))[:200]}).",
                  where=where) from None
    for graph, values, passed in bound:
        _check_subgraph(node, name, graph, values, passed, subgraph_of, where)
    _FORMS[name](node, subgraph_of, where)


def _check_subgraph(node: torch.fx.Node, name: str, graph: Any, values: list[tuple[Any, bool]], passed: int,
                    subgraph_of: SubgraphOf, where: str) -> None:
    gm = subgraph_of(graph)
    if gm is None:
        raise bad(f"Node {node.name} passes {_what(graph)} to {name} where a subgraph goes (a get_attr "
                  f"of one of the file's graphs).", where=where)
    inputs = _placeholders(gm)
    if len(inputs) != passed + len(values):
        own = f", after the {passed} values {name} passes it itself" if passed else ""
        raise bad(f"Node {node.name} binds {_count(len(values), 'operand')} to the subgraph {graph.target} of "
                  f"{name}{own}, but the subgraph takes {_count(len(inputs), 'input')}.", where=where)
    for ph, (v, sliced) in zip(inputs[passed:], values):
        why = _operand_misfit(ph.meta.get("val"), _value(v) if isinstance(v, torch.fx.Node) else v,
                              isinstance(v, torch.fx.Node), sliced)
        if why is not None:
            raise bad(f"Node {node.name} binds {_what(v)} to the input {ph.name} of the subgraph "
                      f"{graph.target} of {name}, which {why}.", where=where)


def _operand_misfit(want: Any, got: Any, is_node: bool, sliced: bool) -> Optional[str]:
    """Why the value ``got`` cannot stand for a subgraph input whose saved value is ``want``."""
    if isinstance(want, torch.Tensor):
        if not (is_node and isinstance(got, torch.Tensor)):
            return "is a tensor"
        rank = want.dim() + (1 if sliced else 0)
        if got.dim() != rank:
            sliced_text = ", sliced along its first dimension" if sliced else ""
            return f"takes a tensor of {_count(want.dim(), 'dimension')}{sliced_text} (the operand has {got.dim()})"
        if got.dtype != want.dtype:
            return f"is {want.dtype} (the operand is {got.dtype})"
        sizes = list(got.shape[1:] if sliced else got.shape)
        for i, (w, g) in enumerate(zip(want.shape, sizes)):
            if type(w) is int and type(g) is int and w != g:
                return f"has size {w} in dimension {i} (the operand has {g})"
        return None
    if isinstance(want, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        if isinstance(got, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
            return None
        return "is a number"
    return None


def _results(node: torch.fx.Node) -> Optional[int]:
    """How many results the call's saved value holds (None when it is no sequence or not saved)."""
    val = node.meta.get("val")
    return len(val) if isinstance(val, (tuple, list)) else None


def _cond(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    pred = _args(node)[0]
    if not isinstance(pred, (torch.fx.Node, bool)):
        raise bad(f"Node {node.name} passes {_what(pred)} as cond's predicate, which is a bool or a "
                  f"one-element tensor.", where=where)  # None would pick a branch as False does
    val = _value(pred)
    if isinstance(val, torch.Tensor) and all(type(s) is int for s in val.shape) and val.numel() != 1:
        raise bad(f"Node {node.name} passes {_what(pred)} of {val.numel()} elements as cond's predicate, "
                  f"which is a bool or a one-element tensor.", where=where)


def _while_loop(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    condition, body, carried = _args(node)[0], _args(node)[1], len(_args(node)[2])
    cond_graph = subgraph_of(condition)
    if cond_graph is not None and len(_returned(cond_graph)) != 1:
        raise bad(f"Node {node.name} passes the subgraph {condition.target} as while_loop's condition, "
                  f"which returns {len(_returned(cond_graph))} values, not one.", where=where)
    results = _results(node)
    if results is not None and results != carried:
        raise bad(f"Node {node.name}'s saved value holds {_count(results, 'result')}, but while_loop returns "
                  f"its {_count(carried, 'carried value')}.", where=where)
    body_graph = subgraph_of(body)
    if body_graph is not None and len(_returned(body_graph)) != carried:
        raise bad(f"Node {node.name} passes the subgraph {body.target} as while_loop's body, which returns "
                  f"{_count(len(_returned(body_graph)), 'value')} for {_count(carried, 'carried value')}.",
                  where=where)


def _scan(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    combine = subgraph_of(_args(node)[0])
    if combine is None:
        return
    returned, carried = _returned(combine), len(_args(node)[1])
    if len(returned) < carried:
        raise bad(f"Node {node.name} carries {carried} values through scan, but its subgraph "
                  f"{_args(node)[0].target} returns {len(returned)}.", where=where)
    results = _results(node)
    if results is not None and results != len(returned):
        raise bad(f"Node {node.name}'s saved value holds {_count(results, 'result')}, but its scan subgraph "
                  f"{_args(node)[0].target} returns {len(returned)}.", where=where)


def _map_impl(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    if not _args(node)[1]:
        raise bad(f"Node {node.name} maps over no inputs: map_impl's second argument is empty.", where=where)
    body = subgraph_of(_args(node)[0])
    results = _results(node)
    if body is not None and results is not None and results != len(_returned(body)):
        raise bad(f"Node {node.name}'s saved value holds {_count(results, 'result')}, but its map subgraph "
                  f"{_args(node)[0].target} returns {len(_returned(body))}.", where=where)


def _flex_attention(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    a = _args(node)
    for i, role in enumerate(("query", "key", "value")):
        if not isinstance(_value(a[i]), torch.Tensor) or not isinstance(a[i], torch.fx.Node):
            raise bad(f"Node {node.name} passes {_what(a[i])} as flex_attention's {role}, which is a tensor.",
                      where=where)
    checks = ((4, "block_mask", (tuple, list), "a tuple"), (5, "scale", (int, float), "a number"),
              (6, "kernel_options", dict, "a dict"))
    for i, role, kinds, text in checks:
        if not isinstance(a[i], kinds) or isinstance(a[i], bool):
            raise bad(f"Node {node.name} passes {_what(a[i])} as flex_attention's {role}, which is {text}.",
                      where=where)


def _flag(node: torch.fx.Node, name: str, value: Any, role: str, optional: bool, where: str) -> None:
    if not (isinstance(value, bool) or (optional and value is None)):
        raise bad(f"Node {node.name} passes {_what(value)} as {name}'s {role}, which is a bool"
                  f"{' or None' if optional else ''}.", where=where)


def _set_grad(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    _flag(node, "wrap_with_set_grad_enabled", _args(node)[0], "flag", False, where)


def _autocast(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    device, dtype, enabled, cache = _args(node)[:4]
    valid = isinstance(device, str)
    if valid:
        try:
            torch.device(device)
        except RuntimeError:
            valid = False
    if not valid:
        raise bad(f"Node {node.name} passes {device!r:.40} as wrap_with_autocast's device type, which is "
                  f"a device type such as 'cpu' or 'cuda'.", where=where)
    if not (dtype is None or isinstance(dtype, torch.dtype)):
        raise bad(f"Node {node.name} passes {_what(dtype)} as wrap_with_autocast's dtype, which is a "
                  f"torch.dtype or None.", where=where)
    _flag(node, "wrap_with_autocast", enabled, "enabled flag", False, where)
    _flag(node, "wrap_with_autocast", cache, "cache flag", True, where)


def _invoke_subgraph(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    identifier = _args(node)[1]
    if not (identifier is None or isinstance(identifier, str)):
        raise bad(f"Node {node.name} passes {_what(identifier)} as invoke_subgraph's identifier, which is a "
                  f"string or None.", where=where)


def _with_effects(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    token, op = _args(node)[0], _args(node)[1]
    val = _value(token)
    if not (isinstance(token, torch.fx.Node) and isinstance(val, torch.Tensor)) \
            or (all(type(d) is int for d in val.shape) and val.numel() != 0):  # a token holds no element
        raise bad(f"Node {node.name} passes {_what(token)} as with_effects' token, which is an empty "
                  f"tensor node (with_effects(token, op, *args)).", where=where)
    if isinstance(op, OpOverload):
        check_call(op, tuple(_args(node)[2:]), dict(node.kwargs), node.name, where)
    elif not isinstance(op, HigherOrderOperator):
        raise bad(f"Node {node.name} passes {_what(op)} as with_effects' operator, which is an operator "
                  f"(with_effects(token, op, *args)).", where=where)
    results = _results(node)
    if results is not None and results < 1:
        raise bad(f"Node {node.name}'s saved value holds no token: with_effects returns the token first.",
                  where=where)


def _written_arguments(op: OpOverload) -> list[Any]:
    return [p for p in schema_of(op).arguments if p.alias_info is not None and p.alias_info.is_write]


def _auto_functionalized(node: torch.fx.Node, subgraph_of: SubgraphOf, where: str) -> None:
    name = hop_name(node)
    op = _args(node)[0]
    if not isinstance(op, OpOverload):
        raise bad(f"Node {node.name} passes {_what(op)} as {name}'s operator, which is an operator "
                  f"overload that writes some of its arguments.", where=where)
    written = _written_arguments(op)
    if not written:
        raise bad(f"Node {node.name} passes {op} to {name}, which writes none of its arguments: "
                  f"{name} only calls operators that do.", where=where)
    kwargs = dict(node.kwargs)
    bases = None
    if name == "auto_functionalized_v2":
        bases = _bases(node, kwargs.pop("_all_bases", None), where)
        for p in written:
            if p.name in kwargs:
                raise bad(f"Node {node.name} passes {op}'s written argument {p.name!r} itself; "
                          f"auto_functionalized_v2 takes it as '_{p.name}_base_index' into '_all_bases'.",
                          where=where)
            kwargs[p.name] = _pop_views(node, op, p, kwargs, bases, where)  # the base it writes, checked below
    check_call(op, (), kwargs, node.name, where)
    results = _results(node)
    writes_out = any(r.alias_info is not None and r.alias_info.is_write for r in schema_of(op).returns)
    if results is not None and not writes_out:  # an out= operator's call returns its outputs only
        returns = len(schema_of(op).returns)
        expected = max(returns, 1) + (len(bases) if bases is not None else len(written))
        if results != expected:
            updated = f"{len(bases)} bases" if bases is not None else f"{len(written)} written arguments"
            raise bad(f"Node {node.name}'s saved value holds {_count(results, 'result')}, but {name} of {op} returns "
                      f"{expected} ({max(returns, 1)} from the operator, then its {updated}).", where=where)


def _bases(node: torch.fx.Node, bases: Any, where: str) -> list[Any]:
    if not isinstance(bases, (list, tuple)):
        raise bad(f"Node {node.name} passes {_what(bases)} as auto_functionalized_v2's '_all_bases', which is "
                  f"a list of tensor nodes.", where=where)
    for b in bases:
        if not (isinstance(b, torch.fx.Node) and isinstance(_value(b), torch.Tensor)):
            raise bad(f"Node {node.name} lists {_what(b)} in auto_functionalized_v2's '_all_bases', which "
                      f"holds tensor nodes.", where=where)
    return list(bases)


# a written argument that is a view of its base: the keywords that describe the view, all or none
_VIEW_FORMS = (("_alias",), ("_size", "_stride", "_storage_offset"), ("_slice_dim", "_slice_start", "_slice_end"))


def _pop_views(node: torch.fx.Node, op: OpOverload, param: Any, kwargs: dict[str, Any], bases: list[Any],
               where: str) -> Any:
    """Take the keywords auto_functionalized_v2 writes for one written argument out of ``kwargs``,
    refusing one missing, a base index outside ``_all_bases`` or a view described by halves; the
    base (or list of bases, or None) that stands for the argument."""
    count = len(bases)
    arg_type = str(param.real_type)
    if arg_type.startswith(("List[", "Optional[List[")):
        key = f"_{param.name}_length"
        if key not in kwargs:
            raise bad(f"Node {node.name} does not pass '{key}' for {op}'s written list {param.name!r}.",
                      where=where)
        length = kwargs.pop(key)
        if length is None:
            return None
        if type(length) is not int or length < 0:
            raise bad(f"Node {node.name} passes {_what(length)} as '{key}', which is a length.", where=where)
        prefixes = [f"_{param.name}_{i}" for i in range(length)]
    else:
        prefixes = [f"_{param.name}"]
    written: list[Any] = []
    for prefix in prefixes:
        key = f"{prefix}_base_index"
        if key not in kwargs:
            raise bad(f"Node {node.name} does not pass '{key}', the base in '_all_bases' that {op} writes "
                      f"through its argument {param.name!r}.", where=where)
        index = kwargs.pop(key)
        if index is None:
            written.append(None)
            continue
        if type(index) is not int or not 0 <= index < count:
            raise bad(f"Node {node.name} passes {index!r:.40} as '{key}', which indexes its {count} "
                      f"'_all_bases'.", where=where)
        written.append(bases[index])
        present = [form for form in _VIEW_FORMS if any(prefix + k in kwargs for k in form)]
        if len(present) > 1 or (present and not all(prefix + k in kwargs for k in present[0])):
            raise bad(f"Node {node.name} describes the view {op} writes through {param.name!r} with "
                      f"{sorted(k for k in kwargs if k.startswith(prefix + '_'))}, not one whole form "
                      f"({' / '.join(', '.join(prefix + k for k in form) for form in _VIEW_FORMS)}).",
                      where=where)
        for k in present[0] if present else ():
            kwargs.pop(prefix + k)
    return written if len(prefixes) != 1 or prefixes[0] != f"_{param.name}" else written[0]


_FORMS: dict[str, Callable[[torch.fx.Node, SubgraphOf, str], None]] = {
    "cond": _cond, "while_loop": _while_loop, "scan": _scan, "map_impl": _map_impl,
    "flex_attention": _flex_attention, "wrap_with_set_grad_enabled": _set_grad,
    "wrap_with_autocast": _autocast, "invoke_subgraph": _invoke_subgraph, "with_effects": _with_effects,
    "auto_functionalized": _auto_functionalized, "auto_functionalized_v2": _auto_functionalized,
}


def check_item_read(node: torch.fx.Node, where: str) -> None:
    """Refuse an item read (``getitem(node, i)``) past the results its producer's saved value holds."""
    if not (node.op == "call_function" and node.target is operator.getitem):
        return
    source, index = _args(node)
    results = _results(source) if isinstance(source, torch.fx.Node) else None
    if results is not None and type(index) is int and not -results <= index < results:
        raise bad(f"Node {node.name} reads item {index} of {source.name}, whose saved value holds "
                  f"{_count(results, 'result')}.", where=where)
