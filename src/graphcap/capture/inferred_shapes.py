"""Infer a ``dynamic_shapes`` spec from sample inputs, so the user need not write one.

A capture mode built on export (like the draft), so it lives in the capture package, above ``dynamic``.

The samples say which dims vary (those become dynamic, the rest static), which
vary together (one ``Dim``) and, with three or more distinct sizes, which follow
another by a fixed ``a*d + b`` (a derived dim). The export's own constraint
solving then says what the program allows: the spec is exported, refined from
the suggested fixes of a constraint violation when the program needs more, and
each Dim's range is read back from the program's ``range_constraints``. The
result prints as Python code a user can paste and keep.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .. import errors
from ..dynamic.dims import INT_MAX, DerivedDim, Dim, as_dim, root_dims
from ..dynamic.named_inputs import combined_inputs
from ..dynamic.suggested_fixes import has_suggested_fixes, refine_dynamic_shapes_from_suggested_fixes
from ..errors import ExportInputError, GraphcapError, VerificationError
from ..program import ExportedProgram
from ..torch_private import pytree
from .front_ends import run_front_end

_MAX_REFINEMENTS = 4
# Sizes from which an export specializes (0/1): the example sample avoids them where it can.
_SPECIAL_SIZES = (0, 1)


@dataclass
class DynamicDim:
    """One dynamic dim of the inferred spec: where it is and which Dim it got."""
    path: str
    dim: int
    sizes: tuple[int, ...]
    spec: Any


@dataclass
class InferredShapes:
    """The inferred spec, its pasteable code, and the program exported with it.

    Passing the whole object as ``dynamic_shapes`` works like passing ``spec``;
    ``str(result)`` / ``result.code`` is the Python that builds the spec;
    ``report()`` says for every input dim why it is dynamic or static.

    Attributes:
        spec: the ``dynamic_shapes`` value, keyed by argument name.
        dims: the root ``Dim`` objects by name.
        dynamic: one :class:`DynamicDim` per dynamic input dim (sizes seen, Dim).
        static: ``(input path, dim, reason)`` for each input dim left static.
        example: the ``(args, kwargs)`` sample the program was exported on.
        program: the ExportedProgram the ranges were read from.
        verified: the sample indices on which the program matched eager.
        refinements: the constraint-violation messages the spec was refined from.
        assumptions: the program's ``export_assumptions``.
        checked_when_run: the program needs a relation no spec can say (``batch*seq == 24``); it was
            exported with ``prefer_deferred_runtime_asserts_over_guards=True`` and checks it when it runs.

    Raises:
        Nothing itself; see :func:`infer_dynamic_shapes`.

    Example:
        >>> shapes = graphcap.infer_dynamic_shapes(model, [(x1,), (x2,)])
        >>> print(shapes)            # pasteable: batch = Dim("batch") ...
        >>> print(shapes.report())
        >>> ep = graphcap.export(model, (x3,), dynamic_shapes=shapes)
    """
    spec: Any
    dims: dict[str, Any]
    dynamic: list[DynamicDim]
    static: list[tuple[str, int, str]]
    example: tuple[tuple, dict]
    program: Any = None
    verified: list[int] = field(default_factory=list)
    refinements: list[str] = field(default_factory=list)
    assumptions: list[Any] = field(default_factory=list)
    checked_when_run: bool = False

    @property
    def code(self) -> str:
        code = spec_code(self.spec, self.dims)
        if self.checked_when_run:
            code += ("\n# export(..., dynamic_shapes=dynamic_shapes, prefer_deferred_runtime_asserts_over_guards=True),"
                     "\n# and the program checks when it runs what no spec can say:"
                     + "".join(f"\n#   {n}" for n in _needs(self.refinements)))
        return code

    def __str__(self) -> str:
        return self.code

    def report(self) -> str:
        """Each input dim: dynamic (sizes seen, Dim and range) or static and why; then what the program assumed."""
        lines = ["Dynamic:"]
        for dd in self.dynamic:
            d = as_dim(dd.spec)
            rng = f"[{d.min}, {'inf' if d.max >= INT_MAX else d.max}]"
            lines.append(f"  {dd.path}.shape[{dd.dim}]  sizes {', '.join(map(str, dd.sizes))} in the samples"
                         f" -> {d.__name__} in {rng}")
        lines.append("Static:")
        lines += [f"  {path}.shape[{d}]  {why}" for path, d, why in self.static] or ["  (none)"]
        needs = _needs(self.refinements)
        if needs:
            lines.append("What the program checks when it runs (no spec can say it):" if self.checked_when_run
                         else "What the program needs (the spec was refined to it):")
            lines += [f"  {n}" for n in needs]
        if self.assumptions:
            lines.append("What the program assumed about these dims:")
            for a in self.assumptions:
                lines.append(f"  {a.kind}: {a.text}" + (f"  (at {a.where})" if a.where else ""))
        return "\n".join(lines)

    def dynamic_shapes(self, m: Any, args: tuple, kwargs: Optional[dict] = None) -> Any:
        """So the result passes as ``dynamic_shapes`` as it is (like ``AdditionalInputs``)."""
        return self.spec


def _needs(refinements: list[str]) -> list[str]:
    """The ``- ...`` lines of constraint-violation messages: each need of the program, with the user's line."""
    return [line.strip()[2:] for msg in refinements for line in msg.splitlines() if line.strip().startswith("- ")]


