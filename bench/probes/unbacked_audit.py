"""Data-dependent values audit: unbacked sizes against torch.export and eager.

Each probe is a small program whose sizes or decisions come from tensor data (``.item()``,
``.tolist()``, ``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave``, ``bincount``).
It is exported by graphcap and by torch.export, strict=False and strict=True, and each program
is taken through four stages: as exported, ``run_decompositions()``, save/load (each library's
own functions) and decomposed-then-saved.  At every stage ``module()`` runs on the example and
on other inputs (compared with eager) and on inputs that break a check (which must be refused).
Probes marked ``refuse`` are programs both libraries should refuse; the line shows the first
line of each library's error.  Prints one line per probe and side:

    name | gc: <verdict> | gc-strict: <verdict> | te: <verdict> | te-strict: <verdict>

Run: PYTHONPATH=src python bench/probes/unbacked_audit.py [name-substring ...] [-v]
"""
from __future__ import annotations

import copy
import dataclasses
import io
import logging
import math
import sys
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import error_line, same
from torch.export import Dim

import graphcap


@dataclasses.dataclass
class Probe:
    name: str
    f: Callable[..., Any]
    args: tuple[Any, ...]
    ok: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    bad: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    dynamic_shapes: Any = None
    refuse: bool = False  # both libraries are expected to refuse the export


class Fn(torch.nn.Module):
    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f

    def forward(self, *a: Any) -> Any:
        return self.f(*a)


def _stages(side: str, ep: Any) -> dict[str, Callable[[], Any]]:
    save = graphcap.save if side.startswith("gc") else te.save
    load = graphcap.load if side.startswith("gc") else te.load

    def roundtrip(p: Any) -> Any:
        buf = io.BytesIO()
        save(p, buf)
        return load(io.BytesIO(buf.getvalue()))

    return {"ep": lambda: ep, "decomp": lambda: ep.run_decompositions(),
            "load": lambda: roundtrip(ep), "decomp+load": lambda: roundtrip(ep.run_decompositions())}


def run_side(side: str, p: Probe) -> str:
    export = graphcap.export if side.startswith("gc") else te.export
    strict = side.endswith("strict")
    model = Fn(p.f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = None if p.dynamic_shapes is None else (p.dynamic_shapes,)  # Fn's one *a argument
            ep = export(model, copy.deepcopy(p.args), dynamic_shapes=spec, strict=strict)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return ("refused ok: " if p.refuse else "export fails: ") + error_line(e, 110)
    if p.refuse:
        return "EXPORTS (expected a refusal)"
    notes: list[str] = []
    for stage, make in _stages(side, ep).items():
        try:
            prog = make()
            prog.validate()  # the IR invariants: every symbol ranged, metadata on every node
            mod = prog.module()
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage} fails: {error_line(e, 110)}")
            continue
        for args in [p.args, *p.ok]:
            try:
                want = p.f(*copy.deepcopy(args))
            except Exception as e:
                notes.append(f"eager fails at {_show(args)}: {error_line(e, 110)}")
                continue
            try:
                got = mod(*copy.deepcopy(args))
            except Exception as e:
                if "-v" in sys.argv:
                    traceback.print_exc()
                notes.append(f"{stage} run fails at {_show(args)}: {error_line(e, 110)}")
                continue
            if not same(want, got):
                notes.append(f"{stage} WRONG at {_show(args)}")
        for args in p.bad:
            try:
                mod(*copy.deepcopy(args))
                notes.append(f"{stage} accepts bad {_show(args)}")
            except Exception as e:
                if stage == "ep" and "-v" in sys.argv:
                    print(f"   [{side}] bad {_show(args)}: {error_line(e, 110)}")
    return "=" if not notes else "; ".join(dict.fromkeys(notes))


def _show(args: Any) -> str:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(str(a.tolist()) if a.numel() <= 6 else f"T{tuple(a.shape)}")
        else:
            out.append(repr(a))
    return ",".join(out)


t = torch.tensor
SIDES = ("gc", "gc-strict", "te", "te-strict")


