"""Match a ``dynamic_shapes`` spec to the flattened example inputs.

The spec mirrors the inputs: a dict keyed by argument names or a tuple/list
by position, nested like the pytree inputs, with ``None`` for static parts
and, per tensor, a dict ``{dim: Dim}`` or a list/tuple over its dims. The
result is one entry per flat input leaf (in ``(args, kwargs)`` flatten order):
``None`` or ``{dim index: Dim | DerivedDim | DimHint | int}``, or for a
Python int marked dynamic an :class:`IntSpec`. Every mistake is
a ``DynamicSpecError`` (an ``ExportInputError`` and torch's ``UserError``) naming the
input path and what to change.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch

from ..errors import DynamicSpecError
from ..torch_private import pytree
from .dims import DerivedDim, Dim, DimHint, as_dim
from .named_inputs import combined_inputs
from .shape_var_specs import SpecSize

# torch's own leaf test (registered types count as nodes); public from torch 2.14 on
_is_leaf = pytree.is_leaf


@dataclass(frozen=True)
class IntSpec:
    """A Python int input marked dynamic: it becomes a SymInt input with ``dim``'s range."""

    dim: Any  # Dim or DimHint


LeafSpec = Union[None, dict[int, Any], IntSpec]


def _children(value: Any) -> Optional[tuple[list[Any], list[str], Any]]:
    """One pytree level of ``value``: children, their path suffixes, context (None for a leaf)."""
    if _is_leaf(value):
        return None
    node = pytree.node_type(value)
    handler = pytree.SUPPORTED_NODES[node]
    children, context = handler.flatten_fn(value)
    if handler.flatten_with_keys_fn is not None:
        keyed, _ = handler.flatten_with_keys_fn(value)
        suffixes = [pytree.keystr((k,)) for k, _ in keyed]
    else:
        suffixes = [f"[{i}]" for i in range(len(children))]
    return list(children), suffixes, context


def _resized_list_fix(spec: Sequence[Any], rank: int, path: str) -> str:
    """The fix for a per-dim list of another length than the tensor's rank: the list cut or padded
    with None (static) at the end, written as code."""
    entries = [as_dim(e) for e in list(spec)[:rank]] + [None] * max(0, rank - len(spec))  # graphcap's reprs
    told = ("the entries given taken as the leading dims, the rest static" if len(spec) < rank
            else "the entries past the last dim dropped")
    return (f"List one entry per dimension (None for static ones), or use a dict {{dim: Dim}}: in place "
            f"of dynamic_shapes{path} write {tuple(entries)!r} ({told}).")


def _rekeyed_spec_fix(names: list[str], spec: dict, missing: list[str], extra: list[Any]) -> str:
    """The fix for a spec dict keyed by other names than forward's: the unknown keys renamed, in
    order, to the missing argument names, written as code over the user's dict."""
    general = ("Key dynamic_shapes by the argument names of forward for the inputs you pass "
               "(None for static ones), or give a tuple with one entry per input.")
    if missing and not extra:  # inputs left out of the dict: static, written as None
        entries = ", ".join(f"{n!r}: dynamic_shapes[{n!r}]" if n in spec else f"{n!r}: None" for n in names)
        return (f"{general} With {', '.join(map(repr, missing))} static: "
                f"dynamic_shapes = {{{entries}}}.")
    if not extra or not missing:
        return general
    renamed = dict(zip(missing, extra))
    entries = ", ".join(f"{n!r}: dynamic_shapes[{renamed[n]!r}]" if n in renamed
                        else (f"{n!r}: dynamic_shapes[{n!r}]" if n in spec else f"{n!r}: None")
                        for n in names)
    told = ", ".join(f"{old!r} to {new!r}" for new, old in renamed.items())
    left = [k for k in extra if k not in renamed.values()]
    return (f"{general} Renaming {told} (in the order given: check each goes to the input you meant): "
            f"dynamic_shapes = {{{entries}}}"
            + (f" ({', '.join(map(repr, left))} left out: forward has no more inputs)" if left else "") + ".")


def _torch_words(sentence: str) -> str:
    """torch.export's key phrase for a spec mistake (the statement of the mismatch, not its advice),
    in parentheses after graphcap's message: code written against torch.export matches on it."""
    return f" ({sentence})"


def _mismatch(tpath: str, what: str) -> str:
    return _torch_words(f"Detected mismatch between the structure of `inputs` and `dynamic_shapes`: "
                        f"`inputs{tpath}` {what}")