# --------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------

def _as_call(sample: Any, i: int) -> tuple[tuple, dict]:
    """A sample as ``(args, kwargs)``: a tuple of args, ``(args_tuple, kwargs_dict)``, a dict of kwargs, or one
    tensor."""
    if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], tuple) and isinstance(sample[1], dict):
        return sample[0], dict(sample[1])
    if isinstance(sample, tuple):
        return sample, {}
    if isinstance(sample, dict):
        return (), dict(sample)
    if isinstance(sample, torch.Tensor):
        return (sample,), {}
    raise ExportInputError(f"Sample {i} is a {type(sample).__name__}; a sample is a tuple of args or "
                           f"(args, kwargs), as the model is called.", where=f"samples[{i}]",
                           fix="Pass samples=[(x1,), (x2,)] or samples=[((x1,), {'mask': m1}), ...].")


def _arranged_like(target: Any, call: tuple[tuple, dict], first: tuple[tuple, dict]) -> tuple[tuple, dict]:
    """``call`` with the arguments ``first`` passed by position passed by position, the rest by keyword.

    Samples may pass one argument by position in one and by keyword in another
    (``model(x, mask=m)``, ``model(x=x, mask=m)``): they are the same inputs, and
    the program, like torch.export's, is called the way its example was."""
    sig_target = target.forward if isinstance(target, torch.nn.Module) else target
    try:
        sig = inspect.signature(sig_target)
        bound = sig.bind(*call[0], **call[1])
    except (TypeError, ValueError):
        return call  # the structure check says what does not fit
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return call  # extra positionals have no name to move them by
    by_position = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    moved = by_position[:len(first[0])]
    if not all(n in bound.arguments for n in moved):
        return call
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.name in moved or p.name not in bound.arguments:
            continue
        if p.kind is p.VAR_KEYWORD:
            kwargs.update(bound.arguments[p.name])
        else:
            kwargs[p.name] = bound.arguments[p.name]
    return tuple(bound.arguments[n] for n in moved), kwargs


def _callable(model: Any, method: str) -> Any:
    if isinstance(model, torch.nn.Module):
        fn = getattr(model, method, None)
        if fn is None:
            raise ExportInputError(f"{type(model).__name__} has no method {method!r}.",
                                   where=f"infer_dynamic_shapes(method={method!r})",
                                   fix="Name a method of the module, e.g. method='forward'.")
        return model if method == "forward" else fn
    return model


def _path_text(path: tuple) -> str:
    """``x``, ``x[0]``, ``kwargs['mask']``: the leaf's place in the inputs keyed by argument name."""
    head, rest = path[0], path[1:]
    return str(getattr(head, "key", head)) + pytree.keystr(rest)


