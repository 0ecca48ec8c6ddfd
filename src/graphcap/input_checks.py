"""Checks of runtime inputs against an exported signature, before any compute.

Built once per ``module()`` from the program: for every user input leaf its
path (``*args[0]``), and either the tensor's dtype, device and per-dimension
expectation (an int, or a symbol / expression over symbols with a range) or
the Python value the program was specialized on. Calling the checker returns
the flat leaves in placeholder order or raises ``RuntimeInputError`` naming the
path, what was expected and what came.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.utils._sympy.numbers import int_oo

from .dynamic import guard_text
from .errors import GuardFailedError, RuntimeInputError
from .pytree import input_path_str
from .signature import InputKind

_STATIC_FIX = ("The program was exported with this dimension static. To accept other sizes, export "
               "with dynamic_shapes marking it dynamic (e.g. {0: Dim('batch')}).")


@dataclass
class _TensorLeaf:
    path: str
    dtype: torch.dtype
    device: torch.device
    dims: list[Any]  # int or sympy expression


@dataclass
class _SymIntLeaf:
    path: str
    expr: Any  # sympy expression of the int input


@dataclass
class _ConstantLeaf:
    path: str
    value: Any


def _dim_expr(size: Any) -> Any:
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if expr.is_number else expr
    return int(size)


def _same_device(expected: torch.device, got: torch.device) -> bool:
    if expected.type != got.type:
        return False
    return expected.index is None or got.index is None or expected.index == got.index


class InputChecker:
    def __init__(self, ep):
        in_spec = ep.call_spec[0]
        self._in_spec = in_spec
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        user_specs = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        dummy = pytree.tree_unflatten([0] * in_spec.num_leaves, in_spec)
        paths = [input_path_str(p) for p, _ in pytree.tree_flatten_with_path(dummy)[0]]
        self._leaves: list[Any] = []
        for spec, path in zip(user_specs, paths):
            val = placeholders[spec.arg.name].meta.get("val")
            if isinstance(val, torch.Tensor):
                self._leaves.append(_TensorLeaf(path, val.dtype, val.device, [_dim_expr(s) for s in val.shape]))
            elif isinstance(val, torch.SymInt):  # an int marked dynamic (graphcap.dynamic)
                expr = _dim_expr(val)  # an int when the program specialized it after all
                self._leaves.append(_ConstantLeaf(path, expr) if isinstance(expr, int) else _SymIntLeaf(path, expr))
            else:
                self._leaves.append(_ConstantLeaf(path, getattr(spec.arg, "value", val)))
        self._ranges = {sym: rng for sym, rng in ep.range_constraints.items()}
        self._relations = _input_relations(ep.graph, self._leaves)
        # torch's names of the inputs, for the "Guard failed: ..." line (graphcap.dynamic.guard_text)
        call_graph = getattr(ep, "module_call_graph", None) or []
        self._arg_names = call_graph[0].signature.forward_arg_names if call_graph and call_graph[0].signature else None
        self._sym_paths = _symbol_paths(self._leaves)
        self._expr_paths = _symbol_paths(self._leaves, any_expression=True)

    def _tn(self, path: str) -> str:
        return guard_text.torch_name(path, self._arg_names)

    def _expr(self, expr: Any) -> str:
        return guard_text.expression(expr, self._sym_paths, self._arg_names)

    # -- structure -----------------------------------------------------------
    def _flatten(self, args: tuple, kwargs: dict) -> list[Any]:
        kw_spec = self._in_spec.child(1) if self._in_spec.num_children == 2 else None
        if kw_spec is not None and kw_spec.context is not None and set(kwargs) == set(kw_spec.context):
            kwargs = {k: kwargs[k] for k in kw_spec.context}
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            expected = pytree.tree_unflatten(["*"] * self._in_spec.num_leaves, self._in_spec)
            got = pytree.tree_unflatten(["*"] * spec.num_leaves, spec)
            raise RuntimeInputError(
                f"The inputs do not have the structure the program was exported with: expected "
                f"(args, kwargs) shaped like {_shape_str(expected)}, but got {_shape_str(got)}.",
                where="ep.module()(*args, **kwargs)",
                fix="Pass the same positional and keyword arguments, with the same containers, as "
                    "the example inputs given to export (each * is one tensor or value).")
        return leaves

    # -- leaves ----------------------------------------------------------------
    def __call__(self, args: tuple, kwargs: dict) -> list[Any]:
        leaves = self._flatten(args, kwargs)
        bindings: dict[sympy.Symbol, int] = {}
        deferred: list[tuple[str, Any, int]] = []
        for leaf, value in zip(self._leaves, leaves):
            if isinstance(leaf, _ConstantLeaf):
                self._check_constant(leaf, value)
                continue
            if isinstance(leaf, _SymIntLeaf):
                self._check_symint(leaf, value, bindings, deferred)
                continue
            self._check_tensor(leaf, value, bindings, deferred)
        for path, expr, got in deferred:
            self._check_derived(path, expr, got, bindings)
        sizes = {s: sympy.Integer(v) for s, v in bindings.items()} if self._relations else {}
        for relation, names in self._relations:
            if relation.xreplace(sizes) is sympy.false:
                got = ", ".join(f"{names[s]} = {bindings[s]}" for s in sorted(relation.free_symbols, key=lambda s: names[s]))
                raise GuardFailedError(
                    f"Expected the inputs to satisfy {relation.xreplace(_as_names(names))}, but got {got}."
                    + guard_text.line(self._expr(relation)),
                    fix="The program was specialized on this relation between input sizes at export "
                        "(a shape comparison in Python); export with inputs on the other side of it "
                        "to get a program for them, or use torch.cond to keep both sides.")
        return leaves

    def _check_constant(self, leaf: _ConstantLeaf, value: Any) -> None:
        if type(value) is not type(leaf.value) or value != leaf.value:
            raise GuardFailedError(
                f"Expected input at {leaf.path} to be equal to {leaf.value!r}, but got {value!r}."
                + guard_text.line(f"{self._tn(leaf.path)} == {leaf.value!r}"),
                fix="Python values (ints, floats, strings, flags) are baked into the exported "
                    "program; export again with this value to get a program for it.")

    # -- dynamic ints (graphcap.dynamic: an int marked dynamic is a SymInt input) ----
    def _check_symint(self, leaf: "_SymIntLeaf", value: Any, bindings, deferred) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to be an int, but got {type(value).__name__}",
                fix="Pass an int here, as in the example inputs given to export.")
        if not isinstance(leaf.expr, sympy.Symbol):
            deferred.append((leaf.path, leaf.expr, int(value)))
            return
        self._check_range(leaf.path, leaf.expr, value)
        if leaf.expr in bindings and bindings[leaf.expr] != value:
            raise GuardFailedError(
                f"Expected input at {leaf.path} to be equal to {bindings[leaf.expr]}, but got {value}."
                + guard_text.line(f"{self._tn(leaf.path)} == {self._tn(self._sym_paths[leaf.expr])}"),
                fix=f"This int shares the symbol {leaf.expr} with an earlier input of that value.")
        bindings[leaf.expr] = int(value)

    def _check_tensor(self, leaf: _TensorLeaf, value: Any, bindings, deferred) -> None:
        if not isinstance(value, torch.Tensor):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to be a tensor, but got {type(value).__name__}",
                fix="Pass a tensor here, as in the example inputs given to export.")
        if value.dtype != leaf.dtype:
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to have dtype {leaf.dtype}, but got {value.dtype}",
                fix=f"Convert the input first, e.g. x.to({leaf.dtype}).")
        if not _same_device(leaf.device, value.device):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to be on device {leaf.device}, but got {value.device}",
                fix=f"Move the input first (x.to('{leaf.device}')), or move the program with "
                    f"graphcap.move_to_device_pass.")
        if value.dim() != len(leaf.dims):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to have {len(leaf.dims)} dimensions, but got "
                f"{value.dim()}", fix="Pass a tensor of the same rank as the example input.")
        for i, (expected, got) in enumerate(zip(leaf.dims, value.shape)):
            path = f"{leaf.path}.shape[{i}]"
            if isinstance(expected, int):
                if got != expected:
                    raise GuardFailedError(
                        f"Expected input at {path} to be equal to {expected}, but got {got}."
                        + guard_text.line(f"{self._tn(path)} == {expected}"), fix=_STATIC_FIX)
            elif isinstance(expected, sympy.Symbol):
                self._check_range(path, expected, got)
                if expected in bindings and bindings[expected] != got:
                    raise GuardFailedError(
                        f"Expected input at {path} to be equal to {bindings[expected]}, but got {got}."
                        + guard_text.line(f"{self._tn(path)} == {self._tn(self._sym_paths[expected])}"),
                        fix=f"This dimension shares the symbol {expected} with an earlier input "
                            f"dimension of size {bindings[expected]}; the sizes must agree.")
                bindings[expected] = int(got)
            else:
                deferred.append((path, expected, int(got)))

    def _check_range(self, path: str, sym: Any, got: int, through: Any = None) -> None:
        """``through``: the size at ``path`` is this expression of ``sym`` (a derived dim)."""
        rng = self._ranges.get(sym)
        if rng is None:
            return
        lower, upper = rng.lower, rng.upper

        def shown(bound: Any) -> int:
            return int(through.subs(sym, bound)) if through is not None else int(bound)
        if _finite(lower) and got < int(lower):
            raise GuardFailedError(f"Expected input at {path} to be >= {shown(lower)}, but got "
                                   f"{through.subs(sym, got) if through is not None else got}."
                                   + guard_text.line(f"{self._tn(path)} >= {shown(lower)}"),
                                   fix=f"The program accepts sizes in [{lower}, {upper}] here.")
        if _finite(upper) and got > int(upper):
            raise GuardFailedError(f"Expected input at {path} to be <= {shown(upper)}, but got "
                                   f"{through.subs(sym, got) if through is not None else got}."
                                   + guard_text.line(f"{self._tn(path)} <= {shown(upper)}"),
                                   fix=f"The program accepts sizes in [{lower}, {upper}] here.")

    def _check_derived(self, path: str, expr: Any, got: int, bindings) -> None:
        self._check_range(path, expr, got)  # a derived size's own range first, as torch checks it
        free = expr.free_symbols
        if not free.issubset(bindings):
            root = next(iter(free))
            solved = sympy.solve(sympy.Eq(expr, got), root)
            if len(solved) != 1 or not solved[0].is_integer:
                raise GuardFailedError(
                    f"Expected input at {path} to be of the form {expr}, but got {got}."
                    + guard_text.line(guard_text.divisibility(self._tn(path), expr)),
                    fix=f"Choose a size that {expr} can take for an integer {root}.")
            bindings[root] = int(solved[0])
            self._check_range(path, root, int(solved[0]), through=expr)
        want = int(expr.subs(bindings))
        if want != got:
            same = self._expr_paths.get(expr)  # an earlier input size with this very expression
            other = self._tn(same) if same is not None and same != path else self._expr(expr)
            raise GuardFailedError(
                f"Expected input at {path} to be equal to {want}, but got {got}."
                + guard_text.line(f"{self._tn(path)} == {other}"),
                fix=f"This dimension is {expr} in the exported program.")


def _input_relations(graph: torch.fx.Graph, leaves: list[Any]) -> list[tuple[Any, dict]]:
    """The graph's runtime asserts over input sizes only, with the input path naming each symbol,
    so that ``module()`` refuses inputs that break them before computing anything."""
    names: dict[Any, str] = {}
    for leaf in leaves:
        if isinstance(leaf, _SymIntLeaf) and isinstance(leaf.expr, sympy.Symbol):
            names.setdefault(leaf.expr, leaf.path)
        if isinstance(leaf, _TensorLeaf):
            for i, d in enumerate(leaf.dims):
                if isinstance(d, sympy.Symbol):
                    names.setdefault(d, f"{leaf.path}.shape[{i}]")
    out = []
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default \
                and isinstance(node.args[0], torch.fx.Node):
            val = node.args[0].meta.get("val")
            expr = getattr(getattr(val, "node", None), "expr", None)
            if expr is not None and expr.free_symbols and expr.free_symbols <= set(names):
                out.append((expr, names))
    return out


def _symbol_paths(leaves: list[Any], any_expression: bool = False) -> dict:
    """Each input symbol (or, with ``any_expression``, each size expression) → the path of the
    first input size (or int) that is exactly it."""
    def wanted(e: Any) -> bool:
        return isinstance(e, sympy.Symbol) or (any_expression and isinstance(e, sympy.Expr) and not e.is_number)
    paths: dict[Any, str] = {}
    for leaf in leaves:
        if isinstance(leaf, _SymIntLeaf) and wanted(leaf.expr):
            paths.setdefault(leaf.expr, leaf.path)
        if isinstance(leaf, _TensorLeaf):
            for i, d in enumerate(leaf.dims):
                if wanted(d):
                    paths.setdefault(d, f"{leaf.path}.shape[{i}]")
    return paths


def _as_names(names: dict) -> dict:
    return {s: sympy.Symbol(n) for s, n in names.items()}


def _finite(bound: Any) -> bool:
    """A range bound that is a number (torch's ``int_oo`` says it is finite; it is not)."""
    return bool(bound.is_number and bound.is_finite) and bound not in (int_oo, -int_oo)


def _shape_str(tree: Any) -> str:
    return repr(tree).replace("'*'", "*")
