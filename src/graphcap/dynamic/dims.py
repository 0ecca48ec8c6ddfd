"""The user-facing words of a ``dynamic_shapes`` spec.

``Dim("batch", min=1, max=64)`` names one dynamic dimension; arithmetic on it
(``dx + 1``, ``2 * dx``, ``3 * dx + 1``) makes a derived dimension that is
expressed through its root; ``Dim.AUTO`` / ``Dim.DYNAMIC`` / ``Dim.STATIC``
are hints that leave the range (and the relations) to the tracer.
``ShapesCollection`` and ``AdditionalInputs`` build a spec for the user.

torch.export's own ``Dim`` objects are accepted everywhere a graphcap one is:
:func:`as_dim` reads their attributes (``__name__``, ``min``, ``max``, derived
``root``/``fn``, hint ``type``) and turns them into graphcap's.
"""
from __future__ import annotations

import enum
import sys
from typing import Any, Callable, Optional, Union

import torch

from ..errors import DimArithmeticError, DimDefinitionError, ExportInputError
from ..torch_private import pytree
from ..torch_private.user_specs import is_torch_dim_hint
from .named_inputs import combined_inputs

INT_MAX = sys.maxsize - 1  # the "no upper bound" of a Dim, as torch's int_oo prints it

__all__ = ["Dim", "DerivedDim", "DimHint", "Constraint", "dims", "ShapesCollection", "AdditionalInputs", "as_dim"]


class DimHint:
    """``Dim.AUTO`` / ``Dim.DYNAMIC`` / ``Dim.STATIC``: no name, optional bounds.

    AUTO and DYNAMIC let the tracer find the dimension's range and relations
    (DYNAMIC additionally logs a line when the program specializes it);
    STATIC fixes the dimension to the example size. ``Dim.AUTO(min=2)`` and
    ``Dim.DYNAMIC(max=8)`` narrow the range the tracer starts from.
    """

    class Kind(enum.Enum):
        AUTO = "AUTO"
        DYNAMIC = "DYNAMIC"
        STATIC = "STATIC"

    def __init__(self, kind: "DimHint.Kind", min: Optional[int] = None, max: Optional[int] = None):
        self.kind = kind
        self.min = min
        self.max = max

    def __call__(self, min: Optional[int] = None, max: Optional[int] = None) -> "DimHint":
        # Dim.STATIC(min=, max=) (as torch allows): static, and the example must lie in the bounds
        _check_bounds(f"Dim.{self.kind.name}", min if min is not None else 0,
                      max if max is not None else INT_MAX, one_value_ok=self.kind is DimHint.Kind.STATIC)
        return DimHint(self.kind, min, max)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DimHint) and (self.kind, self.min, self.max) == (other.kind, other.min, other.max)

    def __hash__(self) -> int:
        return hash((self.kind, self.min, self.max))

    def __repr__(self) -> str:
        bounds = "" if self.min is None and self.max is None else f"(min={self.min}, max={self.max})"
        return f"Dim.{self.kind.name}{bounds}"