def _flatten_samples(target: Any, calls: list[tuple[tuple, dict]]) -> tuple[Any, list[list[tuple[str, Any]]]]:
    """Each sample keyed by argument name and flattened; a clear error where their structures differ."""
    flats, specs = [], []
    for args, kwargs in calls:
        sig_target = target.forward if isinstance(target, torch.nn.Module) else target
        try:
            inspect.signature(sig_target).bind(*args, **kwargs)
        except TypeError as e:
            target_name = getattr(sig_target, '__qualname__', sig_target)
            raise ExportInputError(f"A sample does not fit the signature of {target_name}: {e}.",
                                   where=f"samples[{len(flats)}]",
                                   fix="Give each sample as the model is called: (args,) or (args, kwargs).") from None
        except ValueError:
            pass
        tree = combined_inputs(target, args, kwargs)
        with_paths, spec = pytree.tree_flatten_with_path(tree)
        flats.append([(_path_text(p), v) for p, v in with_paths])
        specs.append(spec)
    first = {p for p, _ in flats[0]}
    for i, flat in enumerate(flats[1:], start=1):
        paths = {p for p, _ in flat}
        if paths != first or specs[i] != specs[0]:
            only0, only_i = sorted(first - paths), sorted(paths - first)
            where = (only0 or only_i or [p for (p, _), (q, _) in zip(flats[0], flat) if p != q] or ["inputs"])[0]
            raise ExportInputError(
                f"samples[0] and samples[{i}] differ in structure: "
                + (f"{', '.join(only0)} in samples[0] only; " if only0 else "")
                + (f"{', '.join(only_i)} in samples[{i}] only; " if only_i else "")
                + "a spec needs every sample to have the same inputs.",
                where=where, fix="Pass the same arguments and keys in every sample (an input that is sometimes "
                                 "absent needs its own export).")
    return specs[0], flats


def _check_leaves(flats: list[list[tuple[str, Any]]]) -> None:
    for j, (path, v0) in enumerate(flats[0]):
        for i, flat in enumerate(flats[1:], start=1):
            v = flat[j][1]
            if type(v) is not type(v0) and not (isinstance(v, torch.Tensor) and isinstance(v0, torch.Tensor)):
                raise ExportInputError(f"Input {path} is a {type(v0).__name__} in samples[0] and a "
                                       f"{type(v).__name__} in samples[{i}].", where=path,
                                       fix="Keep each input's type the same in every sample.")
            if isinstance(v0, torch.Tensor):
                if v.dtype != v0.dtype:
                    raise ExportInputError(f"Input {path} is {v0.dtype} in samples[0] and {v.dtype} in samples[{i}]; "
                                           f"a program has one dtype per input.", where=path,
                                           fix=f"Convert it, e.g. .to({v0.dtype}), in every sample.")
                if v.dim() != v0.dim():
                    raise ExportInputError(f"Input {path} has rank {v0.dim()} in samples[0] and {v.dim()} in "
                                           f"samples[{i}]; a program has one rank per input.", where=path,
                                           fix="Keep each tensor's number of dims the same in every sample.")


# --------------------------------------------------------------------------
# grouping and naming
# --------------------------------------------------------------------------

def _affine(root: tuple[int, ...], other: tuple[int, ...]) -> Optional[tuple[int, int]]:
    """``(a, b)`` with ``other == a*root + b`` on every sample (integer a >= 1), if the samples show it.

    Three distinct root sizes at least: two points fit any line, so two samples prove no relation.
    """
    if len(set(root)) < 3:
        return None
    (r0, o0), (r1, o1) = [(r, o) for r, o in zip(root, other)][:1] + [
        next((r, o) for r, o in zip(root, other) if r != root[0])]
    if (o1 - o0) % (r1 - r0):
        return None
    a = (o1 - o0) // (r1 - r0)
    b = o0 - a * r0
    if a < 1 or any(o != a * r + b for r, o in zip(root, other)):
        return None
    return a, b