def _fix_hint() -> str:
    return ("Give the spec the structure of the inputs: a dict keyed by argument names (or a tuple by "
            "position), None for a static input, and per tensor a dict {dim: Dim} or a list over its dims.")


def _is_static(d: Any) -> bool:
    """``Dim.STATIC``, with or without bounds (``Dim.STATIC(min=6, max=8)``): the example size."""
    return isinstance(d, DimHint) and d.kind is DimHint.Kind.STATIC


def _check_example_in_hint(d: DimHint, size: int, where: str) -> None:
    """``Dim.STATIC(min=, max=)`` must admit the example, its only size: else no input fits.

    (``Dim.AUTO`` / ``Dim.DYNAMIC`` bounds are checked against the example after the trace,
    with what the trace found: ``hints.apply_bounds``.)"""
    if d.kind is not DimHint.Kind.STATIC:
        return
    lo, hi = d.min, d.max
    if (lo is None or size >= lo) and (hi is None or size <= hi):
        return
    raise DynamicSpecError(
        f"Found the following conflicts between user-specified ranges and inferred ranges from model "
        f"tracing:\n- Received user-specified min/max range of [{lo}, {hi}], conflicting with the inferred "
        f"min/max range of [{size}, {size}], for inputs{where}.",
        where=f"dynamic_shapes{where}",
        fix=f"Dim.STATIC takes the example's size ({size}): change the example input to a size in "
            f"[{lo}, {hi}], or drop the bounds.")


