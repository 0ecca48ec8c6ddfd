"""Rebuild a saved program's symbols: a fresh ShapeEnv holding them with their ranges, and fake values over it.

The file's symbol table (name, sympy assumptions, range, example value) becomes
sympy symbols registered in a new ``ShapeEnv``; sizes written as expressions
are parsed by graphcap's own parser and made SymInts of that ShapeEnv, so
``meta['val']`` is again a fake tensor of a ``FakeTensorMode`` over it.
"""
from __future__ import annotations

from typing import Any, Optional

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import ValueRangesSLoc

from ..torch_private.fake import fake_with_layout, storage_extent, tracing_fake_mode
from ..torch_private.shapes import (
    example_values,
    guard_location,
    new_shape_env,
    reserve_unbacked_names,
    symbol_range_locations,
    symbol_ranges,
)
from ..torch_private.symbolic import ValueRanges, int_oo
from .checked_fields import field, ident
from .exprs import str_to_expr
from .tensors import decode_subclass_context, find_subclass, unflatten_subclass
from .values import DTYPES, bad, decode_device, decode_value

_ASSUMPTIONS = {"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite",
                "zero", "nonzero", "rational", "extended_real", "commutative", "infinite", "even", "odd"}


def range_bound(b: Any, where: str) -> Any:
    """A saved range bound (an int, a float, ``"oo"`` or ``"-oo"``) as a sympy value."""
    if b == "oo":
        return int_oo
    if b == "-oo":
        return -int_oo
    if type(b) is int:
        return sympy.Integer(b)
    if type(b) is float:
        return sympy.Float(b)
    raise bad(f"Malformed range bound {b!r:.40} at {where}.")