def _group_name(members: list[tuple[str, int, int]], n_tensors: int, taken: set[str]) -> str:
    """``batch`` / ``seq`` / ``height`` / ``width`` where the positions say so, else ``<input>_dim<i>``."""
    dims = {d for _, d, _ in members}
    leaves = {p for p, _, _ in members}
    ranks = {r for _, _, r in members}
    candidates = []
    if 0 in dims and (len(leaves) > 1 or n_tensors == 1):
        candidates.append("batch")
    if 1 in dims and ranks <= {2, 3} and (len(leaves) > 1 or n_tensors == 1):
        candidates.append("seq")
    if ranks == {4} and dims == {2}:
        candidates.append("height")
    if ranks == {4} and dims == {3}:
        candidates.append("width")
    path, d, _ = members[0]
    candidates.append(re.sub(r"_+", "_", re.sub(r"\W+", "_", f"{path}_dim{d}")).strip("_"))
    for name in candidates:
        if name not in taken:
            return name
    k = 2
    while f"{candidates[-1]}_{k}" in taken:
        k += 1
    return f"{candidates[-1]}_{k}"


def _initial_spec(tree_spec: Any, flats: list[list[tuple[str, Any]]]):
    """The spec the samples alone give: Dims without ranges, in the inputs' structure."""
    n = len(flats[0])
    vectors: dict[tuple[int, ...], list[tuple[str, int, int]]] = {}
    static: list[tuple[str, int, str]] = []
    dynamic_sites: list[tuple[int, int, tuple[int, ...]]] = []
    for j in range(n):
        path, v0 = flats[0][j]
        if not isinstance(v0, torch.Tensor):
            continue
        for d in range(v0.dim()):
            sizes = tuple(int(f[j][1].shape[d]) for f in flats)
            if len(set(sizes)) == 1:
                static.append((path, d, f"size {sizes[0]} in every sample"))
                continue
            vectors.setdefault(sizes, []).append((path, d, v0.dim()))
            dynamic_sites.append((j, d, sizes))
    n_tensors = sum(isinstance(v, torch.Tensor) for _, v in flats[0])
    # roots first (smallest sizes first), then derive what follows a root exactly
    order = sorted(vectors, key=lambda v: (sum(v), v))
    by_vector: dict[tuple[int, ...], Any] = {}
    roots: list[tuple[tuple[int, ...], Dim]] = []
    taken: set[str] = set()
    named: dict[str, Any] = {}
    for vec in order:
        rel = next(((r, dim, ab) for r, dim in roots if (ab := _affine(r, vec)) is not None and ab != (1, 0)), None)
        if rel is not None:
            _, root_dim, (a, b) = rel
            derived = root_dim * a if a != 1 else root_dim
            if b > 0:
                derived = derived + b
            elif b < 0:
                derived = derived - (-b)
            by_vector[vec] = derived
            continue
        name = _group_name(vectors[vec], n_tensors, taken)
        taken.add(name)
        dim = Dim(name)
        roots.append((vec, dim))
        by_vector[vec] = dim
        named[name] = dim
    per_leaf: list[Any] = []
    dynamic: list[DynamicDim] = []
    for j in range(n):
        path, v0 = flats[0][j]
        if not isinstance(v0, torch.Tensor):
            per_leaf.append(_scalar_spec(path, [f[j][1] for f in flats], taken, named))
            continue
        entry = {d: by_vector[s] for jj, d, s in dynamic_sites if jj == j}
        for d, spec in entry.items():
            dynamic.append(DynamicDim(path, d, tuple(int(f[j][1].shape[d]) for f in flats), spec))
        per_leaf.append(entry or None)
    return pytree.tree_unflatten(per_leaf, tree_spec), named, dynamic, static