class _Walker:
    def __init__(self, from_shapes_spec: bool = False):
        self.from_shapes_spec = from_shapes_spec  # torch's ShapesSpec / ParamsSpec, translated
        self.leaf_specs: list[LeafSpec] = []
        self.leaf_paths: list[str] = []
        self.names: dict[str, tuple[Any, str]] = {}  # dim name -> (root Dim, first path)

    def walk(self, value: Any, spec: Any, path: str, tpath: Optional[str] = None) -> None:
        """``path`` names the input by argument name (graphcap's messages); ``tpath`` as torch.export's
        messages name it (``[0]...`` when the spec is a tuple by position)."""
        tpath = path if tpath is None else tpath
        if isinstance(value, torch.Tensor):
            self.leaf_specs.append(self._tensor_spec(value, spec, path, tpath))
            self.leaf_paths.append(path)
            return
        kids = _children(value)
        if kids is None:
            if spec is not None and as_dim(spec) is not None and not _is_static(as_dim(spec)):
                if isinstance(value, int) and not isinstance(value, bool):
                    self.leaf_specs.append(self._int_spec(value, as_dim(spec), path))
                    self.leaf_paths.append(path)
                    return
                raise DynamicSpecError(
                    f"dynamic_shapes{path} gives {spec!r} for a {type(value).__name__} input, which has no "
                    f"shape." + _torch_words(f"Cannot associate shape {spec} specified at `dynamic_shapes{tpath}` "
                                             f"to non-tensor type {type(value)} at `inputs{tpath}` (expected None)"),
                    where=f"dynamic_shapes{path}", fix="Use None for non-tensor inputs.")
            self.leaf_specs.append(None)
            self.leaf_paths.append(path)
            return
        children, suffixes, context = kids
        if spec is None:
            for child, suffix in zip(children, suffixes):
                self.walk(child, None, path + suffix, tpath + suffix)
            return
        spec_children = self._spec_children(value, spec, children, path, tpath)
        for child, child_spec, suffix in zip(children, spec_children, suffixes):
            self.walk(child, child_spec, path + suffix, tpath + suffix)

    def _spec_children(self, value: Any, spec: Any, children: list[Any], path: str, tpath: str) -> list[Any]:
        def not_same_kind() -> str:
            other = f"is a {type(spec)}" if isinstance(spec, (dict, list, tuple)) else "is not"
            return _mismatch(tpath, f"is a {type(value)}, but `dynamic_shapes{tpath}` {other}")

        if isinstance(value, dict):
            if not isinstance(spec, dict):
                raise DynamicSpecError(
                    f"dynamic_shapes{path} is a {type(spec).__name__}, but the input there is a dict with "
                    f"keys {list(value)}." + not_same_kind(), where=f"dynamic_shapes{path}", fix=_fix_hint())
            if set(spec) != set(value):
                raise DynamicSpecError(
                    f"dynamic_shapes{path} has keys {sorted(map(str, spec))}, but the input there has keys "
                    f"{sorted(map(str, value))}." + _mismatch(tpath, f"has keys {list(value)}, but "
                                                                      f"`dynamic_shapes{tpath}` has keys {list(spec)}"),
                    where=f"dynamic_shapes{path}",
                    fix="Use exactly the keys of the input dict (None for the static entries).")
            return [spec[k] for k in value]
        if isinstance(spec, (list, tuple)):
            if type(value) in (list, tuple) and type(spec) is not type(value):
                # a tuple spec for a list input (or the reverse): torch.export refuses it
                raise DynamicSpecError(
                    f"dynamic_shapes{path} is a {type(spec).__name__}, but the input there is a "
                    f"{type(value).__name__}." + not_same_kind(), where=f"dynamic_shapes{path}",
                    fix=f"Give a {type(value).__name__} there, as the input has.")
            if len(spec) != len(children):
                raise DynamicSpecError(
                    f"dynamic_shapes{path} has {len(spec)} entries, but the input there has {len(children)}."
                    + _mismatch(tpath, f"has {len(children)} elements, but `dynamic_shapes{tpath}` has "
                                       f"{len(spec)} elements"),
                    where=f"dynamic_shapes{path}", fix=_fix_hint())
            return list(spec)
        if type(spec) is type(value):
            spec_kids = _children(spec)
            if spec_kids is not None and len(spec_kids[0]) == len(children):
                return spec_kids[0]
        raise DynamicSpecError(
            f"dynamic_shapes{path} is a {type(spec).__name__}, but the input there is a "
            f"{type(value).__name__} with {len(children)} entries."
            + (not_same_kind() if type(value) in (dict, list, tuple) else ""), where=f"dynamic_shapes{path}",
            fix=_fix_hint())

    def _tensor_spec(self, t: torch.Tensor, spec: Any, path: str, tpath: str) -> LeafSpec:
        if spec is None:
            return None
        if isinstance(spec, dict):
            items = list(spec.items())
        elif isinstance(spec, (list, tuple)):
            if len(spec) != t.dim():
                raise DynamicSpecError(
                    f"dynamic_shapes{path} lists {len(spec)} dims, but the tensor there has {t.dim()} "
                    f"(shape {tuple(t.shape)})." + _torch_words(
                        f"Expected dynamic shape spec {spec} specified at `dynamic_shapes{tpath}` to have the same "
                        f"length as the actual tensor shape {t.shape} (expected {t.dim()}, but got {len(spec)} "
                        f"instead)"), where=f"dynamic_shapes{path}",
                    fix=_resized_list_fix(spec, t.dim(), path))
            items = list(enumerate(spec))
        else:
            hint = as_dim(spec)
            if isinstance(hint, DimHint):  # one hint for the whole tensor
                items = [(i, hint) for i in range(t.dim())]
            else:
                raise DynamicSpecError(
                    f"dynamic_shapes{path} is {spec!r}; a tensor's spec is a dict {{dim: Dim}}, a list over "
                    f"its dims, or None." + _torch_words(
                        f"Unexpected input tensor shape {spec} specified at `dynamic_shapes{tpath}` (expected "
                        f"either a list/tuple of dimensions, or a dict mapping indices to dimensions, where each "
                        f"dimension is an int, a Dim, Dim.AUTO, Dim.STATIC, or Dim.DYNAMIC)"),
                    where=f"dynamic_shapes{path}",
                    fix=(f"A Dim stands for one dimension: key it by its index, in place of "
                         f"dynamic_shapes{path} write {{0: {hint!r}}} for dim 0 (the tensor has {t.dim()} "
                         f"dims, shape {tuple(t.shape)})." if isinstance(hint, (Dim, DerivedDim)) else _fix_hint()))
        out: dict[int, Any] = {}
        for dim, entry in items:
            if not isinstance(dim, int) or isinstance(dim, bool):
                raise DynamicSpecError(f"dynamic_shapes{path} has key {dim!r}; dims are ints.",
                                       where=f"dynamic_shapes{path}", fix="Key the dict by dimension index.")
            if not -t.dim() <= dim < t.dim():
                raise DynamicSpecError(
                    f"dynamic_shapes{path} names dim {dim}, but the tensor there has {t.dim()} dims "
                    f"(shape {tuple(t.shape)}).", where=f"dynamic_shapes{path}[{dim}]",
                    fix=f"Use a dim index in 0..{t.dim() - 1}.")
            dim = dim % t.dim()
            d = as_dim(entry)
            where = f"{path}.shape[{dim}]"
            if isinstance(d, DimHint):
                _check_example_in_hint(d, int(t.shape[dim]), where)
            if d is None or _is_static(d):
                continue
            if isinstance(d, int):
                if d != t.shape[dim]:
                    # the parenthesis is torch's sentence for this mistake in a ShapesSpec / ParamsSpec
                    torch_words = (f" (shapes_spec declares dim {dim} as static with value {d}, but got "
                                   f"{t.shape[dim]})" if self.from_shapes_spec else "")
                    raise DynamicSpecError(
                        f"dynamic_shapes{path} fixes dim {dim} to {d}, but the example input has size "
                        f"{t.shape[dim]} there{torch_words}." + _torch_words(
                            f"Static shape constraint of {d} does not match input size of {t.shape[dim]}, "
                            f"for L{path}.size()[{dim}]"), where=where,
                        fix=f"Use {t.shape[dim]}, or change the example input.")
                continue
            if isinstance(d, SpecSize):
                out[dim] = d
                continue
            if not isinstance(d, (Dim, DimHint)):
                torch_sentence = (
                    f"Unexpected dimension mapped to index {dim} in input tensor shape {spec} specified at "
                    f"`dynamic_shapes{tpath}` (expected None, an int, a Dim, Dim.AUTO, Dim.STATIC, or "
                    f"Dim.DYNAMIC,  but got {entry!r} instead)" if isinstance(spec, dict) else
                    f"Unexpected dimension #{dim} in input tensor shape {spec} specified at "
                    f"`dynamic_shapes{tpath}` (expected None, an int, a Dim, Dim.AUTO, Dim.STATIC, or "
                    f"Dim.DYNAMIC, but got {entry!r} instead)")
                raise DynamicSpecError(
                    f"dynamic_shapes{path}[{dim}] is {entry!r}, which is not a Dim, Dim.AUTO/DYNAMIC/STATIC, "
                    f"an int or None." + _torch_words(torch_sentence), where=where,
                    fix=(f"Make it a Dim of that name: in place of dynamic_shapes{path}[{dim}] write "
                         f"Dim({entry!r}) (from graphcap import Dim; one Dim object wherever that size "
                         f"appears)." if isinstance(entry, str) and entry.isidentifier() else _fix_hint()))
            if isinstance(d, Dim):
                self._check_name(d, where)
            out[dim] = d
        return out or None

    def _int_spec(self, value: int, d: Any, path: str) -> LeafSpec:
        if isinstance(d, int) and not isinstance(d, bool):
            if d != value:
                raise DynamicSpecError(
                    f"dynamic_shapes{path} fixes the int input to {d}, but the example input is {value}.",
                    where=f"dynamic_shapes{path}", fix=f"Use {value}, or change the example input.")
            return None
        if isinstance(d, SpecSize):
            return IntSpec(d)
        if isinstance(d, DerivedDim) or not isinstance(d, (Dim, DimHint)):
            raise DynamicSpecError(
                f"dynamic_shapes{path} is {d!r} for the int input {value!r}; an int input takes a Dim, "
                f"Dim.AUTO / Dim.DYNAMIC / Dim.STATIC, or None.", where=f"dynamic_shapes{path}",
                fix="Mark the int with Dim.DYNAMIC (or a named Dim), or None to bake it in.")
        if isinstance(d, Dim):
            self._check_name(d, path)
        if isinstance(d, DimHint):
            _check_example_in_hint(d, value, path)
            if _is_static(d):
                return None
        return IntSpec(d)

    def _check_name(self, d: Dim, where: str) -> None:
        root = d.root if isinstance(d, DerivedDim) else d
        name = root.__name__
        seen = self.names.get(name)
        if seen is None:
            self.names[name] = (root, where)
            return
        other, other_where = seen
        if other is not root and (other.min, other.max) != (root.min, root.max):
            raise DynamicSpecError(
                f"Found different definitions {other!r} and {root!r} for the same symbolic dimension "
                f"{name!r}: The name {name!r} is used for two different Dims (at {other_where} and {where}).",
                where=where,
                fix="Create the Dim once and use the same object wherever that size appears (or give the "
                    "other one its own name).")