class SymbolTable:
    """The file's symbols, a ShapeEnv that knows them, and a fake mode over it."""

    def __init__(self, table: Any):
        if not isinstance(table, list):
            raise bad("The symbol table is malformed.")
        self.by_name: dict[str, sympy.Symbol] = {}
        self._symints: dict[str, Any] = {}
        self._extents: dict[tuple[Any, ...], Any] = {}  # a symbolic layout (as written) -> its storage extent
        self.shape_env = new_shape_env()
        self.fake_mode = tracing_fake_mode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        for i, entry in enumerate(table):
            where = f"symbols[{i}]"
            name = ident(field(entry, "name", str, where), "symbol name")
            assumptions = field(entry, "assumptions", dict, where)
            if not all(k in _ASSUMPTIONS and isinstance(v, bool) for k, v in assumptions.items()):
                raise bad(f"Unknown symbol assumptions at {where}.")
            try:
                sym = sympy.Symbol(name, **assumptions)
            except Exception as e:  # sympy rejects contradictory assumptions
                raise bad(f"Contradictory assumptions for symbol {name}: {e}") from None
            if name in self.by_name:
                raise bad(f"Symbol {name} is listed twice.")
            self.by_name[name] = sym
            lo, hi = entry.get("min"), entry.get("max")
            if lo is not None or hi is not None:
                lower = range_bound(lo, where) if lo is not None else -int_oo
                upper = range_bound(hi, where) if hi is not None else int_oo
                if lower > upper:
                    raise bad(f"Empty range for symbol {name}.")
            else:
                lower, upper = -int_oo, int_oo
            sloc = guard_location(self.shape_env)
            symbol_ranges(self.shape_env)[sym] = ValueRanges(lower, upper)
            symbol_range_locations(self.shape_env)[sym] = ValueRangesSLoc(sloc, sloc)
            hint = entry.get("hint")
            if hint is not None:
                if type(hint) is not int or not (lower <= hint <= upper):
                    raise bad(f"Malformed example value for symbol {name}.")
                example_values(self.shape_env)[sym] = sympy.Integer(hint)
        reserve_unbacked_names(self.shape_env, self.by_name)

    def expr(self, text: Any) -> Any:
        if type(text) is int:
            return sympy.Integer(text)
        return str_to_expr(text, self.by_name)

    def _hint(self, e: Any) -> Optional[Any]:
        try:
            value = e.xreplace(example_values(self.shape_env))
        except Exception:
            return None
        return value if getattr(value, "is_number", False) else None

    def symint(self, text: Any) -> Any:
        if type(text) is int:
            return text
        known = self._symints.get(text) if isinstance(text, str) else None
        if known is not None:  # one SymInt per expression: a big model repeats a few hundred thousands times
            return known
        e = self.expr(text)
        if e.is_Integer:
            return int(e)
        hint = self._hint(e)
        made = self.shape_env.create_symintnode(e, hint=int(hint) if hint is not None and hint.is_Integer else None)
        if isinstance(text, str):
            self._symints[text] = made
        return made

    def symfloat(self, text: Any) -> Any:
        e = self.expr(text)
        if e.is_number:
            return float(e)
        hint = self._hint(e)
        return self.shape_env.create_symfloatnode(e, hint=float(hint) if hint is not None else None)

    def symbool(self, text: Any) -> Any:
        e = self.expr(text)
        if e in (sympy.true, sympy.false):
            return bool(e)
        return self.shape_env.create_symboolnode(e)

    def fake_tensor(self, d: Any, where: str, depth: int = 0) -> torch.Tensor:
        if isinstance(d, dict) and "subclass" in d:
            return self._fake_subclass(d, where, depth)
        shape = [self.symint(x) for x in field(d, "shape", list, where)]
        stride = [self.symint(x) for x in field(d, "stride", list, where)]
        offset = self.symint(d.get("offset", 0))
        if len(shape) != len(stride):
            raise bad(f"Shape and strides differ in rank at {where}.")
        dtype = DTYPES.get(field(d, "dtype", str, where))
        if dtype is None:
            raise bad(f"Unknown dtype at {where}.")
        device = decode_device(field(d, "device", str, where))
        for x in (*shape, *stride, offset):
            if isinstance(x, int) and x < 0:
                raise bad(f"Negative size or stride at {where}.")
        # built on the meta device and wrapped, as the fake mode itself does, without its dispatch; a
        # symbolic layout's storage extent is worked out once (a deep program repeats each layout per layer)
        requires_grad = d.get("requires_grad") is True
        if not any(isinstance(x, torch.SymInt) for x in (*shape, *stride, offset)):
            return fake_with_layout(self.fake_mode, shape, stride, offset, dtype, device, requires_grad)
        key = (tuple(d["shape"]), tuple(d["stride"]), d.get("offset", 0))
        if key in self._extents:
            extent = self._extents[key]
        else:
            extent = self._extents[key] = storage_extent(shape, stride, offset)
        return fake_with_layout(self.fake_mode, shape, stride, offset, dtype, device, requires_grad, extent)

    def _fake_subclass(self, d: dict[str, Any], where: str, depth: int) -> torch.Tensor:
        """A fake value of a tensor subclass: fake inner tensors, put together by the class itself."""
        if depth > 16:
            raise bad(f"Tensor subclasses are nested too deeply at {where}.")
        sub = field(d, "subclass", dict, where)
        cls = find_subclass(sub.get("class"), where)
        inner = {ident(attr, "inner tensor name"): self.fake_tensor(meta, where, depth + 1)
                 for attr, meta in field(sub, "inner", dict, where).items()}
        shape = [self.symint(x) for x in field(d, "shape", list, where)]
        stride = [self.symint(x) for x in field(d, "stride", list, where)]
        value = unflatten_subclass(cls, inner, decode_subclass_context(sub.get("context"), where), shape, stride,
                                   where)
        if d.get("requires_grad") is True and value.is_floating_point():
            with self.fake_mode:
                value.requires_grad_(True)
        return value

    def val(self, j: Any, where: str) -> Any:
        def extra(tag: str, payload: Any) -> Any:
            if tag == "tensor":
                return self.fake_tensor(payload, where)
            if tag == "symint":
                return self.symint(payload)
            if tag == "symfloat":
                return self.symfloat(payload)
            if tag == "symbool":
                return self.symbool(payload)
            raise bad(f"Unknown tag {tag!r:.40} in the value of {where}.")
        return decode_value(j, extra)
