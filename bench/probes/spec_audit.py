"""dynamic_shapes spec audit: specs, their errors and the programs they give, against torch.export.

Each probe is a program, example inputs and a ``dynamic_shapes`` spec, written once over a ``Dim``
factory so that each library is given its own ``Dim`` (graphcap's for graphcap, torch's for
torch.export).  Each is exported by graphcap and by torch.export (strict=False, and strict=True for
the probes marked ``strict``).  A side prints either the refusal (class, first line, and whether the
message names a fix) or: ``range_constraints`` (values only), then ``module()`` on the example and on
the other accepted inputs (compared with eager) and on the inputs it must refuse (which must raise
before computing: a buffer counter is checked untouched).  A probe marked ``fix`` expects a
constraint violation with suggested fixes: the fixes are applied with each library's
``refine_dynamic_shapes_from_suggested_fixes`` and the program exported again.

    name | gc: <verdict> | te: <verdict> [| gc-strict | te-strict]

Run: PYTHONPATH=src python bench/probes/spec_audit.py [name-substring ...] [-v] [--torch-dims]
(``--torch-dims``: graphcap with its own Dim against graphcap with torch.export's Dim objects)
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes as te_refine

import graphcap


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


class Counted(torch.nn.Module):
    """Wraps a function; a buffer counts the calls that reached the computation."""

    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: Any, y: Any = None, z: Any = None) -> Any:
        self.calls.add_(1)
        if z is not None:
            return self.f(x, y, z)
        if y is not None:
            return self.f(x, y)
        return self.f(x)


@dataclasses.dataclass
class Probe:
    name: str
    f: Callable[..., Any]
    args: tuple[Any, ...]
    spec: Callable[[Any], Any]  # Dim -> dynamic_shapes
    ok: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    bad: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    fix: bool = False  # a violation with suggested fixes is expected; refine and export again
    strict: bool = False  # also strict=True


def _first(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    head = text[0][:120] if text else ""
    fix = "fix" if ("Suggested fix" in str(e) or "Dim(" in str(e) or "Try" in str(e)
                    or "use " in str(e).lower()) else "NO-FIX"
    user = "UserError" if isinstance(e, torch._dynamo.exc.UserError) else type(e).__mro__[1].__name__
    return f"{type(e).__name__}[{user}]({fix}): {head}"


def _ranges(ep: Any) -> str:
    return "{" + ", ".join(sorted(f"[{r.lower}, {r.upper}]" for r in ep.range_constraints.values())) + "}"


def _call(mod: Any, p: Probe, args: tuple[Any, ...]) -> Any:
    kw = {k: copy.deepcopy(v) for k, v in p.kwargs.items()} if len(args) == len(p.args) else {}
    return mod(*copy.deepcopy(args), **kw)


def _run(side: str, p: Probe, spec_maker: Callable[[Any], Any] | None = None) -> str:
    gc = side.startswith("gc")
    export = graphcap.export if gc else te.export
    Dim = graphcap.Dim if gc and not side.startswith("gc-tdim") else te.Dim  # gc-tdim: graphcap, torch's Dim
    strict = side.endswith("strict")
    model = _Star() if p.f is _star else Counted(p.f)
    try:
        spec = (spec_maker or p.spec)(Dim)
        args = copy.deepcopy(p.args)
        if isinstance(spec, (graphcap.ShapesCollection, te.ShapesCollection)):
            b = Dim("b", max=32)
            spec[args[0]] = {0: b}
            spec[args[1]] = {0: b}
            spec = spec.dynamic_shapes(model, args)
        if isinstance(spec, (graphcap.AdditionalInputs, te.AdditionalInputs)):
            extra_sets = spec
            spec = spec.dynamic_shapes(model, args)
            spec_check = getattr(extra_sets, "verify", None)
        else:
            spec_check = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = export(model, args, dict(p.kwargs), dynamic_shapes=spec, strict=strict)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        if p.fix and spec_maker is None:
            refine = graphcap.refine_dynamic_shapes_from_suggested_fixes if gc else te_refine
            try:
                new = refine(str(e), spec)
            except Exception as e2:
                return f"fails: {_first(e)}; refine fails: {_first(e2)}"
            again = _run(side, p, lambda _d: new)
            return f"violation: {_first(e)} -> refined {new!r} -> {again}"
        return "fails: " + _first(e)
    notes = [_ranges(ep)]
    if spec_check is not None:
        try:
            spec_check(ep)
        except Exception as e:
            notes.append(f"verify fails: {_first(e)}")
    mod = ep.module()
    for args in [p.args, *p.ok]:
        want = p.f(*copy.deepcopy(args), **copy.deepcopy(p.kwargs if len(args) == len(p.args) else {}))
        try:
            got = _call(mod, p, args)
        except Exception as e:
            notes.append(f"run fails at {_show(args)}: {_first(e)}")
            continue
        if not _same(want, got):
            notes.append(f"WRONG at {_show(args)}")
    for args in p.bad:
        before = float(mod.calls) if hasattr(mod, "calls") else None
        try:
            _call(mod, p, args)
            notes.append(f"ACCEPTS bad {_show(args)}")
        except Exception as e:
            after = float(mod.calls) if hasattr(mod, "calls") else None
            if before != after:
                notes.append(f"computed before refusing {_show(args)}")
            if "-v" in sys.argv:
                notes.append(f"bad {_show(args)}: {_first(e)}")
    notes += _derived_stages(side, p, ep)
    return " ".join(notes)


def _derived_stages(side: str, p: Probe, ep: Any) -> list[str]:
    """The same checks on ``run_decompositions()`` and a save/load round trip (each library's own):
    the ranges must stay, the in-range inputs match eager, the out-of-range ones be refused."""
    import io
    save, load = (graphcap.save, graphcap.load) if side.startswith("gc") else (te.save, te.load)

    def roundtrip(prog: Any) -> Any:
        buf = io.BytesIO()
        save(prog, buf)
        return load(io.BytesIO(buf.getvalue()))

    notes = []
    for stage, make in (("decomp", lambda: ep.run_decompositions()), ("load", lambda: roundtrip(ep))):
        try:
            prog = make()
            mod = prog.module()
        except Exception as e:
            notes.append(f"{stage} fails: {_first(e)}")
            continue
        if _ranges(prog) != _ranges(ep):
            notes.append(f"{stage} ranges {_ranges(prog)}")
        for args in [p.args, *p.ok]:
            want = p.f(*copy.deepcopy(args), **copy.deepcopy(p.kwargs if len(args) == len(p.args) else {}))
            try:
                if not _same(want, _call(mod, p, args)):
                    notes.append(f"{stage} WRONG at {_show(args)}")
            except Exception as e:
                notes.append(f"{stage} run fails at {_show(args)}: {_first(e)}")
        for args in p.bad:
            try:
                _call(mod, p, args)
                notes.append(f"{stage} ACCEPTS bad {_show(args)}")
            except Exception:
                pass
    return notes


def _show(args: Any) -> str:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(f"T{tuple(a.shape)}")
        elif isinstance(a, (list, tuple)):
            out.append(type(a).__name__[0] + _show(a))
        elif isinstance(a, dict):
            out.append("{" + _show(tuple(a.values())) + "}")
        else:
            out.append(repr(a))
    return "(" + ",".join(out) + ")"


r = torch.randn


def _add(x: Any, y: Any) -> Any:
    return x + y


def _cat(x: Any, y: Any) -> Any:
    return torch.cat([x, y], 0)


def _branch(x: Any) -> Any:
    return x * 2 if x.shape[0] > 4 else x + 1


def _spec_const(x: Any) -> Any:
    return x.view(3, 4) + 1  # fixes x.shape[0] == 12


def _narrow8(x: Any) -> Any:
    torch._check(x.shape[0] <= 8)
    return x * 2


def _int_in(x: Any, n: Any) -> Any:
    return x * n + n


def _pair(x: Any) -> Any:
    return x[0] + x[1]


def _dct(x: Any) -> Any:
    return x["a"] * 2 + x["b"].sum()


def _nested(x: Any) -> Any:
    return x["p"][0] + x["p"][1] + x["q"].sum()


def _mm(x: Any, y: Any) -> Any:
    return x @ y


def _pairs(x: Any, y: Any) -> Any:
    return x.reshape(-1, 2).sum(1) + y  # x of 2*d


def _shift(x: Any, y: Any) -> Any:
    return x[1:] + y  # x of d+1


def _shift_back(x: Any, y: Any) -> Any:
    return torch.cat([x, x[:1]]) + y  # y of d+1 (x is d)


def _three(x: Any, y: Any, z: Any) -> Any:
    return x.sum() + y.sum() + z.sum()


def _mean(x: Any) -> Any:
    return x.mean(0, keepdim=True) * x


def _mod3(x: Any) -> Any:
    return x.view(-1, 3).sum(1)


def _mixed(x: Any, y: Any) -> Any:
    return x.sum(1) + y.sum(0)


def _kw(x: Any, y: Any) -> Any:
    return x + y.sum()


def _int_size(x: Any, n: Any) -> Any:
    return x.reshape(n) * 2


class _Star(torch.nn.Module):
    def forward(self, *args: Any) -> Any:
        return args[0] + args[1]


def _star(x: Any, y: Any) -> Any:
    return x + y


def _spec8(x: Any) -> Any:
    return x.view(2, 4) + 1  # fixes x.shape[0] == 8


def _twice(x: Any, y: Any) -> Any:
    return torch.cat([x, x]) + y


def _spec_add(x: Any, y: Any) -> Any:
    return x.view(3, 4) + y.view(3, 4)


def _branch_add(x: Any, y: Any) -> Any:
    return (x + y) * 2 if x.shape[0] > 4 else x - y


def _window(x: Any) -> Any:
    torch._check(x.shape[0] >= 3)
    torch._check(x.shape[0] <= 12)
    return x + 1


def _collection(D: Any) -> Any:
    sc = (graphcap.ShapesCollection if D is graphcap.Dim else te.ShapesCollection)()
    return sc  # filled by _run with the example tensors


def _additional(D: Any) -> Any:
    ai = (graphcap.AdditionalInputs if D is graphcap.Dim else te.AdditionalInputs)()
    ai.add((r(7, 3), r(7, 3)))
    ai.add((r(2, 3), r(2, 3)))
    return ai


def _additional_12(D: Any) -> Any:
    ai = (graphcap.AdditionalInputs if D is graphcap.Dim else te.AdditionalInputs)()
    ai.add((r(24), r(24)))
    return ai


P: list[Probe] = [
    # named Dims, ranges, ends, 0/1
    Probe("named min/max", _mean, (r(4, 3),), lambda D: ({0: D("b", min=2, max=10)},),
          ok=[(r(2, 3),), (r(10, 3),), (r(7, 3),)], bad=[(r(1, 3),), (r(11, 3),), (r(4, 4),)], strict=True),
    Probe("named no bounds, 0 and 1", _mean, (r(4, 3),), lambda D: ({0: D("b")},),
          ok=[(r(0, 3),), (r(1, 3),), (r(2, 3),), (r(100, 3),)], strict=True),
    Probe("named min=0", _mean, (r(4, 3),), lambda D: ({0: D("b", min=0, max=6)},),
          ok=[(r(0, 3),), (r(1, 3),), (r(6, 3),)], bad=[(r(7, 3),)]),
    Probe("named min=1", _mean, (r(4, 3),), lambda D: ({0: D("b", min=1, max=6)},),
          ok=[(r(1, 3),), (r(6, 3),)], bad=[(r(0, 3),), (r(7, 3),)]),
    Probe("two dims of one tensor", _mean, (r(4, 5),), lambda D: ({0: D("a", max=9), 1: D("b", min=3)},),
          ok=[(r(1, 3),), (r(9, 30),)], bad=[(r(10, 5),), (r(4, 2),)], strict=True),
    Probe("min == max", _mean, (r(4, 3),), lambda D: ({0: D("b", min=4, max=4)},),
          ok=[], bad=[(r(5, 3),)]),
    Probe("example below min", _mean, (r(1, 3),), lambda D: ({0: D("b", min=2, max=8)},)),
    Probe("example above max", _mean, (r(9, 3),), lambda D: ({0: D("b", min=2, max=8)},)),
    Probe("min > max", _mean, (r(4, 3),), lambda D: ({0: D("b", min=8, max=2)},)),
    Probe("negative min", _mean, (r(4, 3),), lambda D: ({0: D("b", min=-1, max=8)},)),
    # shared Dims
    Probe("shared dim", _add, (r(4, 3), r(4, 3)), lambda D: (lambda b: ({0: b}, {0: b}))(D("b", max=16)),
          ok=[(r(16, 3), r(16, 3)), (r(1, 3), r(1, 3))], bad=[(r(4, 3), r(5, 3)), (r(17, 3), r(17, 3))], strict=True),
    Probe("shared dim, unequal examples", _cat, (r(4, 3), r(5, 3)),
          lambda D: (lambda b: ({0: b}, {0: b}))(D("b", max=16))),
    Probe("shared across inner matmul", _mm, (r(2, 4), r(4, 3)),
          lambda D: (lambda k: ({1: k}, {0: k}))(D("k", min=2, max=8)), ok=[(r(2, 8), r(8, 3))],
          bad=[(r(2, 4), r(5, 3))]),
    Probe("same name, two Dims, one range", _add, (r(4, 3), r(4, 3)),
          lambda D: ({0: D("b", max=16)}, {0: D("b", max=16)}), ok=[(r(6, 3), r(6, 3))]),
    Probe("same name, two Dims, two ranges", _add, (r(4, 3), r(4, 3)),
          lambda D: ({0: D("b", max=16)}, {0: D("b", max=8)})),
    # derived dims
    Probe("derived 2*d", _pairs, (r(8), r(4)), lambda D: (lambda d: ({0: 2 * d}, {0: d}))(D("d", min=1, max=10)),
          ok=[(r(2), r(1)), (r(20), r(10))], bad=[(r(6), r(4)), (r(22), r(11))], strict=True),
    Probe("derived d+1", _shift, (r(5), r(4)), lambda D: (lambda d: ({0: d + 1}, {0: d}))(D("d", min=0, max=10)),
          ok=[(r(1), r(0)), (r(11), r(10)), (r(2), r(1))], bad=[(r(5), r(5)), (r(12), r(11))], strict=True),
    Probe("derived d-1 as the other", _shift, (r(5), r(4)),
          lambda D: (lambda d: ({0: d}, {0: d - 1}))(D("d", min=1, max=10)),
          ok=[(r(1), r(0)), (r(10), r(9))], bad=[(r(5), r(5)), (r(11), r(10))]),
    Probe("derived d//2 refused", _pairs, (r(8), r(4)),
          lambda D: (lambda d: ({0: d}, {0: d // 2}))(D("d", min=2, max=20))),
    Probe("derived 2*d+1", _mean, (r(7, 2),), lambda D: ({0: 2 * D("d", min=1, max=5) + 1},),
          ok=[(r(3, 2),), (r(11, 2),)], bad=[(r(4, 2),), (r(13, 2),)]),
    Probe("derived of derived both given", _three, (r(4), r(8), r(9)),
          lambda D: (lambda d: ({0: d}, {0: 2 * d}, {0: 2 * d + 1}))(D("d", min=1, max=6)),
          ok=[(r(1), r(2), r(3)), (r(6), r(12), r(13))], bad=[(r(2), r(4), r(4)), (r(7), r(14), r(15))]),
    Probe("derived only, root absent", _mean, (r(8, 2),), lambda D: ({0: 2 * D("d", min=1, max=8)},),
          ok=[(r(2, 2),), (r(16, 2),)], bad=[(r(5, 2),), (r(18, 2),)]),
    Probe("derived example not of its form", _pairs, (r(7), r(4)),
          lambda D: (lambda d: ({0: 2 * d}, {0: d}))(D("d", min=1, max=10))),
    Probe("derived range beyond root", _shift, (r(5), r(4)),
          lambda D: (lambda d: ({0: d + 1}, {0: d}))(D("d", min=0, max=10)),
          bad=[(r(0), r(-1 + 1))]),
    # hints
    Probe("AUTO", _mean, (r(4, 3),), lambda D: ({0: D.AUTO},), ok=[(r(1, 3),), (r(0, 3),), (r(30, 3),)], strict=True),
    Probe("DYNAMIC", _mean, (r(4, 3),), lambda D: ({0: D.DYNAMIC},), ok=[(r(1, 3),), (r(30, 3),)], strict=True),
    Probe("STATIC", _mean, (r(4, 3),), lambda D: ({0: D.STATIC},), bad=[(r(5, 3),)]),
    Probe("AUTO min/max", _mean, (r(4, 3),), lambda D: ({0: D.AUTO(min=2, max=9)},),
          ok=[(r(2, 3),), (r(9, 3),)], bad=[(r(1, 3),), (r(10, 3),)]),
    Probe("DYNAMIC min/max", _mean, (r(4, 3),), lambda D: ({0: D.DYNAMIC(min=3, max=6)},),
          ok=[(r(3, 3),), (r(6, 3),)], bad=[(r(2, 3),), (r(7, 3),)], strict=True),
    Probe("STATIC min/max admitting", _mean, (r(4, 3),), lambda D: ({0: D.STATIC(min=2, max=6)},),
          bad=[(r(5, 3),)]),
    Probe("DYNAMIC specialized", _spec_const, (r(12),), lambda D: ({0: D.DYNAMIC},)),
    Probe("AUTO specialized", _spec_const, (r(12),), lambda D: ({0: D.AUTO},), bad=[(r(11),)]),
    Probe("AUTO equated", _add, (r(4, 3), r(4, 3)), lambda D: ({0: D.AUTO}, {0: D.AUTO}),
          ok=[(r(7, 3), r(7, 3))], bad=[(r(4, 3), r(5, 3))]),
    Probe("AUTO narrowed by program", _narrow8, (r(4),), lambda D: ({0: D.AUTO},),
          ok=[(r(8),), (r(0),)], bad=[(r(9),)]),
    Probe("DYNAMIC min above program max", _narrow8, (r(4),), lambda D: ({0: D.DYNAMIC(min=2, max=20)},)),
    Probe("AUTO mixed with named", _add, (r(4, 3), r(4, 3)), lambda D: ({0: D("b", max=10)}, {0: D.AUTO}),
          ok=[(r(10, 3), r(10, 3))], bad=[(r(11, 3), r(11, 3)), (r(4, 3), r(5, 3))]),
    # spec forms
    Probe("list per tensor", _mean, (r(4, 3),), lambda D: ([D("b", max=8), None],), ok=[(r(8, 3),)],
          bad=[(r(9, 3),)]),
    Probe("dict spec by name", _add, (r(4, 3), r(4, 3)), lambda D: (lambda b: {"x": {0: b}, "y": {0: b}})(D("b")),
          ok=[(r(5, 3), r(5, 3))]),
    Probe("list spec top level", _add, (r(4, 3), r(4, 3)), lambda D: (lambda b: [{0: b}, {0: b}])(D("b")),
          ok=[(r(5, 3), r(5, 3))]),
    Probe("tuple input, tuple spec", _pair, ((r(4, 2), r(4, 2)),),
          lambda D: (lambda b: (({0: b}, {0: b}),))(D("b", max=8)), ok=[((r(8, 2), r(8, 2)),)],
          bad=[((r(9, 2), r(9, 2)),)], strict=True),
    Probe("tuple input, list spec", _pair, ((r(4, 2), r(4, 2)),),
          lambda D: (lambda b: ([{0: b}, {0: b}],))(D("b", max=8)), ok=[((r(8, 2), r(8, 2)),)]),
    Probe("dict input", _dct, ({"a": r(4), "b": r(5)},), lambda D: ({"a": {0: D("a")}, "b": {0: D("b")}},),
          ok=[({"a": r(1), "b": r(9)},)]),
    Probe("nested", _nested, ({"p": [r(4), r(4)], "q": r(2, 3)},),
          lambda D: (lambda b: ({"p": [{0: b}, {0: b}], "q": {0: D("q"), 1: None}},))(D("b")),
          ok=[({"p": [r(7), r(7)], "q": r(5, 3)},)], bad=[({"p": [r(7), r(6)], "q": r(5, 3)},)]),
    Probe("None for a container", _nested, ({"p": [r(4), r(4)], "q": r(2, 3)},), lambda D: (None,),
          bad=[({"p": [r(5), r(5)], "q": r(2, 3)},)]),
    Probe("int static size equal", _mean, (r(4, 3),), lambda D: ({0: D("b"), 1: 3},), ok=[(r(6, 3),)]),
    Probe("int static size differs", _mean, (r(4, 3),), lambda D: ({0: D("b"), 1: 5},)),
    Probe("dims() helper", _add, (r(4, 3), r(4, 3)),
          lambda D: (lambda ab: ({0: ab[0], 1: ab[1]}, {0: ab[0], 1: ab[1]}))(
              (graphcap.dims if D is graphcap.Dim else te.dims)("a", "b", max=9)), ok=[(r(9, 2), r(9, 2))],
          bad=[(r(10, 3), r(10, 3))]),
    Probe("kwargs spec", _kw, (r(4, 3),), lambda D: {"x": {0: D("b")}, "y": {1: D("c")}},
          kwargs={"y": r(2, 5)}),
    # mismatches
    Probe("wrong key", _add, (r(4, 3), r(4, 3)), lambda D: {"x": {0: D("b")}, "w": None}),
    Probe("missing key", _add, (r(4, 3), r(4, 3)), lambda D: {"x": {0: D("b")}}),
    Probe("extra tuple entry", _add, (r(4, 3), r(4, 3)), lambda D: ({0: D("b")}, None, None)),
    Probe("too few tuple entries", _add, (r(4, 3), r(4, 3)), lambda D: ({0: D("b")},)),
    Probe("dim index beyond rank", _mean, (r(4, 3),), lambda D: ({2: D("b")},)),
    Probe("list longer than rank", _mean, (r(4, 3),), lambda D: ([D("b"), None, None],)),
    Probe("negative dim index", _mean, (r(4, 3),), lambda D: ({-1: D("b")},)),
    Probe("dict spec for a tensor in a tuple", _pair, ((r(4, 2), r(4, 2)),), lambda D: ({"a": {0: D("b")}},)),
    Probe("spec for a non-tensor (int)", _int_in, (r(4), 3), lambda D: (None, {0: D("n")})),
    Probe("a string as spec", _mean, (r(4, 3),), lambda D: ({0: "b"},)),
    # dynamic ints
    Probe("int Dim.DYNAMIC", _int_in, (r(4), 3), lambda D: (None, D.DYNAMIC), ok=[(r(4), 5), (r(4), 0)], strict=True),
    Probe("int named Dim", _int_in, (r(4), 3), lambda D: (None, D("n", min=1, max=9)),
          ok=[(r(4), 9), (r(4), 1)], bad=[(r(4), 10), (r(4), 0)]),
    # program vs spec
    Probe("named Dim specialized", _spec_const, (r(12),), lambda D: ({0: D("b", max=100)},), fix=True, strict=True),
    Probe("two named Dims equated", _add, (r(4, 3), r(4, 3)), lambda D: ({0: D("a")}, {0: D("b")}), fix=True,
          strict=True),
    Probe("named Dim narrowed by branch", _branch, (r(6),), lambda D: ({0: D("b", max=20)},), fix=True, strict=True),
    Probe("named Dim narrowed by check", _narrow8, (r(4),), lambda D: ({0: D("b", max=20)},), fix=True),
    Probe("named Dim needs multiple of 3", _mod3, (r(6),), lambda D: ({0: D("b", max=30)},), fix=True),
    Probe("named Dim equal to d+1 of other", _shift, (r(5), r(4)), lambda D: ({0: D("a")}, {0: D("b")}), fix=True),
    # second batch: derived dims against the program, examples against derived ranges, hints
    Probe("derived: program specializes 2*d", _spec8, (r(8),), lambda D: ({0: 2 * D("d", max=10)},), fix=True),
    Probe("derived: program narrows d+1", _narrow8, (r(5),), lambda D: ({0: D("d", min=1, max=20) + 1},), fix=True),
    Probe("derived: example root below min", _shift, (r(2), r(1)),
          lambda D: (lambda d: ({0: d + 1}, {0: d}))(D("d", min=2, max=5))),
    Probe("derived: example above derived max", _pairs, (r(24), r(12)),
          lambda D: (lambda d: ({0: 2 * d}, {0: d}))(D("d", min=1, max=10))),
    Probe("program needs e == 2*d", _twice, (r(4), r(8)), lambda D: ({0: D("d", max=10)}, {0: D("e", max=20)}),
          fix=True),
    Probe("shared dim, one input specialized", _spec_add, (r(12), r(12)),
          lambda D: (lambda b: ({0: b}, {0: b}))(D("b", max=20)), fix=True),
    Probe("narrowed and equated together", _branch_add, (r(6), r(6)),
          lambda D: ({0: D("a", max=20)}, {0: D("b", max=20)}), fix=True),
    Probe("range narrowed both ends", _window, (r(6),), lambda D: ({0: D("b", max=20)},), fix=True),
    Probe("narrowed, spec min above the guard", _branch, (r(6),), lambda D: ({0: D("b", min=6, max=20)},),
          ok=[(r(6),), (r(20),)], bad=[(r(5),)]),
    Probe("AUTO max below example", _mean, (r(8, 3),), lambda D: ({0: D.AUTO(max=4)},)),
    Probe("STATIC min/max excluding", _mean, (r(4, 3),), lambda D: ({0: D.STATIC(min=5, max=9)},)),
    Probe("DYNAMIC int range", _int_in, (r(4), 3), lambda D: (None, D.DYNAMIC(min=2, max=7)),
          ok=[(r(4), 2), (r(4), 7)], bad=[(r(4), 1), (r(4), 8)]),
    Probe("int static 3 given as int spec", _int_in, (r(4), 3), lambda D: (None, 3)),
    Probe("int other static given", _int_in, (r(4), 3), lambda D: (None, 5)),
    Probe("AUTO on a size-1 example", _mean, (r(1, 3),), lambda D: ({0: D.AUTO},), ok=[(r(5, 3),), (r(0, 3),)],
          strict=True),
    Probe("named on a size-1 example", _mean, (r(1, 3),), lambda D: ({0: D("b", max=8)},), ok=[(r(5, 3),), (r(0, 3),)],
          strict=True),
    Probe("named on a size-0 example", _mean, (r(0, 3),), lambda D: ({0: D("b", max=8)},), ok=[(r(5, 3),), (r(1, 3),)]),
    Probe("ShapesCollection", _add, (r(4, 3), r(4, 3)), lambda D: _collection(D), ok=[(r(9, 3), r(9, 3))],
          bad=[(r(9, 3), r(8, 3))]),
    Probe("AdditionalInputs", _add, (r(4, 3), r(4, 3)), lambda D: _additional(D), ok=[(r(9, 3), r(9, 3))],
          bad=[(r(4, 2), r(4, 2))]),
    Probe("Dim name not an identifier", _mean, (r(4, 3),), lambda D: ({0: D("my batch")},)),
    Probe("spec dim key as str", _mean, (r(4, 3),), lambda D: ({"0": D("b")},)),
    Probe("spec for kwarg by position tuple", _kw, (r(4, 3),), lambda D: ({0: D("b")}, {1: D("c")}),
          kwargs={"y": r(2, 5)}),
    # third batch
    Probe("range [0, 1]", _mean, (r(1, 3),), lambda D: ({0: D("b", min=0, max=1)},), ok=[(r(0, 3),)],
          bad=[(r(2, 3),)]),
    Probe("range [1, 2]", _mean, (r(2, 3),), lambda D: ({0: D("b", min=1, max=2)},), ok=[(r(1, 3),)],
          bad=[(r(0, 3),), (r(3, 3),)]),
    Probe("torch Dim min=-1 to both", _mean, (r(4, 3),), lambda D: ({0: te.Dim("b", min=-1, max=8)},),
          ok=[(r(0, 3),), (r(8, 3),)], bad=[(r(9, 3),)]),
    Probe("Dim shared by an int and a size", _int_size, (r(4), 4), lambda D: (lambda b: ({0: b}, b))(D("b", max=9)),
          ok=[(r(7), 7)], bad=[(r(7), 6)]),
    Probe("derived strict", _shift, (r(5), r(4)), lambda D: (lambda d: ({0: d + 1}, {0: d}))(D("d", min=1, max=10)),
          ok=[(r(2), r(1)), (r(11), r(10))], bad=[(r(5), r(5))], strict=True),
    Probe("derived: narrowed strict", _narrow8, (r(5),), lambda D: ({0: D("d", min=1, max=20) + 1},), fix=True,
          strict=True),
    Probe("huge max", _mean, (r(4, 3),), lambda D: ({0: D("b", max=2**40)},), ok=[(r(9, 3),)]),
    Probe("AUTO on int and size equated", _int_size, (r(4), 4), lambda D: ({0: D.AUTO}, D.AUTO), ok=[(r(6), 6)],
          bad=[(r(6), 5)]),
    Probe("*args forward, dict spec", _star, (r(4), r(4)),
          lambda D: (lambda b: {"args": ({0: b}, {0: b})})(D("b", max=9)), ok=[(r(9), r(9))],
          bad=[(r(10), r(10))]),
    Probe("*args forward, tuple spec", _star, (r(4), r(4)),
          lambda D: (lambda b: (({0: b}, {0: b}),))(D("b", max=9)), ok=[(r(9), r(9))], bad=[(r(10), r(10))]),
    Probe("dict key for a default not passed", _add, (r(4, 3), r(4, 3)),
          lambda D: (lambda b: {"x": {0: b}, "y": {0: b}, "z": None})(D("b")), ok=[(r(5, 3), r(5, 3))]),
    Probe("ShapesCollection strict", _add, (r(4, 3), r(4, 3)), lambda D: _collection(D), ok=[(r(9, 3), r(9, 3))],
          bad=[(r(9, 3), r(8, 3))], strict=True),
    Probe("AdditionalInputs strict", _add, (r(4, 3), r(4, 3)), lambda D: _additional(D), ok=[(r(9, 3), r(9, 3))],
          bad=[(r(4, 2), r(4, 2))], strict=True),
    Probe("AdditionalInputs, program specializes", _spec_add, (r(12), r(12)), lambda D: _additional_12(D)),
    Probe("two dims of one tensor equated", _mixed, (r(4, 4), r(4, 4)),
          lambda D: ({0: D("a"), 1: D("b")}, None), fix=True),
]


def main() -> None:
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    for p in P:
        if names and not any(n in p.name for n in names):
            continue
        sides = ("gc", "te", "gc-strict", "te-strict") if p.strict else ("gc", "te")
        if "--torch-dims" in sys.argv:  # graphcap given torch.export's Dim objects: must read as its own
            sides = ("gc", "gc-tdim")
        print(p.name, " | ".join(f"{s}: {_run(s, p)}" for s in sides), sep=" | ", flush=True)


if __name__ == "__main__":
    main()