def _n_sized(n: torch.Tensor, x: torch.Tensor) -> Any:
    k = n.item()
    torch._check_is_size(k)
    return x.new_zeros(k) + 1, x.new_empty(k).fill_(2.0), torch.full((k, 2), 3.0)


def _is_size_only(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check_is_size(k)
    return torch.ones(k).sum() + k, torch.arange(k)


def _no_check(n: torch.Tensor) -> Any:
    return torch.zeros(n.item()) + 1


def _expand(n: torch.Tensor, x: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 1)
    return x.expand(k, 3) * 2, x.repeat(k, 1)


def _view_nonzero(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x)
    return idx.view(-1), idx.reshape(1, -1), idx.t().contiguous().view(-1, 1)


def _view_unbacked_rows(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    return torch.arange(k * 6).view(k, 2, 3).sum(-1), torch.ones(k, 4).reshape(-1)


def _narrow(x: torch.Tensor, se: torch.Tensor) -> Any:
    s, ln = se.tolist()
    torch._check(s >= 0)
    torch._check(ln >= 0)
    torch._check(s + ln <= x.shape[0])
    return x.narrow(0, s, ln) * 2


def _slice(x: torch.Tensor, se: torch.Tensor) -> Any:
    s, e = se.tolist()
    torch._check(s >= 0)
    torch._check(e >= s)
    torch._check(e <= x.shape[0])
    return x[s:e].sum(0), x[s:e]


def _slice_unchecked(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    return x[k:] + 1, x[:k].sum()


def _split(x: torch.Tensor, sizes: torch.Tensor) -> Any:
    a, b, c = sizes.tolist()
    for v in (a, b, c):
        torch._check_is_size(v)
    torch._check(a + b + c == x.shape[0])
    parts = torch.split(x, [a, b, c])
    return parts[0].sum(0), parts[1] * 2, parts[2].shape[0]


def _split_dim(x: torch.Tensor, sizes: torch.Tensor) -> Any:
    a, b = sizes.tolist()
    torch._check_is_size(a)
    torch._check_is_size(b)
    torch._check(a + b == x.shape[0])
    return [p.sum(0) for p in x.split([a, b])]


def _select(x: torch.Tensor, n: torch.Tensor) -> Any:
    i = n.item()
    torch._check(i >= -x.shape[0])
    torch._check(i < x.shape[0])
    return x[i] * 2, x.select(0, i)


def _nonzero_ops(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x > 0).squeeze(1)
    vals = x[idx]
    return vals.sum(), torch.cat([vals, torch.ones(2)]), x.index_select(0, idx), idx.shape[0]


def _masked_select(x: torch.Tensor) -> Any:
    y = torch.masked_select(x, x > 0)
    return torch.cat([torch.zeros(1), y, torch.zeros(2)]), y.mean(), y.sum() + y.numel()


def _bool_index(x: torch.Tensor, y: torch.Tensor) -> Any:
    m = x > 0
    return x[m] * y[m], y[m].sum()


def _unique(x: torch.Tensor) -> Any:
    u, inv, counts = torch.unique(x, return_inverse=True, return_counts=True)
    return u * 2, inv, counts, u.shape[0]


def _unique_consecutive(x: torch.Tensor) -> Any:
    return torch.unique_consecutive(x, return_counts=True)


def _repeat_interleave(x: torch.Tensor, r: torch.Tensor) -> Any:
    return torch.repeat_interleave(x, r, dim=0), torch.repeat_interleave(r)


def _bincount(x: torch.Tensor) -> Any:
    b = torch.bincount(x, minlength=3)
    return b, b.float().mean(), torch.cat([b, b])


def _cond_item_pred(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    return torch.cond(k > 3, lambda x: x.sin(), lambda x: x.cos(), (x,))


def _cond_item_operand(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return torch.cond(x.sum() > 0, lambda x: x[:k].sum() + k, lambda x: x.sum() - k, (x,))


def _cond_nonzero(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x > 0)

    def t(i: torch.Tensor) -> torch.Tensor:
        return i.float().sum().reshape(1)

    def f(i: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1)

    return torch.cond(idx.shape[0] > 2, t, f, (idx,))


def _cond_branch_size(x: torch.Tensor) -> Any:
    def t(x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x[x < 0]

    return torch.cond(x.sum() > 0, t, f, (x,))


def _with_dim(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check_is_size(k)
    torch._check(k <= x.shape[0])
    return x[:k] * 2, torch.zeros(k, x.shape[1]) + x.shape[0], x.new_ones(x.shape[0] + k)


def _with_dim_nonzero(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x.sum(1) > 0).squeeze(1)
    rows = x[idx]
    return rows @ x.t(), torch.cat([rows, x]).shape[0]


def _item_float(x: torch.Tensor, f: torch.Tensor) -> Any:
    v = f.item()
    return x * v, torch.full((2,), v), x + math.sqrt(v * v + 1.0)


def _item_bool(x: torch.Tensor, b: torch.Tensor) -> Any:
    flag = b.item()
    return torch.where(torch.tensor(flag), x, -x), x * flag


def _int_of_tensor(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = int(n)
    torch._check(k >= 0)
    torch._check(k <= 4)
    return x[:k], torch.arange(k) * 2


def _two_items_equal(a: torch.Tensor, b: torch.Tensor) -> Any:
    i, j = a.item(), b.item()
    torch._check_is_size(i)
    torch._check(i == j)
    return torch.ones(i) + torch.ones(j), torch.ones(i) @ torch.ones(j)


def _topk(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return torch.topk(x, k).values


def _pad(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    return torch.nn.functional.pad(x, (k, 1)), torch.nn.functional.pad(x, (0, k), value=3.0)


def _tolist_floats(x: torch.Tensor, w: torch.Tensor) -> Any:
    a, b = w.tolist()
    return x * a + b


def _item_output(n: torch.Tensor) -> Any:
    k = n.item()
    return k, k * 2 + 1, n + k


def _branch_item(x: torch.Tensor) -> Any:
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def _branch_nonzero(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x)
    if idx.shape[0] == 0:
        return x
    return x[idx[:, 0]]


def _branch_any(x: torch.Tensor) -> Any:
    if (x > 0).any():
        return x * 2
    return x


def _while_item(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    out = x
    for _ in range(k):
        out = out + 1
    return out


def _unbacked_guard_assert(n: torch.Tensor, x: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 2)
    torch._check(k <= 6)
    return torch.zeros(k, 2) + x, x.sum() * k


def _view_div(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    return torch.arange(2 * k).view(2, k)


def _mod_size(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= 20)
    return torch.ones(k // 3), torch.ones(k % 3), torch.ones(max(k - 5, 0))


def _unify_with_dim(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k == x.shape[0])
    return x + torch.ones(k, 1), torch.zeros(k).shape[0]


def _one_hot(t_: torch.Tensor) -> Any:
    return torch.nn.functional.one_hot(t_)


def _linspace(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    return torch.linspace(0.0, 1.0, steps=k), torch.arange(k, k + 5)


def _view_static_by_item(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 1)
    return x.reshape(k, -1)


def _roll(x: torch.Tensor, n: torch.Tensor) -> Any:
    return torch.roll(x, n.item(), 0)


def _list_index(x: torch.Tensor, n: torch.Tensor) -> Any:
    scales = [1.0, 2.0, 3.0]
    return x * scales[n.item()]


def _sum_dim_item(x: torch.Tensor, n: torch.Tensor) -> Any:
    return x.sum(n.item())


def _size_output(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x)
    return idx.shape, idx.size(0) + 1


def _float_output(f: torch.Tensor) -> Any:
    v = f.item()
    return v * 2.0, f + v


def _nonzero_tuple(x: torch.Tensor) -> Any:
    rows, cols = torch.nonzero(x, as_tuple=True)
    return rows + cols, torch.argwhere(x)


def _unique_dim(x: torch.Tensor) -> Any:
    return torch.unique(x, dim=0)


def _tolist_2d(m: torch.Tensor) -> Any:
    (a, b), (c, d) = m.tolist()
    torch._check_is_size(a)
    torch._check_is_size(d)
    return torch.ones(a, d) * (b + c)


def _cond_branch_item_size(x: torch.Tensor, n: torch.Tensor) -> Any:
    def t(x: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 4)
        return torch.zeros(k) + x.sum()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]

    return torch.cond(x.sum() > 0, t, f, (x,))


def _while_item_bound(x: torch.Tensor, n: torch.Tensor) -> Any:
    from torch._higher_order_ops.while_loop import while_loop
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= 10)
    return while_loop(lambda i, y: i < k, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x))


def _map_over_nonzero(x: torch.Tensor) -> Any:
    from torch._higher_order_ops.map import map as hop_map
    rows = x[x.sum(1) > 0]
    return hop_map(lambda r: r * 2 + 1, rows)


def _check_lt_then_index(x: torch.Tensor) -> Any:
    idx = torch.nonzero(x > 0).squeeze(1)
    torch._check(idx.shape[0] > 0)
    return x[idx[0]], idx[-1]


def _sym_max(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    return torch.ones(max(k, 2)), torch.ones(min(k, 3))


def _setitem_nonzero(x: torch.Tensor) -> Any:
    y = x.clone()
    idx = torch.nonzero(y > 0).squeeze(1)
    y[idx] = y[idx] * 10
    return y


def _cat_split_at(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return torch.cat([x[k:], x[:k]]) * 2


def _unflatten(n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 1)
    return torch.arange(k * 4).unflatten(0, (k, -1)).sum(1)


def _interpolate(x: torch.Tensor, n: torch.Tensor) -> Any:
    k = n.item()
    torch._check(k >= 1)
    torch._check(k <= 32)
    return torch.nn.functional.interpolate(x, size=k, mode="nearest")


def _cond_bool_item(x: torch.Tensor, b: torch.Tensor) -> Any:
    return torch.cond(b.item(), lambda x: x * 2, lambda x: x - 1, (x,))


def _check_bool_item(x: torch.Tensor, b: torch.Tensor) -> Any:
    flag = b.item()
    torch._check(flag)
    return x + 1


def _float_item_in_branch(x: torch.Tensor, f: torch.Tensor) -> Any:
    v = f.item()
    torch._check(v > 0.0)
    return torch.cond(x.sum() > 0, lambda x: x * v, lambda x: x / v, (x,))


X = torch.randn(6, 3)
PROBES = [
    Probe("new_zeros/new_empty/full of _check_is_size", _n_sized, (t(3), torch.randn(2)),
          ok=[(t(0), torch.randn(2)), (t(1), torch.randn(2)), (t(9), torch.randn(2))],
          bad=[(t(-1), torch.randn(2))]),
    Probe("_check_is_size only, at 0 and 1", _is_size_only, (t(4),), ok=[(t(0),), (t(1),), (t(50),)],
          bad=[(t(-2),)]),
    Probe("zeros(item) with no check", _no_check, (t(3),), ok=[(t(0),), (t(1),), (t(7),)], bad=[(t(-1),)]),
    Probe("expand / repeat to an unbacked count", _expand, (t(3), torch.randn(1, 3)),
          ok=[(t(1), torch.randn(1, 3)), (t(5), torch.randn(1, 3))], bad=[(t(0), torch.randn(1, 3))]),
    Probe("view / reshape of nonzero output", _view_nonzero, (t([1, 0, 2, 3]),),
          ok=[(t([0, 0, 0, 0]),), (t([1, 1, 1, 1]),), (t([0, 5, 0, 0]),)]),
    Probe("view(k, 2, 3) of arange(k*6)", _view_unbacked_rows, (t(3),), ok=[(t(0),), (t(1),), (t(8),)],
          bad=[(t(-1),)]),
    Probe("narrow with unbacked start and length", _narrow, (X, t([1, 3])),
          ok=[(X, t([0, 0])), (X, t([0, 6])), (X, t([5, 1])), (X, t([6, 0]))],
          bad=[(X, t([4, 3])), (X, t([-1, 2]))]),
    Probe("x[s:e] with unbacked start and end", _slice, (X, t([1, 4])),
          ok=[(X, t([0, 0])), (X, t([0, 6])), (X, t([2, 3]))], bad=[(X, t([3, 2])), (X, t([0, 7]))]),
    Probe("x[k:] and x[:k] with no check (negative k too)", _slice_unchecked, (X, t(2)),
          ok=[(X, t(0)), (X, t(6)), (X, t(9)), (X, t(-2)), (X, t(-9))]),
    Probe("split with tolist sizes", _split, (X, t([1, 2, 3])),
          ok=[(X, t([0, 0, 6])), (X, t([6, 0, 0])), (X, t([2, 2, 2]))], bad=[(X, t([1, 1, 1]))]),
    Probe("Tensor.split with tolist sizes, Dim rows", _split_dim, (X, t([2, 4])),
          ok=[(torch.randn(9, 3), t([9, 0])), (torch.randn(2, 3), t([1, 1]))],
          bad=[(torch.randn(4, 3), t([2, 3]))], dynamic_shapes=({0: Dim("r", max=64)}, None)),
    Probe("x[i] with unbacked (negative) index", _select, (X, t(2)), ok=[(X, t(0)), (X, t(5)), (X, t(-1)), (X, t(-6))],
          bad=[(X, t(6)), (X, t(-7))]),
    Probe("nonzero: index, sum, cat with static, index_select, count", _nonzero_ops, (t([1.0, -1.0, 2.0]),),
          ok=[(t([-1.0, -1.0, -2.0]),), (t([1.0, 1.0, 2.0]),)]),
    Probe("masked_select: cat with static, mean, numel", _masked_select, (t([1.0, -1.0, 2.0, 0.5]),),
          ok=[(t([-1.0, -1.0, -2.0, -3.0]),), (t([1.0, 1.0, 2.0, 3.0]),)]),
    Probe("bool-mask index of two tensors", _bool_index, (t([1.0, -1.0, 2.0]), t([3.0, 4.0, 5.0])),
          ok=[(t([-1.0, -1.0, -2.0]), t([3.0, 4.0, 5.0])), (t([1.0, 1.0, 1.0]), t([3.0, 4.0, 5.0]))]),
    Probe("unique with inverse and counts", _unique, (t([3, 1, 3, 2]),), ok=[(t([1, 1, 1, 1]),), (t([4, 3, 2, 1]),)]),
    Probe("unique_consecutive with counts", _unique_consecutive, (t([1, 1, 2, 2, 3]),),
          ok=[(t([1, 1, 1, 1, 1]),), (t([1, 2, 1, 2, 1]),)]),
    Probe("repeat_interleave with tensor repeats", _repeat_interleave, (torch.randn(3, 2), t([1, 0, 2])),
          ok=[(torch.randn(3, 2), t([0, 0, 0])), (torch.randn(3, 2), t([4, 4, 4]))]),
    Probe("bincount(minlength=3): mean, cat", _bincount, (t([0, 1, 1, 4]),),
          ok=[(t([0, 0, 0, 0]),), (t([1, 9, 2, 2]),)]),
    Probe("cond predicate on item()", _cond_item_pred, (torch.randn(3), t(5)),
          ok=[(torch.randn(3), t(1)), (torch.randn(3), t(4)), (torch.randn(3), t(3))]),
    Probe("unbacked int closed over by cond branches", _cond_item_operand, (torch.randn(4).abs(), t(2)),
          ok=[(torch.randn(4).abs(), t(0)), (-torch.randn(4).abs(), t(4)), (torch.randn(4).abs(), t(4))],
          bad=[(torch.randn(4), t(5))]),
    Probe("cond on nonzero count, nonzero output as operand", _cond_nonzero, (t([1.0, 2.0, 3.0, -1.0]),),
          ok=[(t([1.0, -2.0, 3.0, -1.0]),), (-torch.ones(4),), (torch.ones(4),)]),
    Probe("cond branches return different unbacked sizes", _cond_branch_size, (t([1.0, 2.0, -1.0]),),
          ok=[(t([-1.0, -2.0, 1.0]),), (t([1.0, 1.0, 1.0]),)]),
    Probe("unbacked with Dim rows: x[:k], zeros(k, d1), new_ones(s0 + k)", _with_dim, (X, t(2)),
          ok=[(X, t(0)), (X, t(6)), (torch.randn(2, 4), t(1)), (torch.randn(11, 4), t(11))],
          bad=[(torch.randn(2, 4), t(3)), (X, t(-1))],
          dynamic_shapes=({0: Dim("r", max=64), 1: Dim("c", max=8)}, None)),
    Probe("nonzero rows of a Dim input, matmul, cat", _with_dim_nonzero, (X,),
          ok=[(torch.randn(2, 3),), (-torch.ones(5, 3),), (torch.ones(7, 3),)],
          dynamic_shapes=({0: Dim("r", max=64)},)),
    Probe("item() of a float: scale, full, sqrt", _item_float, (X, t(0.5)), ok=[(X, t(-2.0)), (X, t(0.0))]),
    Probe("item() of a bool", _item_bool, (X, t(True)), ok=[(X, t(False))]),
    Probe("int(tensor) as a size", _int_of_tensor, (X, t(3)), ok=[(X, t(0)), (X, t(4))], bad=[(X, t(5))]),
    Probe("two items checked equal, add and matmul", _two_items_equal, (t(3), t(3)),
          ok=[(t(0), t(0)), (t(1), t(1)), (t(8), t(8))], bad=[(t(3), t(4))]),
    Probe("topk with unbacked k", _topk, (torch.randn(6), t(3)),
          ok=[(torch.randn(6), t(0)), (torch.randn(6), t(6))], bad=[(torch.randn(6), t(7))]),
    Probe("pad by an unbacked amount", _pad, (torch.randn(2, 3), t(2)),
          ok=[(torch.randn(2, 3), t(0)), (torch.randn(2, 3), t(5))]),
    Probe("tolist of floats as scalars", _tolist_floats, (X, t([0.5, 2.0])), ok=[(X, t([-3.0, 0.0]))]),
    Probe("item() returned as an int output", _item_output, (t(3),), ok=[(t(-4),), (t(0),)]),
    Probe("guards u0 >= 2, u0 <= 6 refused at 1, 7", _unbacked_guard_assert, (t(3), torch.randn(2)),
          ok=[(t(2), torch.randn(2)), (t(6), torch.randn(2))], bad=[(t(1), torch.randn(2)), (t(7), torch.randn(2))]),
    Probe("view(2, k) of arange(2k)", _view_div, (t(3),), ok=[(t(0),), (t(1),), (t(5),)]),
    Probe("k // 3, k % 3, max(k - 5, 0) sizes", _mod_size, (t(7),), ok=[(t(0),), (t(2),), (t(20),)],
          bad=[(t(21),)]),
    Probe("item() checked equal to a Dim size", _unify_with_dim, (X, t(6)),
          ok=[(torch.randn(2, 3), t(2)), (torch.randn(9, 3), t(9))],
          bad=[(torch.randn(4, 3), t(3))], dynamic_shapes=({0: Dim("r", max=64)}, None)),
    Probe("one_hot without num_classes", _one_hot, (t([0, 2, 1]),), ok=[(t([0, 0, 0]),), (t([4, 1, 0]),)]),
    Probe("linspace(steps=k), arange(k, k+5)", _linspace, (t(4),), ok=[(t(0),), (t(1),), (t(9),)]),
    Probe("reshape(k, -1) of a static tensor", _view_static_by_item, (torch.randn(12), t(3)),
          ok=[(torch.randn(12), t(4)), (torch.randn(12), t(12))], bad=[(torch.randn(12), t(5))]),
    Probe("roll by an item()", _roll, (X, t(2)), ok=[(X, t(-1)), (X, t(0)), (X, t(13))]),
    Probe("python list indexed by item() (refuse)", _list_index, (X, t(1)), refuse=True),
    Probe("sum(dim=item()) (refuse)", _sum_dim_item, (X, t(1)), refuse=True),
    Probe("nonzero shape returned (torch.Size, SymInt)", _size_output, (t([1, 0, 3]),), ok=[(t([0, 0, 0]),)]),
    Probe("item() of a float returned", _float_output, (t(1.5),), ok=[(t(-3.0),)]),
    Probe("nonzero(as_tuple=True), argwhere", _nonzero_tuple, (t([[1, 0], [2, 3]]),),
          ok=[(t([[0, 0], [0, 0]]),), (t([[1, 1], [1, 1]]),)]),
    Probe("unique(dim=0)", _unique_dim, (t([[1, 2], [1, 2], [0, 1]]),), ok=[(t([[1, 2], [3, 4], [5, 6]]),)]),
    Probe("tolist of a 2-D tensor as sizes", _tolist_2d, (t([[2, 1], [1, 3]]),), ok=[(t([[0, 5], [2, 1]]),)]),
    Probe("cond branch sizes from item() vs boolean mask", _cond_branch_item_size, (torch.ones(3), t(2)),
          ok=[(torch.ones(3), t(0)), (-torch.ones(3), t(3)), (t([1.0, -2.0, 0.5]), t(4))],
          bad=[(torch.ones(3), t(5))]),
    Probe("while_loop bounded by item()", _while_item_bound, (torch.ones(2), t(3)),
          ok=[(torch.ones(2), t(0)), (torch.ones(2), t(10))], bad=[(torch.ones(2), t(11))]),
    Probe("map over rows picked by a mask", _map_over_nonzero, (X,), ok=[(torch.ones(4, 3),), (X.abs() + 1,)]),
    Probe("_check(count > 0) then idx[0], idx[-1]", _check_lt_then_index, (t([1.0, -1.0, 2.0]),),
          ok=[(t([-1.0, -1.0, 2.0]),)], bad=[(t([-1.0, -1.0, -2.0]),)]),
    Probe("max(k, 2), min(k, 3) sizes", _sym_max, (t(4),), ok=[(t(0),), (t(1),), (t(9),)]),
    Probe("setitem at nonzero indices", _setitem_nonzero, (t([1.0, -1.0, 2.0]),),
          ok=[(t([-1.0, -1.0, -2.0]),), (t([1.0, 1.0, 1.0]),)]),
    Probe("cat([x[k:], x[:k]]) with Dim rows; rows past Dim max refused", _cat_split_at, (X, t(2)),
          ok=[(X, t(0)), (X, t(6)), (torch.randn(3, 3), t(1))],
          bad=[(torch.randn(65, 3), t(1)), (X, t(7))], dynamic_shapes=({0: Dim("r", max=64)}, None)),
    Probe("unflatten(0, (k, -1))", _unflatten, (t(3),), ok=[(t(1),), (t(7),)], bad=[(t(0),)]),
    Probe("interpolate to an item() size", _interpolate, (torch.randn(1, 2, 5), t(8)),
          ok=[(torch.randn(1, 2, 5), t(1)), (torch.randn(1, 2, 5), t(32))], bad=[(torch.randn(1, 2, 5), t(33))]),
    Probe("cond predicate is a bool item()", _cond_bool_item, (torch.randn(3), t(True)),
          ok=[(torch.randn(3), t(False))]),
    Probe("torch._check(bool item())", _check_bool_item, (torch.randn(3), t(True)), bad=[(torch.randn(3), t(False))]),
    Probe("float item() checked > 0, used in cond branches", _float_item_in_branch, (torch.ones(3), t(2.0)),
          ok=[(-torch.ones(3), t(0.5))], bad=[(torch.ones(3), t(-1.0))]),
    Probe("if x.sum().item() > 0 (refuse)", _branch_item, (X,), refuse=True),
    Probe("if nonzero count == 0 (refuse)", _branch_nonzero, (t([1.0, 0.0]),), refuse=True),
    Probe("if (x > 0).any() (refuse)", _branch_any, (X,), refuse=True),
    Probe("for _ in range(item()) (refuse)", _while_item, (X, t(2)), refuse=True),
]


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)
    logging.getLogger("torch._export.serde.serialize").setLevel(logging.ERROR)
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    sides = [s for s in SIDES if not any(a == f"--no-{s}" for a in sys.argv)]
    for p in PROBES:
        if wanted and not any(w in p.name for w in wanted):
            continue
        torch.manual_seed(0)
        cols = [f"{s}: {run_side(s, p)}" for s in sides]
        print(f"{p.name} | " + " | ".join(cols), flush=True)


if __name__ == "__main__":
    main()
