"""Checks of runtime inputs against an exported signature, before any compute.

Built once per ``module()`` from the program: for every user input leaf its
path (``*args[0]``), and either the tensor's dtype, device and per-dimension
expectation (an int, or a symbol / expression over symbols with a range) or
the Python value the program was specialized on. Calling the checker returns
the flat leaves in placeholder order or raises ``RuntimeInputError`` naming the
path, what was expected and what came.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch
from sympy.printing.precedence import precedence
from sympy.printing.str import StrPrinter

from .. import auto_flatten, module_inputs
from ..errors import ExportInputError, InputGuardError, InputStructureError, RuntimeInputError
from ..graph_arguments import InputKind, OutputKind
from ..pytree import input_path_str
from ..signature import call_graph_of, call_spec_of
from ..torch_private import pytree
from ..torch_private.fake import FakeTensor, same_storage
from ..torch_private.symbolic import bound_sympy, int_oo
from ..trace.naming.node_names import builtins_called_by_name
from . import input_guards as guards
from .input_guards import placeholder_leaves
from .input_structure import drawn_structure, first_difference, other_structure


def _static_fix(source: str, path: str, dim: int, others: Optional[dict[int, str]] = None) -> str:
    """How to make dimension ``dim`` of the input at ``source`` (``x``, ``L['x']``) dynamic, written as the
    spec entry for that input: its dynamic dims so far (``others``: dim -> the Dim's name) and this one."""
    import re
    top = re.fullmatch(r"([A-Za-z_][A-Za-z_0-9]*)", source) or re.fullmatch(r"L\['([A-Za-z_][A-Za-z_0-9]*)'\]", source)
    name = f"{top.group(1)}_dim{dim}" if top else f"dim{dim}"
    # the input's dynamic dims so far, by the variable holding the Dim (a hint's has no name: Dim.AUTO)
    dims = {d: (n if n.isidentifier() else "Dim.AUTO") for d, n in (others or {}).items()}
    dims[dim] = f"Dim({name!r})"
    entry = "{" + ", ".join(f"{d}: {dims[d]}" for d in sorted(dims)) + "}"
    spec = (f"dynamic_shapes={{{top.group(1)!r}: {entry}}}" if top
            else f"{entry} as the dynamic_shapes entry of the input at {path}")
    # The program does not know why the size is fixed: the spec left the dim static, or marked it
    # (Dim.AUTO, or any Dim under draft_export) and the model's code fixed the size while tracing.
    # A named Dim tells the two apart: the export succeeds, or stops naming the line that fixes it.
    return (f"The program holds this dimension at the example's size: dynamic_shapes left it static, or "
            f"the model's code fixed the size while tracing (Dim.AUTO and draft_export accept that). "
            f"To accept other sizes, export with {spec} (give the Dim a name of your choice; pass the "
            f"same Dim wherever a dimension must have the same size); if the code fixes this size, "
            f"that export stops with an error naming the line that does.")


@dataclass
class _TensorLeaf:
    path: str
    source: str  # torch's name of the input, for the ``Guard failed:`` line
    dtype: torch.dtype
    device: torch.device
    dims: list[Any]  # int or sympy expression
    accepted: tuple[torch.dtype, ...]  # the dtypes an input may have: ``dtype``, wider integers (_accepted)


@dataclass
class _SymIntLeaf:
    """An int input the spec made dynamic: a SymInt placeholder with a range."""

    path: str
    source: str
    expr: Any  # sympy expression of the int input


@dataclass
class _ConstantLeaf:
    path: str
    source: str
    value: Any


# the integer dtypes an input may widen to (InputChecker._accepted)
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                   torch.uint16, torch.uint32, torch.uint64)


def _dim_expr(size: Any) -> Any:
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if expr.is_number else expr
    return int(size)


def _same_device(expected: torch.device, got: torch.device) -> bool:
    if expected.type != got.type:
        return False
    return expected.index is None or got.index is None or expected.index == got.index


def _user_names(ep: Any) -> dict[Any, str]:
    from ..dynamic.symbol_names import dim_names
    try:
        return dim_names(ep)
    except Exception:  # names only serve messages: without them, symbols print as they are
        return {}