def _check_bounds(name: str, lo: Any, hi: Any, one_value_ok: bool = False) -> None:
    for label, v in (("min", lo), ("max", hi)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise DimDefinitionError(f"{name}: {label}={v!r} is not an int.",
                                   where=f"Dim({name!r}, min=..., max=...)",
                                   fix="Give the bounds of a Dim as Python ints.")
    if lo < 0:
        raise DimDefinitionError(f"{name}: min={lo} is negative; sizes are never below 0.",
                               where=f"Dim({name!r}, min={lo}, ...)", fix="Use min >= 0.")
    if hi < lo or (hi == lo and not one_value_ok):
        raise DimDefinitionError(
            f"{name}: max={hi} must be greater than min={lo} (a dynamic dim takes more than one value).",
            where=f"Dim({name!r}, min={lo}, max={hi})",
            fix="Widen the range, or mark the dimension static (Dim.STATIC or the int size).")


class Dim:
    """A named dynamic dimension with an inclusive range ``[min, max]``.

    The same ``Dim`` used on several input dimensions makes them one symbol
    (equal at runtime). ``Dim.AUTO``, ``Dim.DYNAMIC`` and ``Dim.STATIC`` are
    unnamed hints; arithmetic (``2 * d + 1``) gives a derived dimension.

    Args:
        name: the symbol's name, shown in messages and suggested fixes.
        min: the smallest size accepted (default 0).
        max: the largest size accepted (default unbounded).

    Raises:
        ExportInputError: the name is not an identifier or ``min > max``.

    Example:
        >>> batch = graphcap.Dim("batch", min=1, max=64)
        >>> ep = graphcap.export(model, (x,), dynamic_shapes=({0: batch},))
    """

    AUTO = DimHint(DimHint.Kind.AUTO)
    DYNAMIC = DimHint(DimHint.Kind.DYNAMIC)
    STATIC = DimHint(DimHint.Kind.STATIC)

    def __init__(self, name: str, *, min: Optional[int] = None, max: Optional[int] = None):
        if not isinstance(name, str) or not name.isidentifier():
            raise DimDefinitionError(f"Dim name {name!r} is not a Python identifier.",
                                   where=f"Dim({name!r})", fix="Name dims like variables: Dim('batch').")
        lo = 0 if min is None else min
        hi = INT_MAX if max is None else max
        _check_bounds(name, lo, hi)
        self.__name__ = name
        self.min = lo
        self.max = hi

    # -- derived dims ------------------------------------------------------
    def _derive(self, fn: Callable[[Any], Any], text: str) -> "DerivedDim":
        return DerivedDim(self, fn, text)

    def __add__(self, other: int) -> "DerivedDim":
        _int_operand(self, other, "+")
        return self._derive(lambda r: r + other, f"{self.__name__} + {other}")

    __radd__ = __add__

    def __sub__(self, other: int) -> "DerivedDim":
        _int_operand(self, other, "-")
        return self._derive(lambda r: r - other, f"{self.__name__} - {other}")

    def __mul__(self, other: int) -> "DerivedDim":
        _int_operand(self, other, "*")
        if other <= 0:
            raise DimArithmeticError(f"{self.__name__} * {other}: a derived dim must scale by a positive int.",
                                   fix="Use a factor >= 1.")
        return self._derive(lambda r: r * other, f"{other}*{self.__name__}")

    __rmul__ = __mul__

    def __rsub__(self, other: Any):
        raise DimArithmeticError(f"{other} - {self.__name__}: a derived dim must grow with its root.",
                               fix="Write derived dims as a*dim + b with a >= 1.")

    def __floordiv__(self, other: Any) -> Any:
        _not_affine(self, "//", other)

    def __truediv__(self, other: Any) -> Any:
        _not_affine(self, "/", other)

    def __mod__(self, other: Any) -> Any:
        _not_affine(self, "%", other)

    def __repr__(self) -> str:
        if self.max >= INT_MAX:
            return f"Dim({self.__name__!r}, min={self.min})"
        return f"Dim({self.__name__!r}, min={self.min}, max={self.max})"


def _not_affine(dim: Any, op: str, other: Any) -> None:
    """``d // 2`` and the like: refused, with the spec that says the same in ``a*dim + b`` form."""
    derived = isinstance(dim, DerivedDim)
    name = f"({dim.__name__})" if derived else dim.__name__
    root = dim.__name__
    example = (f"give the smaller size its own Dim and derive the larger: _{root} = Dim('_{root}'), then "
               f"{other}*_{root} where you wrote {root} and _{root} where you wrote {name} {op} {other}"
               if op in ("//", "/") and isinstance(other, int) and other > 0 and not derived
               else "write the sizes as a*dim + b of one Dim, or give each its own Dim")
    raise DimArithmeticError(
        f"{name} {op} {other!r}: a derived dim is a*dim + b with ints a >= 1 and b; {op} cannot be one "
        f"(torch.export refuses it too).",
        where=f"dynamic_shapes entry {name} {op} {other!r}", fix=example[0].upper() + example[1:] + ".")


def _int_operand(dim: Any, other: Any, op: str) -> None:
    if not isinstance(other, int) or isinstance(other, bool):
        raise DimArithmeticError(
            f"{dim.__name__} {op} {other!r}: derived dims combine a Dim with an int only.",
            fix="Relate two dims by using the same Dim, or a*dim + b with int a and b.")


class DerivedDim(Dim):
    """A dimension given as an increasing integer function of a root ``Dim``.

    It gets no symbol of its own: its size is ``fn(root)``, and its range is the
    image of the root's range.
    """

    def __init__(self, root: Dim, fn: Callable[[Any], Any], name: str):
        self.root = root
        self.fn = fn
        self.__name__ = name
        lo, hi = fn(root.min), (fn(root.max) if root.max < INT_MAX else INT_MAX)
        self.min = lo
        self.max = hi

    def _derive(self, fn: Callable[[Any], Any], text: str) -> "DerivedDim":
        inner = self.fn
        return DerivedDim(self.root, lambda r: fn(inner(r)), text.replace(self.__name__, f"({self.__name__})", 1))

    def __repr__(self) -> str:
        return self.__name__


def dims(*names: str, min: Optional[int] = None, max: Optional[int] = None) -> tuple[Dim, ...]:
    """Several ``Dim``s with the same bounds.

    Args:
        names: the dimensions' names.
        min: the smallest size of each (default 0).
        max: the largest size of each (default unbounded).

    Returns:
        A tuple of :class:`Dim`, one per name, in order.

    Raises:
        ExportInputError: a name is not an identifier or ``min > max``.

    Example:
        >>> b, s = graphcap.dims("b", "s", max=512)
    """
    return tuple(Dim(n, min=min, max=max) for n in names)


# ---------------------------------------------------------------------------
# accepting torch.export's objects
# ---------------------------------------------------------------------------

def _is_torch_hint(obj: Any) -> bool:
    kind = getattr(obj, "type", None)
    return is_torch_dim_hint(obj) and getattr(kind, "name", None) in ("AUTO", "DYNAMIC", "STATIC")


def as_dim(obj: Any) -> Any:
    """graphcap's object for one entry of a tensor's spec.

    Returns a ``Dim``, ``DerivedDim``, ``DimHint``, an ``int`` (static size),
    or ``None`` (static). torch.export's ``Dim``, derived dims and hints are
    translated by their attributes; anything else is returned unchanged for
    the caller to reject with the input path.
    """
    if obj is None or isinstance(obj, (Dim, DimHint)):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if _is_torch_hint(obj):
        kind = DimHint.Kind[obj.type.name]
        return DimHint(kind, getattr(obj, "min", None), getattr(obj, "max", None))
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and hasattr(obj, "min") and hasattr(obj, "max") \
            and type(obj).__module__.startswith("torch"):
        if hasattr(obj, "root") and hasattr(obj, "fn"):
            root = as_dim(obj.root)
            return DerivedDim(root, obj.fn, name)
        lo, hi = int(obj.min), int(obj.max) if obj.max < INT_MAX else INT_MAX
        # torch's Dim takes a negative min and its export ranges the size from 0, as a size is;
        # graphcap's own Dim refuses it, but code written for torch keeps torch's meaning
        lo = max(lo, 0) if hi >= 0 else lo
        if lo == hi:  # torch's static Dim (min == max)
            return lo
        out = Dim.__new__(Dim)
        out.__name__, out.min, out.max = name, lo, hi
        return out
    return obj


def root_dims(spec: Any) -> dict[str, Dim]:
    """The root ``Dim`` of every dim a ``dynamic_shapes`` spec holds (a derived dim's root for it), by
    name, in the order the spec first names them; torch.export's dims as graphcap's (:func:`as_dim`)."""
    found: dict[str, Dim] = {}

    def visit(x: Any) -> None:
        d = as_dim(x)
        if isinstance(d, DerivedDim):
            found.setdefault(d.root.__name__, d.root)
        elif isinstance(d, Dim):
            found.setdefault(d.__name__, d)

    pytree.tree_map(visit, spec, is_leaf=lambda x: not isinstance(x, (dict, list, tuple)) or x is None)
    return found


Constraint = Union[Dim, DerivedDim, DimHint]
"""What a ``dynamic_shapes`` spec may say about one dimension: a ``Dim``, a derived dim or a hint.

torch.export's ``Constraint`` names the per-tensor objects torch makes from such a
spec; graphcap keeps none of its own, so its ``Constraint`` names the spec entries
themselves, for annotations in code that builds specs.

Args:
    (a type) use it in annotations and ``isinstance`` checks.

Returns:
    ``Union[Dim, DerivedDim, DimHint]``.

Raises:
    Nothing.

Example:
    >>> def batch_first(c: graphcap.Constraint) -> dict:
    ...     return {0: c}
    >>> isinstance(graphcap.Dim("b") * 2, graphcap.Constraint)
    True
"""


# ---------------------------------------------------------------------------
# spec builders
# ---------------------------------------------------------------------------

class ShapesCollection:
    """Give specs per tensor, not per position: ``sc[x] = {0: batch}``.

    ``sc.dynamic_shapes(m, args, kwargs)`` writes the spec in the shape of the
    inputs (``None`` for tensors that were not given one).

    Args:
        (none) build it empty, then assign ``sc[tensor] = spec``.

    Raises:
        ExportInputError: (from ``dynamic_shapes``) a tensor given a spec is not
            among the inputs.

    Example:
        >>> sc = graphcap.ShapesCollection()
        >>> sc[x] = {0: graphcap.Dim("batch")}
        >>> ep = graphcap.export(model, (x, y), dynamic_shapes=sc.dynamic_shapes(model, (x, y)))
    """

    def __init__(self):
        self._shapes: dict[int, Any] = {}

    def __setitem__(self, t: torch.Tensor, shape: Any) -> None:
        if not isinstance(t, torch.Tensor):
            raise ExportInputError(f"ShapesCollection keys are input tensors, got {type(t).__name__}.",
                                   fix="Index the collection with the tensor itself: sc[x] = {0: batch}.")
        if id(t) in self._shapes and self._shapes[id(t)] != shape:
            raise ExportInputError(
                f"This tensor was given two different specs: {self._shapes[id(t)]!r} and {shape!r}.",
                fix="Give each input tensor one spec.")
        self._shapes[id(t)] = shape

    def __getitem__(self, t: torch.Tensor) -> Any:
        return self._shapes.setdefault(id(t), {})

    def __len__(self) -> int:
        return len(self._shapes)

    def dynamic_shapes(self, m: Any, args: tuple, kwargs: Optional[dict] = None) -> Any:
        used: set[int] = set()

        def pick(leaf: Any) -> Any:
            if isinstance(leaf, torch.Tensor) and id(leaf) in self._shapes:
                used.add(id(leaf))
                return self._shapes[id(leaf)]
            return None

        combined = combined_inputs(m, args, kwargs or {})
        out = pytree.tree_map(pick, combined)
        if used != set(self._shapes):
            raise ExportInputError(
                f"{len(set(self._shapes) - used)} tensor(s) of this ShapesCollection are not among the "
                f"inputs given to dynamic_shapes().",
                fix="Key the collection with the very tensor objects passed to export.")
        return out


class AdditionalInputs:
    """Infer a spec from several example input sets.

    Every dimension whose size differs between the sets becomes
    ``Dim.DYNAMIC``, and so does every int input whose value differs; the
    others stay static. ``verify(ep)`` runs the program's
    input checks on each added set.

    Args:
        (none) build it empty, then ``add(args, kwargs=None)`` each input set.

    Raises:
        ExportInputError: the sets differ in structure; ``RuntimeInputError`` from
            ``verify(ep)`` when the program refuses one of them.

    Example:
        >>> extra = graphcap.AdditionalInputs()
        >>> extra.add((torch.randn(2, 4),))
        >>> extra.add((torch.randn(5, 4),))
        >>> ep = graphcap.export(model, (torch.randn(3, 4),), dynamic_shapes=extra)
    """

    def __init__(self):
        self._examples: list[tuple[tuple, dict]] = []

    def add(self, args: tuple, kwargs: Optional[dict] = None) -> None:
        if type(args) is not tuple or (kwargs is not None and type(kwargs) is not dict):
            raise ExportInputError("AdditionalInputs.add takes a tuple of args and a dict of kwargs.",
                                   fix="Call add((x,), {'mask': m}).")
        self._examples.append((args, kwargs or {}))

    def dynamic_shapes(self, m: Any, args: tuple, kwargs: Optional[dict] = None) -> Any:
        trees = [combined_inputs(m, a, k) for a, k in [(args, kwargs or {}), *self._examples]]
        leaves0, spec0 = pytree.tree_flatten(trees[0])
        others = []
        for i, tree in enumerate(trees[1:]):
            leaves, spec = pytree.tree_flatten(tree)
            if spec != spec0:
                raise ExportInputError(
                    f"Additional input set {i} has a different structure from the example inputs.",
                    fix="Every input set must have the same containers and the same tensors.")
            others.append(leaves)

        def mark(j: int, leaf: Any) -> Any:
            values = (leaf, *(o[j] for o in others))
            if any(type(v) is not type(leaf) for v in values):
                raise ExportInputError(
                    f"The input sets have differing types at one input, so it cannot be marked as "
                    f"dynamic: {values!r}.", fix="Keep each input's type the same in every set.")
            if not isinstance(leaf, torch.Tensor):
                if any(v != leaf for v in values):
                    if isinstance(leaf, int) and not isinstance(leaf, bool):
                        return Dim.DYNAMIC  # an int that varies becomes a SymInt input
                    raise ExportInputError(
                        f"The following inputs were found to have differing values, but they cannot be "
                        f"marked as dynamic: {values!r}.",
                        fix="Keep Python values other than ints the same in every set.")
                return None
            sizes = [tuple(o[j].shape) for o in others]
            if any(len(s) != leaf.dim() for s in sizes):
                raise ExportInputError("An input tensor has a different rank in another input set.",
                                       fix="Keep every tensor's rank the same across input sets.")
            return tuple(Dim.DYNAMIC if any(s[d] != leaf.shape[d] for s in sizes) else None
                         for d in range(leaf.dim()))

        return pytree.tree_unflatten([mark(j, v) for j, v in enumerate(leaves0)], spec0)

    def verify(self, ep: Any) -> None:
        runnable = ep.module()
        for args, kwargs in self._examples:
            runnable._checker(args, kwargs)