def _scalar_spec(path: str, values: list[Any], taken: set[str], named: dict[str, Any]) -> Any:
    """A Python int that varies across samples becomes a dynamic int (its own Dim); other values must agree."""
    if all(v == values[0] for v in values):
        return None
    if isinstance(values[0], int) and not isinstance(values[0], bool):
        name = re.sub(r"\W+", "_", path).strip("_") or "value"
        while name in taken:
            name += "_"
        taken.add(name)
        named[name] = Dim(name)
        return named[name]
    raise ExportInputError(f"Input {path} is {values[0]!r} in samples[0] and "
                           f"{next(v for v in values if v != values[0])!r} in another sample; only tensor "
                           f"sizes and ints can be dynamic.", where=path,
                           fix="Keep this value the same in every sample (export once per value), "
                               "or pass it as a tensor.")


# --------------------------------------------------------------------------
# ranges from the program
# --------------------------------------------------------------------------

def _leaf_specs(spec: Any, tree_spec: Any) -> list[Any]:
    """The spec's entry per flat input leaf (its dicts {dim: Dim} are leaves here)."""
    def is_leaf(x: Any) -> bool:
        return x is None or (isinstance(x, dict) and all(isinstance(k, int) for k in x))
    return pytree.tree_flatten(spec, is_leaf=is_leaf)[0]


def _ranged(ep: Any, spec: Any, calls_example: tuple[tuple, dict], target: Any) -> tuple[Any, dict[str, Dim]]:
    """The spec with each root Dim's range set to what the program allows (its range_constraints)."""
    args, kwargs = calls_example
    flat_call = [v for v in pytree.tree_leaves((args, kwargs))]
    placeholders = [n for n in ep.graph.nodes
                    if n.op == "placeholder" and n.name in set(ep.graph_signature.user_inputs)]
    ph_by_leaf: dict[int, Any] = {}
    tensor_ph = [n for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)]
    tensor_leaves = [v for v in flat_call if isinstance(v, torch.Tensor)]
    for leaf, node in zip(tensor_leaves, tensor_ph):
        ph_by_leaf.setdefault(id(leaf), node)
    combined = combined_inputs(target, args, kwargs)
    leaves = pytree.tree_leaves(combined)
    entries = _leaf_specs(spec, None)
    bounds: dict[str, tuple[int, Optional[int]]] = {}
    for leaf, entry in zip(leaves, entries):
        if not isinstance(entry, dict) or id(leaf) not in ph_by_leaf:
            continue
        shape = ph_by_leaf[id(leaf)].meta["val"].shape
        for d, dspec in entry.items():
            root = as_dim(dspec)
            if not isinstance(root, Dim) or isinstance(root, DerivedDim):
                continue
            size = shape[d]
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            rc = ep.range_constraints.get(expr)
            if rc is None:
                continue
            lo = int(rc.lower) if getattr(rc.lower, "is_Integer", False) else 0
            hi = int(rc.upper) if getattr(rc.upper, "is_Integer", False) else None
            bounds.setdefault(root.__name__, (lo, hi))
    roots = root_dims(spec)
    new = {name: Dim(name, min=bounds[name][0], max=bounds[name][1]) if name in bounds else dim
           for name, dim in roots.items()}

    def replace(x: Any) -> Any:
        d = as_dim(x)
        if isinstance(d, DerivedDim) and d.root.__name__ in new:
            return DerivedDim(new[d.root.__name__], d.fn, d.__name__)
        if isinstance(d, Dim) and d.__name__ in new:
            return new[d.__name__]
        return x

    return pytree.tree_map(replace, spec, is_leaf=lambda x: not isinstance(x, (dict, list, tuple)) or x is None), new


def _pick_example(sites: set[tuple[int, int]], flats: list[list[tuple[str, Any]]]) -> int:
    """The sample to export on: one whose dynamic sizes avoid 0 and 1 (an export specializes those)."""
    for i, flat in enumerate(flats):
        if all(int(flat[j][1].shape[d]) not in _SPECIAL_SIZES for j, d in sites):
            return i
    return 0


_PLAIN = (int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)