class InputChecker:
    """The checks of one program's inputs; ``check_structure`` then ``check_leaves`` (or call it)."""

    def __init__(self, ep: Any) -> None:
        in_spec = call_spec_of(ep)[0]
        self._in_spec = in_spec
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        user_specs = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        dummy = auto_flatten.unflatten(placeholder_leaves(in_spec), in_spec)
        paths = [input_path_str(p) for p, _ in auto_flatten.flatten_with_path(dummy)[0]]
        root = call_graph_of(ep)[0].signature if call_graph_of(ep) else None
        self.arg_names = guards.forward_names(getattr(root, "forward_arg_names", None), in_spec,
                                              avoid=builtins_called_by_name(ep.graph))
        sources = guards.leaf_sources(in_spec, self.arg_names)
        args_kwargs = guards.is_args_kwargs(in_spec)
        self._n_args = in_spec.child(0).num_children if args_kwargs else None
        self._kwarg_names = [str(k) for k in in_spec.child(1).context] if args_kwargs else []
        self._named_dtypes = _dtypes_named_in(ep.graph_module)
        self._leaves: list[Any] = []
        for spec, path, source in zip(user_specs, paths, sources):
            val = placeholders[spec.arg.name].meta.get("val")
            if isinstance(val, torch.Tensor):
                self._leaves.append(_TensorLeaf(path, source, val.dtype, val.device,
                                                [_dim_expr(s) for s in val.shape], self._accepted(val.dtype)))
            elif isinstance(val, torch.SymInt):  # an int marked dynamic (graphcap.dynamic)
                expr = _dim_expr(val)  # an int when the program specialized it after all
                self._leaves.append(_ConstantLeaf(path, source, expr) if isinstance(expr, int)
                                    else _SymIntLeaf(path, source, expr))
            else:
                self._leaves.append(_ConstantLeaf(path, source, getattr(spec.arg, "value", val)))
        # inputs the program's outputs write back (the inference IR): computed from their values on entry
        written = {s.target for s in ep.graph_signature.output_specs if s.kind is OutputKind.USER_INPUT_MUTATION}
        self._written = [i for i, spec in enumerate(user_specs) if spec.arg.name in written]
        self._ranges = {sym: rng for sym, rng in ep.range_constraints.items()}
        self._names = _user_names(ep)  # symbol -> Dim name, for messages
        self._relations = _input_relations(ep.graph, self._leaves)
        self._expr_ranges: dict[Any, Any] = {}  # derived-dim expression -> its range
        self._plan = self._compiled_plan()  # made here: dynamo cannot follow sympy (fits_compiled)

    @property
    def in_spec(self) -> Any:
        """The program's input tree spec: the structure of ``(args, kwargs)`` it takes."""
        return self._in_spec

    # -- structure -----------------------------------------------------------
    def check_structure(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse inputs whose containers, counts or keys differ from the exported ones
        (keys of a dict may come in any order: they are read by key)."""
        self._check_regrouped_structure(*self.regrouped(args, kwargs))

    def _check_regrouped_structure(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        spec = other_structure(args, kwargs, self._in_spec)
        if spec is None:
            return
        module_difference = module_inputs.describe_difference(self._in_spec, spec)
        if module_difference:
            raise InputStructureError(
                f"A module given as an input does not match the one the program was exported with: "
                f"{module_difference}.", where="ep.module()(*args, **kwargs)",
                fix="Pass an instance of the same class, configured the same way (its parameters and "
                    "buffers may hold other values), or export again with this module.")
        expected, got = drawn_structure(self._in_spec), drawn_structure(spec)
        raise InputStructureError(
            f"Trying to flatten user inputs with exported input tree spec: the inputs do not have "
            f"the structure the program was exported with: {first_difference(self._in_spec, spec)}. "
            f"Expected (args, kwargs) shaped like {expected}, but got {got}.",
            where="ep.module()(*args, **kwargs)",
            fix="Pass the same positional and keyword arguments, with the same containers, as "
                "the example inputs given to export (each * is one tensor or value)"
                + self._call_template() + ".")

    def _call_template(self) -> str:
        """``: ep.module()(x, scale=scale)``, the program's call in its argument names ('' when
        the names do not cover the top-level arguments)."""
        names, n_args = self.arg_names, self._n_args
        if n_args is None or len(names) != n_args + len(self._kwarg_names) or not names:
            return ""
        parts = list(names[:n_args]) + [f"{k}={k}" for k in names[n_args:]]
        return ": ep.module()(" + ", ".join(parts) + ")"

    def flat_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The input leaves in placeholder order, after the structure check."""
        args, kwargs = self.regrouped(args, kwargs)
        self._check_regrouped_structure(args, kwargs)
        return auto_flatten.flatten_by_spec((tuple(args), dict(kwargs)), self._in_spec)

    def regrouped(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` laid out as the program was exported, where the call passes by keyword
        an argument exported by position (``m(x, y=t)`` for ``export(m, (x, t))``), as eager's
        forward binds it: the exported positional arguments' names are ``module()``'s forward
        parameters (``def forward(self, x, y)``). The reverse, a positional value for an argument
        exported by keyword, is left to the structure check to refuse: the program does not know
        whether the model takes that argument by keyword only. A call that does not bind (an
        unknown or repeated name, too many or too few arguments) is returned as given."""
        names = self.arg_names
        n_args = self._n_args
        if n_args is None or len(names) != n_args + len(self._kwarg_names) or \
                (len(args) == n_args and set(kwargs) == set(self._kwarg_names)):
            return args, kwargs
        if len(args) > n_args:
            return args, kwargs
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key in bound or key not in names:
                return args, kwargs
            bound[key] = value
        if len(bound) != len(names):
            return args, kwargs
        return tuple(bound[n] for n in names[:n_args]), {n: bound[n] for n in names[n_args:]}

    # -- leaves ----------------------------------------------------------------
    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        leaves = self.flat_inputs(args, kwargs)
        self.check_leaves(leaves)
        return leaves

    def fits_compiled(self, leaves: tuple[Any, ...]) -> bool:
        """Whether the leaves pass the checks torch.compile can follow: plain Python over ints, dtypes
        and sizes (no sympy, no messages), which dynamo traces into guards on the compiled code. A
        size out of range then fails a guard, the module is traced again, this answers False and
        :meth:`check_leaves` raises the user's error. Derived sizes and relations between sizes are
        left to the graph's own runtime asserts."""
        bound: dict[Any, Any] = {}
        for entry, value in zip(self._plan, leaves):
            kind = entry[0]
            if kind == "tensor":
                _, accepted, device_type, dims = entry
                if not isinstance(value, torch.Tensor) or value.dim() != len(dims) \
                        or value.device.type != device_type or value.dtype not in accepted:
                    return False
                for size, (symbol, exact, lower, upper) in zip(value.shape, dims):
                    if (exact is not None and size != exact) or (lower is not None and size < lower) \
                            or (upper is not None and size > upper):
                        return False
                    if symbol is not None:
                        if symbol in bound and bound[symbol] != size:
                            return False
                        bound[symbol] = size
            elif kind == "int":
                _, lower, upper = entry
                if not isinstance(value, (int, torch.SymInt)) or isinstance(value, bool) \
                        or (lower is not None and value < lower) or (upper is not None and value > upper):
                    return False
            elif kind == "value" and (type(value) is not type(entry[1]) or value != entry[1]):
                return False
            elif kind == "float":  # the exported float (NaN for NaN), as _check_constant
                want = entry[1]
                if not isinstance(value, (float, torch.SymFloat)) \
                        or not (value == want or (want != want and value != value)):
                    return False
        return True

    def _compiled_plan(self) -> tuple[Any, ...]:
        """:meth:`fits_compiled`'s checks, made once: per leaf a tuple of ints, dtypes and names, read
        from the same leaves, accepted dtypes and bounds as :meth:`check_leaves` reads."""
        entries: list[tuple[Any, ...]] = []
        for leaf in self._leaves:
            if isinstance(leaf, _TensorLeaf):
                dims = tuple((None, d, None, None) if isinstance(d, int)
                             else (str(d) if isinstance(d, sympy.Symbol) else None, None, *self._bounds(d))
                             for d in leaf.dims)
                entries.append(("tensor", leaf.accepted, leaf.device.type, dims))
            elif isinstance(leaf, _SymIntLeaf):
                entries.append(("int", *self._bounds(leaf.expr)))
            elif type(leaf.value) in (int, bool, str, torch.dtype, torch.device) or leaf.value is None \
                    or isinstance(leaf.value, enum.Enum):
                entries.append(("value", leaf.value))
            elif type(leaf.value) is float:
                entries.append(("float", leaf.value))
            else:
                entries.append(("other",))  # objects: the eager check's alone
        return tuple(entries)

    def check_leaves(self, leaves: list[Any], paths: Optional[list[str]] = None) -> None:
        """Every leaf against its exported dtype, device, sizes or value, then the relations
        between sizes. While a tracer runs the check (re-export of ``module()``), a symbolic size
        is compared through guards and is never made concrete. ``paths``, one per leaf, name
        the leaves in messages instead of the program's input paths (leaves a caller rearranged,
        as an unflattened module's ``flat_args_adapter`` does)."""
        if len(leaves) != len(self._leaves):
            raise InputStructureError(
                f"Unexpected number of inputs (expected {len(self._leaves)}, got {len(leaves)})",
                fix="Pass the same inputs as the example inputs given to export.")
        specs = self._leaves
        if paths is not None:
            specs = [dataclasses.replace(leaf, path=path) for leaf, path in zip(self._leaves, paths)]
        bindings: dict[sympy.Symbol, Any] = {}
        sources: dict[sympy.Symbol, str] = {}
        deferred: list[tuple[_TensorLeaf, int, Any, int]] = []
        exprs: dict[Any, tuple[str, Any]] = {}  # derived-dim expression -> (first source, its size)
        for leaf, value in zip(specs, leaves):
            if isinstance(leaf, _ConstantLeaf):
                self._check_constant(leaf, value)
                continue
            if isinstance(leaf, _SymIntLeaf):
                self._check_symint(leaf, value, bindings, sources)
                continue
            self._check_tensor(leaf, value, bindings, sources, deferred, exprs)
        symbolic = any(isinstance(v, torch.SymInt) for v in bindings.values()) \
            or any(isinstance(got, torch.SymInt) for *_, got in deferred)
        for leaf, i, expr, got in deferred:
            if symbolic:
                self._check_derived_symbolic(leaf, i, expr, got, bindings)
            else:
                self._check_derived(leaf, i, expr, got, bindings, sources)
        if symbolic:
            return  # symbolic sizes: relations between them are the tracer's to record
        self._check_written_apart(specs, leaves)
        sizes = {s: sympy.Integer(v) for s, v in bindings.items()} if self._relations else {}
        for relation, names in self._relations:
            if relation.xreplace(sizes) is sympy.false:
                values = ", ".join(f"{names[s]} = {bindings[s]}"
                                   for s in sorted(relation.free_symbols, key=lambda s: names[s]))
                raise InputGuardError(
                    guards.with_guard(
                        f"Expected the inputs to satisfy {_relation_text(relation, names)}, but got {values}",
                        guards.expr_condition(relation, sources)),
                    fix="The program computes only for input sizes that satisfy this relation: either an "
                        "operator needs the sizes to agree (a broadcast, a copy into a slice; eager refuses "
                        "such inputs too), or a shape comparison in the model was decided at export from the "
                        "example inputs. Pass sizes that satisfy it; for a comparison, export with inputs on "
                        "its other side to get a program for them, or keep both sides with torch.cond.")

    def _check_written_apart(self, specs: list[Any], leaves: list[Any]) -> None:
        """Refuse an input the program writes back whose memory overlaps another input's.

        A program that lists its writes to inputs as outputs (the inference IR:
        ``run_decompositions()``, and what consumers run) computes every value from what the
        inputs held on entry and writes the new values back at the end; in eager, a write is
        seen at once through every tensor sharing that memory. The two agree only when the
        written input overlaps no other input. (The training IR writes in place in the graph,
        as eager does, so ``export()``'s own program needs no such check.)"""
        for i in self._written:
            written = leaves[i]
            if not _real_tensor(written):
                continue
            for j, other in enumerate(leaves):
                if j != i and _real_tensor(other) and _overlap(written, other):
                    raise RuntimeInputError(
                        f"Input at {specs[i].path} shares memory with the input at {specs[j].path}, and the "
                        f"program writes {specs[i].path}: its graph computes from the inputs' values on entry "
                        f"and writes the new value back at the end, so the input at {specs[j].path} would not "
                        f"see the write as it does in eager.",
                        fix="Pass tensors that do not share memory, e.g. a copy for one of them "
                            "(t.clone()), or run export()'s own program (before run_decompositions), which "
                            "writes in place as eager does.")

    def _check_constant(self, leaf: _ConstantLeaf, value: Any) -> None:
        same_nan = isinstance(leaf.value, float) and math.isnan(leaf.value) \
            and isinstance(value, float) and math.isnan(value)
        if type(value) is not type(leaf.value) or (value != leaf.value and not same_nan):
            raise InputGuardError(
                guards.with_guard(f"Expected input at {leaf.path} to be equal to {leaf.value!r}, but got "
                                  f"{_described(value)}",
                                  guards.value_condition(leaf.source, leaf.value)),
                fix="Python values (ints, floats, strings, flags) are baked into the exported "
                    "program; export again with this value to get a program for it.")

    def _check_symint(self, leaf: _SymIntLeaf, value: Any, bindings: dict[Any, Any], sources: dict[Any, str]) -> None:
        """A dynamic int input: an int, within its range, equal to other inputs sharing its symbol."""
        if isinstance(value, torch.SymInt):  # a tracer re-exporting module(): its range as a guard
            self._check_range(leaf.path, leaf.source, leaf.expr, value)
            bindings.setdefault(leaf.expr, value)
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to be an int, but got {type(value).__name__}",
                fix="Pass an int here, as in the example inputs given to export.")
        self._check_range(leaf.path, leaf.source, leaf.expr, value)
        if not isinstance(leaf.expr, sympy.Symbol):
            return
        if leaf.expr in bindings and bindings[leaf.expr] != value:
            raise InputGuardError(
                guards.with_guard(f"Expected input at {leaf.path} to be equal to {bindings[leaf.expr]}, "
                                  f"but got {value}", f"{leaf.source} == {sources[leaf.expr]}"),
                fix=f"This int shares the Dim {self._name_of(leaf.expr)} with an earlier input of that value.")
        bindings[leaf.expr] = int(value)
        sources[leaf.expr] = leaf.source

    def _name_of(self, sym: Any) -> str:
        """A symbol as the user named it (graphcap.dynamic.symbol_names), for messages."""
        return self._names.get(sym, str(sym))

    def _named(self, expr: Any) -> str:
        """An expression of symbols as the user writes it, for messages: ``2*s77 + 1`` -> ``2*d + 1``
        (the spec's Dim names; a symbol without one keeps its own)."""
        if not isinstance(expr, sympy.Basic):
            return str(expr)
        return str(expr.xreplace({s: sympy.Symbol(self._name_of(s)) for s in expr.free_symbols}))

    def _check_tensor(self, leaf: _TensorLeaf, value: Any, bindings: dict[Any, Any], sources: dict[Any, str],
                      deferred: list[tuple[_TensorLeaf, int, Any, Any]], exprs: dict[Any, Any]) -> None:
        if not isinstance(value, torch.Tensor):
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to be a tensor, but got {type(value).__name__}",
                fix="Pass a tensor here, as in the example inputs given to export.")
        if value.dtype not in leaf.accepted:
            # the second line is the phrase torch.export's in-graph dtype check raises with
            raise RuntimeInputError(
                f"Expected input at {leaf.path} to have dtype {leaf.dtype}, but got {value.dtype}\n"
                f"Tensor dtype mismatch! Expected {leaf.dtype}, got {value.dtype}",
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
            path, source = f"{leaf.path}.shape[{i}]", guards.size_source(leaf.source, i)
            if isinstance(expected, int):
                if got != expected:
                    raise InputGuardError(
                        guards.with_guard(f"Expected input at {path} to be equal to {expected}, but got {got}",
                                          f"{source} == {expected}"), fix=_static_fix(leaf.source, leaf.path, i, {
                            j: self._name_of(e) for j, e in enumerate(leaf.dims) if isinstance(e, sympy.Symbol)}))
            elif isinstance(expected, sympy.Symbol):
                self._check_range(path, source, expected, got)
                if expected in bindings:
                    if bindings[expected] != got:
                        raise InputGuardError(
                            guards.with_guard(
                                f"Expected input at {path} to be equal to {bindings[expected]}, but got {got}",
                                f"{source} == {sources[expected]}"),
                            fix=f"This dimension shares the Dim {self._name_of(expected)} with an earlier input "
                                f"dimension of size {bindings[expected]}; the sizes must agree.")
                else:
                    bindings[expected] = got if isinstance(got, torch.SymInt) else int(got)
                    sources[expected] = source
            else:
                self._check_expr(path, source, expected, got, exprs)
                deferred.append((leaf, i, expected, got))

    def _accepted(self, exported: torch.dtype) -> tuple[torch.dtype, ...]:
        """The dtypes an input exported as ``exported`` may have: that one, and an integer dtype wider
        than an exported integer one (int64 for int32), which computes what eager computes when the
        program never names the exported dtype (no cast, no dtype-typed factory): ATen's type
        promotion then decides every result dtype at run time, as in eager, and every value the
        exported dtype holds is held by the wider one. Narrower integers and other kinds of dtype
        stay refused."""
        if exported not in _INTEGER_DTYPES or exported in self._named_dtypes:
            return (exported,)
        want = torch.iinfo(exported)
        return (exported, *(d for d in _INTEGER_DTYPES if d != exported
                            and torch.iinfo(d).min <= want.min and torch.iinfo(d).max >= want.max))

    def _check_expr(self, path: str, source: str, expr: Any, got: Any, exprs: dict[Any, Any]) -> None:
        """A size given by an expression (a derived dim): within the range the expression takes,
        and equal to an earlier size with the same expression. Checked in input order, so the
        first input that breaks one is the one named."""
        self._check_range(path, source, expr, got)
        if expr in exprs:
            earlier, size = exprs[expr]
            if size != got:
                raise InputGuardError(
                    guards.with_guard(f"Expected input at {path} to be equal to {size}, but got {got}",
                                      f"{source} == {earlier}"),
                    fix=f"This dimension is {self._named(expr)} in the exported program, as an earlier input's is; "
                        f"the sizes must agree.")
        else:
            exprs[expr] = (source, got)

    def _range_of(self, expr: Any) -> Any:
        if expr in self._ranges or isinstance(expr, sympy.Symbol):
            return self._ranges.get(expr)
        if expr not in self._expr_ranges:  # fixed once the checker exists: bounded once, not per call
            known = expr.free_symbols <= set(self._ranges)
            self._expr_ranges[expr] = bound_sympy(expr, {s: self._ranges[s] for s in expr.free_symbols}) \
                if known else None
        return self._expr_ranges[expr]

    def _bounds(self, expr: Any) -> tuple[Optional[int], Optional[int]]:
        """The least and greatest value ``expr`` (a symbol or derived size) may take, None where unbounded."""
        rng = self._range_of(expr)
        if rng is None:
            return None, None
        return (int(rng.lower) if _finite(rng.lower) else None, int(rng.upper) if _finite(rng.upper) else None)

    def _check_range(self, path: str, source: str, sym: Any, got: Any) -> None:
        lower, upper = self._bounds(sym)
        if lower is None and upper is None:
            return
        rng = self._range_of(sym)
        if lower is not None and got < lower:
            raise InputGuardError(
                guards.with_guard(f"Expected input at {path} to be >= {lower}, but got {got}",
                                  f"{source} >= {lower}"),
                fix=f"The program accepts sizes in [{rng.lower}, {rng.upper}] here.")
        if upper is not None and got > upper:
            raise InputGuardError(
                guards.with_guard(f"Expected input at {path} to be <= {upper}, but got {got}",
                                  f"{source} <= {upper}"),
                fix=f"The program accepts sizes in [{rng.lower}, {rng.upper}] here.")

    def _check_derived_symbolic(self, leaf: _TensorLeaf, dim: int, expr: Any, got: Any,
                                bindings: dict[Any, Any]) -> None:
        """A derived-dim size while a tracer re-exports ``module()`` (sizes may be SymInts): the
        same facts as :meth:`_check_derived` — a size of the form ``a*root + b``, equal to what the
        bound root gives — asked of the sizes as Python conditions, so the tracer decides each from
        its own spec (a size given as ``2*dim`` is even whatever ``dim`` is) or records it as a
        guard to check against that spec, and nothing is made concrete."""
        path, source = f"{leaf.path}.shape[{dim}]", guards.size_source(leaf.source, dim)
        root = next((r for r in expr.free_symbols if r not in bindings), None)
        if root is not None:
            form = _linear(expr, root) if len(expr.free_symbols) == 1 else None
            if form is None:
                return  # not a derived dim torch's spec can write: nothing to ask of the size
            scale, offset = form
            if (got - offset) % abs(scale) != 0:
                raise InputGuardError(
                    guards.with_guard(f"Expected input at {path} to be of the form {self._named(expr)}, but got {got}",
                                      _form_condition(source, expr, root)),
                    fix=f"Choose a size that {self._named(expr)} can take for an integer {self._name_of(root)}.")
            bindings[root] = (got - offset) // scale
            return
        roots = list(expr.free_symbols)
        form = _linear(expr, roots[0]) if len(roots) == 1 else None
        if form is not None and got != form[0] * bindings[roots[0]] + form[1]:
            raise InputGuardError(
                f"Expected input at {path} to be equal to {self._named(expr)}, but got {got}",
                fix=f"This dimension is {self._named(expr)} in the exported program.")

    def _check_derived(self, leaf: _TensorLeaf, dim: int, expr: Any, got: int, bindings: dict[Any, Any],
                       sources: dict[Any, str]) -> None:
        path, source = f"{leaf.path}.shape[{dim}]", guards.size_source(leaf.source, dim)
        free = expr.free_symbols
        if not free.issubset(bindings):
            root = next(iter(free))
            solved = sympy.solve(sympy.Eq(expr, got), root)
            if len(solved) != 1 or not solved[0].is_integer:
                raise InputGuardError(
                    guards.with_guard(f"Expected input at {path} to be of the form {self._named(expr)}, but got {got}",
                                      _form_condition(source, expr, root)),
                    fix=f"Choose a size that {self._named(expr)} can take for an integer {self._name_of(root)}.")
            bindings[root] = int(solved[0])
            self._check_range(path, source, root, int(solved[0]))
        want = int(expr.subs(bindings))
        if want != got:
            # over unbacked sizes (u0: a ShapesSpec's ShapeVar) the relation is an assert of the
            # graph, which torch words as such; over backed ones it is a guard
            phrase = guards.with_assertion if all(str(s).startswith("u") for s in free) else guards.with_guard
            raise InputGuardError(
                phrase(f"Expected input at {path} to be equal to {want}, but got {got}",
                       f"{guards.expr_condition(expr, sources)} == {source}"),
                fix=f"This dimension is {self._named(expr)} in the exported program.")


def _described(value: Any) -> str:
    """A value given where the program holds a Python constant, for a message: its repr, or a
    tensor's kind and size (its elements could fill a screen)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({type(value).__name__})"


def _real_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor) and value.device.type != "meta"


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' elements may share memory: one storage, intersecting byte ranges."""
    if not same_storage(a, b) or a.numel() == 0 or b.numel() == 0:
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = int(t.storage_offset()) * t.element_size()
        extent = sum((int(s) - 1) * abs(int(st)) for s, st in zip(t.shape, t.stride())) + 1
        return start, start + extent * t.element_size()
    (a0, a1), (b0, b1) = span(a), span(b)
    if not (a0 < b1 and b0 < a1):
        return False
    # interleaved views (x[:, 0] and x[:, 1]) span the same bytes without sharing an element
    if a.element_size() == b.element_size() and a.numel() + b.numel() <= _EXACT_OVERLAP_LIMIT:
        return bool(torch.isin(_element_offsets(a), _element_offsets(b)).any())
    return True


_EXACT_OVERLAP_LIMIT = 1 << 22  # elements: above, overlapping byte spans count as overlap


def _element_offsets(t: torch.Tensor) -> torch.Tensor:
    """The storage offset of each element of ``t``, in elements."""
    offsets = torch.full((), int(t.storage_offset()), dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride()):
        offsets = offsets.unsqueeze(-1) + torch.arange(int(size), dtype=torch.int64) * int(stride)
    return offsets.reshape(-1)


def _linear(expr: Any, root: Any) -> Optional[tuple[int, int]]:
    """``(a, b)`` when ``expr`` is ``a*root + b`` with integers ``a != 0`` and ``b`` (a derived dim)."""
    scale, offset = expr.coeff(root), expr.subs(root, 0)
    if (expr - scale * root - offset).is_zero and scale.is_Integer and offset.is_Integer and scale != 0:
        return int(scale), int(offset)
    return None


def _form_condition(source: str, expr: Any, root: Any) -> str:
    """torch's condition for a size of the form ``a*root + b``: its remainder modulo ``a``
    (``w.size()[0] % 2 == 1``), the one fact an integer ``root`` needs."""
    scale, offset = expr.coeff(root), expr.subs(root, 0)
    if (expr - scale * root - offset).is_zero and scale.is_Integer and offset.is_Integer and abs(scale) > 1:
        return f"{source} % {abs(int(scale))} == {int(offset) % abs(int(scale))}"
    return f"{source} == {guards.expr_condition(expr, {root: root.name})}"


def _input_relations(graph: torch.fx.Graph, leaves: list[Any]) -> list[tuple[Any, dict[Any, str]]]:
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


def _dtypes_named_in(gm: torch.fx.GraphModule) -> set[torch.dtype]:
    """Every dtype an operator of the program (its subgraphs included) takes as an argument."""
    named = set()
    for mod in gm.modules():
        if not isinstance(mod, torch.fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            for leaf in pytree.tree_leaves((node.args, node.kwargs)):
                if isinstance(leaf, torch.dtype):
                    named.add(leaf)
    return named


def _as_names(names: dict[Any, str]) -> dict[Any, Any]:
    return {s: sympy.Symbol(n) for s, n in names.items()}


class _SizesPrinter(StrPrinter):  # type: ignore[misc]
    """Products of input sizes with spaces (``*args[0].shape[0] * *args[0].shape[1]``): input paths start
    with ``*``, so sympy's ``a*b`` would read ``*args[0].shape[0]**args[0].shape[1]``, a power."""

    def _print_Mul(self, expr: Any) -> str:
        coeff, factors = expr.as_coeff_mul()
        parts = [self.parenthesize(f, precedence(expr)) for f in factors]
        if coeff == -1:
            return "-" + " * ".join(parts)
        return " * ".join(([self._print(coeff)] if coeff != 1 else []) + parts)


def _relation_text(relation: Any, names: dict[Any, str]) -> str:
    """A relation between input sizes in the inputs' names, products spelled apart."""
    return str(_SizesPrinter().doprint(relation.xreplace(_as_names(names))))


def _finite(bound: Any) -> bool:
    """A range bound that is a number (torch's ``int_oo`` says it is finite; it is not)."""
    return bool(bound.is_number and bound.is_finite) and bound not in (int_oo, -int_oo)


def check_example_inputs(value: Any, in_spec: Any) -> None:
    """Refuse example inputs that are not ``(args_tuple, kwargs_dict)`` with the program's input
    structure (keyword order aside): what ``ep.example_inputs = ...`` accepts."""
    if value is None:
        return
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and isinstance(value[1], dict)):
        raise ExportInputError(
            f"Example inputs must be a tuple (args, kwargs) of a tuple and a dict, but got "
            f"{type(value).__name__}.", where="ep.example_inputs = ...",
            fix="Assign ((x, y), {}) for positional inputs x and y, ((x,), {'flag': f}) with keywords.")
    spec = other_structure(*value, in_spec) if in_spec is not None else None
    if spec is not None:
        raise ExportInputError(
            f"Trying to flatten user inputs with exported input tree spec: the example inputs are "
            f"shaped like {drawn_structure(spec)}, but the program takes {drawn_structure(in_spec)}.",
            where="ep.example_inputs = ...",
            fix="Give inputs with the same positional and keyword arguments and containers as the program.")