def match_spec(m: Any, args: tuple, kwargs: dict, dynamic_shapes: Any) -> tuple[list[LeafSpec], list[str]]:
    """Per flat input leaf (order of ``tree_flatten((args, kwargs))``) its spec entry.

    Also returns each leaf's path by argument name (``['x'][0]``), which names
    the leaf's symbols. A tuple spec lists the inputs in the order of
    forward's parameters, whatever order the keyword inputs were passed in.
    """
    ordered = _signature_ordered(m, kwargs)
    specs, paths = _match_in_signature_order(m, args, ordered, dynamic_shapes)
    n_args = len(pytree.tree_leaves(args))
    sizes = {k: len(pytree.tree_leaves(v)) for k, v in kwargs.items()}
    start, pos = {}, n_args
    for k in ordered:
        start[k], pos = pos, pos + sizes[k]
    order = list(range(n_args)) + [i for k in kwargs for i in range(start[k], start[k] + sizes[k])]
    return [specs[i] for i in order], [paths[i] for i in order]


def _signature_ordered(m: Any, kwargs: dict) -> dict:
    """``kwargs`` in the order of forward's parameters (unknown names after, as given)."""
    fn = m.forward if isinstance(m, torch.nn.Module) else m
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return dict(kwargs)
    rank = {name: i for i, name in enumerate(params)}
    return dict(sorted(kwargs.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def _match_in_signature_order(m: Any, args: tuple, kwargs: dict,
                              dynamic_shapes: Any) -> tuple[list[LeafSpec], list[str]]:
    from .shape_var_specs import is_shape_var_spec, translate
    from .spec_objects import is_spec_builder
    combined = combined_inputs(m, args, kwargs)
    if is_spec_builder(dynamic_shapes):
        dynamic_shapes = dynamic_shapes.dynamic_shapes(m, args, kwargs)
    from_shapes_spec = is_shape_var_spec(dynamic_shapes)
    if from_shapes_spec:  # torch's ShapesSpec / ParamsSpec: unbacked sizes
        dynamic_shapes = translate(m, args, kwargs, dynamic_shapes)
    dynamic_shapes = _var_keyword_entries_nested(m, combined, dynamic_shapes)
    named = [(name, f"['{name}']", value) for name, value in combined.items()]
    try:
        return _walk_spec(_Walker(from_shapes_spec), args, kwargs, named, dynamic_shapes)
    except DynamicSpecError as e:
        spread = _varargs_spread(m, combined)
        if not isinstance(dynamic_shapes, (tuple, list)) or spread is None or len(spread) != len(dynamic_shapes):
            raise
        first = e
    # forward takes ``*args`` and the tuple lists the inputs one by one, as they are passed
    try:
        return _walk_spec(_Walker(from_shapes_spec), args, kwargs, spread, dynamic_shapes)
    except DynamicSpecError:
        if len(dynamic_shapes) == len(named):  # both readings fit the count: torch's error
            raise first from None
        raise  # only this reading fits the count: its error names the entry that is wrong


def _var_keyword_entries_nested(m: Any, combined: dict[str, Any], dynamic_shapes: Any) -> Any:
    """A dict spec keyed as the call is made: a top-level key naming an input that forward's
    ``**kwargs`` receives (``forward(self, x, **kw)`` called with ``y=``) moves under that
    parameter's name (``{"x": .., "y": ..}`` reads as ``{"x": .., "kw": {"y": ..}}``), as torch.export
    reads it since torch 2.14; a spec already nested that way is unchanged."""
    if not isinstance(dynamic_shapes, dict):
        return dynamic_shapes
    fn = m.forward if isinstance(m, torch.nn.Module) else m
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dynamic_shapes
    var = next((name for name, p in params.items() if p.kind is p.VAR_KEYWORD), None)
    received = combined.get(var) if var is not None else None
    if not isinstance(received, dict):
        return dynamic_shapes
    flat = [k for k in received if k in dynamic_shapes and k not in combined]
    if not flat:
        return dynamic_shapes
    result = dict(dynamic_shapes)
    nested = result.get(var, {})
    if not isinstance(nested, dict):
        raise DynamicSpecError(
            f"dynamic_shapes gives {flat} at the top level, inputs that forward's **{var} receives, and also "
            f"dynamic_shapes[{var!r}] = {nested!r}, which is not a dict to put them in.",
            where="export(..., dynamic_shapes={...})",
            fix=f"Give every input of **{var} in one place: dynamic_shapes[{var!r}] = {{{flat[0]!r}: ...}}, or "
                f"each at the top level.")
    nested = dict(nested)
    for key in flat:
        if key in nested:
            raise DynamicSpecError(
                f"dynamic_shapes gives the input {key!r} (received by forward's **{var}) twice: at the top level "
                f"and under dynamic_shapes[{var!r}].",
                where=f"export(..., dynamic_shapes={{{key!r}: ..., {var!r}: {{{key!r}: ...}}}})",
                fix=f"Keep one of the two entries for {key!r}.")
        nested[key] = result.pop(key)
    result[var] = nested
    return result


def _varargs_spread(m: Any, combined: dict[str, Any]) -> Optional[list[tuple[str, str, Any]]]:
    """The inputs with forward's ``*args`` spread out, one entry per value passed there (None when
    forward takes no ``*args`` or none were passed).

    A tuple spec for ``forward(self, *args)`` is read first as torch.export reads it, one entry per
    parameter (the whole ``*args`` tuple one entry); when that does not fit, a tuple with one entry
    per value passed is what the user meant: a wrapper forwarding ``*args`` (an unflattened module,
    ``torch.compile``'s module in strict mode) then takes the spec its inner module takes.
    """
    fn = m.forward if isinstance(m, torch.nn.Module) else m
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    var = next((name for name, p in params.items() if p.kind is p.VAR_POSITIONAL), None)
    if var is None or not combined.get(var):
        return None
    spread: list[tuple[str, str, Any]] = []
    for name, value in combined.items():
        if name == var:
            spread += [(f"{name}[{i}]", f"['{name}'][{i}]", v) for i, v in enumerate(value)]
        else:
            spread.append((name, f"['{name}']", value))
    return spread


def _walk_spec(walker: _Walker, args: tuple, kwargs: dict, inputs: list[tuple[str, str, Any]],
               dynamic_shapes: Any) -> tuple[list[LeafSpec], list[str]]:
    """The spec walked along ``inputs`` (each input's name, its path by argument name, its value):
    each leaf's spec entry and path."""
    combined = {name: value for name, _, value in inputs}
    values = list(combined.values())
    if isinstance(dynamic_shapes, dict):
        if set(dynamic_shapes) != set(combined):
            missing = [k for k in combined if k not in dynamic_shapes]
            extra = [k for k in dynamic_shapes if k not in combined]
            names = list(combined)
            # torch's key phrase only: graphcap's own fix below says what to do instead
            torch_sentence = (f"When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg "
                              f"names {names} of `inputs`, but here they are {list(dynamic_shapes)}")
            raise DynamicSpecError(
                f"The keys of dynamic_shapes do not match the inputs: expected {list(combined)}"
                + (f", missing {missing}" if missing else "") + (f", unknown {extra}" if extra else "") + "."
                + _torch_words(torch_sentence),
                where="export(..., dynamic_shapes={...})",
                fix=_rekeyed_spec_fix(names, dynamic_shapes, missing, extra))
        specs = [dynamic_shapes[k] for k in combined]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(values):
            # the parenthesis is torch.export's sentence for this mistake, which callers match on
            raise DynamicSpecError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries, but there are {len(values)} inputs "
                f"({list(combined)}) (Detected mismatch between the structure of `inputs` and "
                f"`dynamic_shapes`: `inputs` has {len(values)} elements, but `dynamic_shapes` has "
                f"{len(dynamic_shapes)} elements).", where="export(..., dynamic_shapes=(...))",
                fix="Give one entry per input, in the order of forward's arguments (None for static ones).")
        specs = list(dynamic_shapes)
    else:
        raise DynamicSpecError(
            f"dynamic_shapes must be a dict, tuple or list, got {type(dynamic_shapes).__name__}.",
            where="export(..., dynamic_shapes=...)", fix=_fix_hint())
    by_position = not isinstance(dynamic_shapes, dict)
    for i, ((_, path, value), spec) in enumerate(zip(inputs, specs)):
        walker.walk(value, spec, path, f"[{i}]" if by_position else path)
    n_leaves = len(pytree.tree_leaves((args, kwargs)))
    if len(walker.leaf_specs) != n_leaves:
        raise DynamicSpecError(
            "graphcap could not line up the dynamic_shapes spec with the flattened inputs "
            f"({len(walker.leaf_specs)} spec leaves for {n_leaves} inputs).",
            where="export(..., dynamic_shapes=...)",
            fix="Pass inputs as plain args/kwargs of forward, or give the spec as a tuple by position.")
    return walker.leaf_specs, walker.leaf_paths