def _values_of(obj: Any, depth: int = 0) -> list[Any]:
    """The tensors and plain values inside an output, through containers and (for classes
    such as a transformers cache, which pytree may not know) their attributes."""
    if isinstance(obj, (torch.Tensor, *_PLAIN)) or depth > 8:
        return [obj]
    if isinstance(obj, dict):
        return [v for k in obj for v in _values_of(obj[k], depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in _values_of(x, depth + 1)]
    leaves = pytree.tree_leaves(obj)
    if not (len(leaves) == 1 and leaves[0] is obj):
        return [v for x in leaves for v in _values_of(x, depth + 1)]
    attrs = getattr(obj, "__dict__", None)
    if attrs:
        return [v for k in sorted(attrs) for v in _values_of(attrs[k], depth + 1)]
    return [obj]


def _same(a: Any, b: Any) -> bool:
    la, lb = _values_of(a), _values_of(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return False
            if "meta" in (x.device.type, y.device.type):
                continue  # a model built on the meta device has no values: shapes and dtypes are what agree
            if not torch.allclose(x, y, atol=1e-5, rtol=1e-4, equal_nan=True):
                return False
        elif isinstance(x, _PLAIN) and x != y:
            return False
    return True


def verify_on_samples(program: Any, target: Any, calls: list[tuple[tuple, dict]],
                      needs: tuple[str, ...] = (), example_index: int = 0) -> list[int]:
    """Run the program and eager on every sample; a mismatch or refusal is an error naming the sample.

    ``needs`` are the lines of the constraint violations the spec was refined from (what the program
    needs, with the user's line): a refusal quotes them, since a sample the refined program refuses
    takes another path of the model (another side of a shape branch, a size the code fixes)."""
    runnable = program.module()
    ok = []
    for i, (args, kwargs) in enumerate(calls):
        with torch.no_grad():
            try:
                want = target(*args, **kwargs)
            except Exception as e:
                raise VerificationError(f"The model itself fails on samples[{i}] ({type(e).__name__}: "
                                        f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); no program "
                                        f"can match eager there.", where=f"samples[{i}]",
                                        fix="Drop this sample or fix its sizes so that the model runs on it; "
                                            "every sample must be an input the model takes.") from e
            try:
                got = runnable(*args, **kwargs)
            except GraphcapError as e:
                if needs:
                    raise VerificationError(
                        f"The program exported with the inferred spec refuses samples[{i}]: {e.what}. The samples "
                        f"take different paths of the model; the program exported on samples[{example_index}]'s "
                        f"path needs: "
                        + "; ".join(needs), where=f"samples[{i}]",
                        fix="Export one program per path (pass only the samples on one side of the line named), "
                            "or write the branch as torch.cond so that one program holds both.") from e
                raise VerificationError(f"The program exported with the inferred spec refuses samples[{i}]: {e.what}",
                                        where=f"samples[{i}]",
                                        fix="Export with this sample as the example, or report the spec printed by "
                                            "infer_dynamic_shapes.") from e
        if not _same(want, got):
            raise VerificationError(f"The program exported with the inferred spec differs from eager on samples[{i}].",
                                    where=f"samples[{i}]",
                                    fix="Check the model for Python state that changes between calls; export "
                                        "with that sample as the example to compare.")
        ok.append(i)
    return ok


# --------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------

def infer_dynamic_shapes(model: Any, samples: list, *, method: str = "forward", strict: bool = False,
                         verify: bool = True) -> InferredShapes:
    """Infer a ``dynamic_shapes`` spec for ``model`` from sample inputs.

    Dims whose size differs between samples are dynamic; those with equal sizes in
    every sample share one ``Dim`` (named ``batch``, ``seq``, ``height``,
    ``width`` where the positions say so, else ``<input>_dim<i>``); with three or
    more distinct sizes a dim that is ``a*d + b`` of another on every sample is
    derived from it. The program is exported once on one sample (refined from
    suggested fixes while it raises a constraint violation) and each Dim gets the
    range the program allows. Everything else is static.

    Args:
        model: an ``nn.Module`` or function.
        samples: example inputs, each a tuple of args or ``(args, kwargs)``; at least two.
        method: the module's method that is exported (``forward``).
        strict: passed to the export.
        verify: run the program on every sample and compare with eager.

    Returns:
        An :class:`InferredShapes`: ``.spec`` (or the object itself) is the
        ``dynamic_shapes``; ``print`` it for pasteable code; ``.program`` is the export.

    Raises:
        ExportInputError: fewer than two samples, or samples that differ in
            structure, type, dtype or rank (the message names the input path).
        ConstraintViolationError: the program cannot be made dynamic as the samples say.
        VerificationError: the program refuses or differs from eager on a sample.

    Example:
        >>> shapes = graphcap.infer_dynamic_shapes(model, [(torch.randn(2, 8),), (torch.randn(5, 8),)])
        >>> print(shapes)
        >>> ep = graphcap.export(model, (torch.randn(3, 8),), dynamic_shapes=shapes.spec)
    """
    if not isinstance(samples, (list, tuple)) or len(samples) < 2:
        raise ExportInputError("infer_dynamic_shapes needs at least two samples to see which dims vary.",
                               where="samples", fix="Pass samples=[(x_small,), (x_large,)] with different sizes "
                                                    "where the model takes different sizes.")
    target = _callable(model, method)
    calls = [_as_call(s, i) for i, s in enumerate(samples)]
    calls = [calls[0]] + [_arranged_like(target, c, calls[0]) for c in calls[1:]]
    rank = {k: n for n, k in enumerate(calls[0][1])}  # the same kwargs in another order are the same inputs
    calls = [(a, dict(sorted(k.items(), key=lambda kv: rank.get(kv[0], len(rank))))) for a, k in calls]
    tree_spec, flats = _flatten_samples(target, calls)
    _check_leaves(flats)
    spec, named, dynamic, static = _initial_spec(tree_spec, flats)
    index = {p: j for j, (p, _) in enumerate(flats[0])}
    example = calls[_pick_example({(index[dd.path], dd.dim) for dd in dynamic}, flats)]
    refinements: list[str] = []
    deferred = False
    for attempt in range(_MAX_REFINEMENTS + 2):
        try:
            ep = run_front_end(target, example[0], example[1], dynamic_shapes=spec, strict=strict,
                               prefer_deferred_runtime_asserts_over_guards=deferred)
            break
        except errors.ConstraintViolationError as e:  # (made on first use: errors.py)
            if attempt >= _MAX_REFINEMENTS + deferred:
                raise
            if not has_suggested_fixes(e):
                if deferred:
                    raise
                # A need no spec can say (``batch*seq == 24`` for a reshape to a fixed size): the samples
                # vary these dims, so keep them dynamic and have the program check the need when it runs,
                # as torch.export's AdditionalInputs program does; verification then tries every sample.
                deferred = True
                refinements.append(str(e))
                continue
            refinements.append(str(e))
            spec = refine_dynamic_shapes_from_suggested_fixes(e, spec)
    spec, named = _ranged(ep, spec, example, target)
    spec_by_leaf = _leaf_specs(spec, None)
    for dd in dynamic:
        j = next(j for j, (p, _) in enumerate(flats[0]) if p == dd.path)
        entry = spec_by_leaf[j]
        dd.spec = entry.get(dd.dim) if isinstance(entry, dict) else None
        if isinstance(dd.spec, int) or dd.spec is None:
            static.append((dd.path, dd.dim, "the program specializes it (suggested fix of a constraint violation)"))
    result = InferredShapes(spec=spec, dims=named,
                            dynamic=[dd for dd in dynamic if not isinstance(dd.spec, (int, type(None)))],
                            static=static, example=example, program=ep, refinements=refinements,
                            assumptions=list(getattr(ep, "export_assumptions", None) or []),
                            checked_when_run=deferred)
    if verify:
        result.verified = verify_on_samples(ep, target, calls, needs=tuple(_needs(refinements)),
                                            example_index=next(i for i, c in enumerate(calls) if c is example))
    return result


# --------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------

def _dim_line(dim: Dim) -> str:
    bounds = []
    if dim.min not in (0, None):
        bounds.append(f"min={dim.min}")
    if dim.max is not None and dim.max < INT_MAX:
        bounds.append(f"max={dim.max}")
    return f'{dim.__name__} = Dim("{dim.__name__}"' + "".join(", " + b for b in bounds) + ")"


def _value_code(x: Any) -> str:
    if x is None:
        return "None"
    d = as_dim(x)
    if isinstance(d, Dim):
        return d.__name__
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_value_code(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ", ".join(_value_code(v) for v in x) + "]"
    if isinstance(x, tuple):
        inner = ", ".join(_value_code(v) for v in x)
        return "(" + inner + ("," if len(x) == 1 else "") + ")"
    return repr(x)


def spec_code(spec: Any, dims: dict[str, Any]) -> str:
    """The spec as Python a user can paste: one ``Dim`` line per root, then ``dynamic_shapes = ...``."""
    roots = root_dims(spec)
    lines = ["from graphcap import Dim", ""]
    lines += [_dim_line(d) for d in roots.values()]
    lines.append(f"dynamic_shapes = {_value_code(spec)}")
    return "\n".join(lines)


def export_with_inferred_shapes(mod: Any, args: Optional[tuple], kwargs: Optional[dict], *, dynamic_shapes: Any,
                                samples: Optional[list], strict: bool,
                                preserve_module_call_signature: tuple[str, ...]) -> ExportedProgram:
    """``graphcap.export(..., dynamic_shapes="infer", samples=[...])``: infer the spec, then export with it.

    The example ``args``/``kwargs``, when given, are one more sample; without them
    the program exported while inferring is returned. ``ep.inferred_shapes`` holds
    the :class:`InferredShapes`.
    """
    if not (isinstance(dynamic_shapes, str) and dynamic_shapes == "infer"):
        raise ExportInputError("samples= is only read with dynamic_shapes=\"infer\".", where="export(samples=...)",
                               fix="Pass dynamic_shapes=\"infer\" with samples, or drop samples and write the spec.")
    if not samples:
        raise ExportInputError("dynamic_shapes=\"infer\" needs samples to infer from.", where="export(samples=...)",
                               fix="Pass samples=[(x1,), (x2,)]: two or more inputs with the sizes that vary.")
    given = [] if args is None else [(tuple(args) if isinstance(args, tuple) else args, dict(kwargs or {}))]
    inferred = infer_dynamic_shapes(mod, [*given, *samples], strict=strict)
    if given or preserve_module_call_signature:
        example = given[0] if given else inferred.example
        ep = run_front_end(mod, example[0], example[1], dynamic_shapes=inferred.spec, strict=strict,
                           prefer_deferred_runtime_asserts_over_guards=inferred.checked_when_run,
                           preserve_module_call_signature=tuple(preserve_module_call_signature))
    else:
        ep = inferred.program
    ep.inferred_shapes = inferred
    return ep


def spec_for_capture(mod: Any, args: Optional[tuple], kwargs: Optional[dict],
                     samples: Optional[list]) -> tuple[tuple, dict, Any, bool]:
    """``capture(..., dynamic_shapes="infer", samples=[...])``: the example and the inferred spec every strategy
    gets, and whether the program checks a need no spec can say when it runs (export it with
    ``prefer_deferred_runtime_asserts_over_guards=True``)."""
    if not samples:
        raise ExportInputError("dynamic_shapes=\"infer\" needs samples to infer from.", where="capture(samples=...)",
                               fix="Pass samples=[(x1,), (x2,)]: two or more inputs with the sizes that vary.")
    given = [] if args is None else [(tuple(args), dict(kwargs or {}))]
    inferred = infer_dynamic_shapes(mod, [*given, *samples])
    example = given[0] if given else inferred.example
    return example[0], example[1], inferred.spec, inferred.checked_when_run
