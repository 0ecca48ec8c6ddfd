"""``prefer_deferred_runtime_asserts_over_guards`` audit: graphcap against torch.export and eager.

Each probe is a small program with a dynamic_shapes spec; it is exported by graphcap and by
torch.export with the flag off and on, strict=False and strict=True. Each program goes through
three stages (as exported, ``run_decompositions()``, a save/load round trip by its own library);
at each, ``module()`` runs on the example and on other inputs in range (compared with eager) and on
inputs out of range (which must be refused). One line per probe, flag and mode:

    name flag=F|T mode | gc: <ranges> <verdict> | te: <ranges> <verdict>

A verdict is "=" (every stage matched eager and refused every bad input), or the notes: "WRONG"
(a silent wrong number), "accepts bad", "run fails", or the export's error line.

Run: PYTHONPATH=src python bench/probes/prefer_deferred_audit.py [name-substring ...] [-v]
     [--zoo [--strict] [zoo names]] [--draft] [--consumers]
"""
from __future__ import annotations

import copy
import dataclasses
import io
import logging
import sys
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import error_line, roundtrip, same
from torch.export import Dim

import graphcap


@dataclasses.dataclass
class Probe:
    name: str
    f: Callable[..., Any]
    args: tuple[Any, ...]
    spec: Any
    ok: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    bad: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    module: Any = None  # a module instead of f


class Fn(torch.nn.Module):
    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f

    def forward(self, *a: Any) -> Any:
        return self.f(*a)


r = torch.randn
A, D = Dim.AUTO, Dim.DYNAMIC


def _ranges(ep: Any) -> str:
    bounds = sorted(f"{v.lower}..{v.upper}".replace("int_oo", "oo") for v in ep.range_constraints.values())
    return "[" + ",".join(bounds) + "]"


def run_side(lib: str, p: Probe, strict: bool, flag: bool) -> str:
    export = graphcap.export if lib == "gc" else te.export
    model = p.module() if p.module is not None else Fn(p.f)
    eager = p.module() if p.module is not None else Fn(p.f)
    if p.module is not None:
        eager.load_state_dict(model.state_dict())
    spec = p.spec if p.module is not None else (None if p.spec is None else (tuple(p.spec),))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = export(model, copy.deepcopy(p.args), dynamic_shapes=spec, strict=strict,
                        prefer_deferred_runtime_asserts_over_guards=flag)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return "export fails: " + error_line(e, 140)
    notes: list[str] = []
    stages = {"ep": lambda: ep, "decomp": lambda: ep.run_decompositions(), "load": lambda: roundtrip(ep)}
    for stage, make in stages.items():
        try:
            mod = make().module()
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage} fails: {error_line(e, 110)}")
            continue
        for args in [p.args, *p.ok]:
            try:
                want = eager(*copy.deepcopy(args))
            except Exception as e:
                notes.append(f"eager fails at {_show(args)}: {error_line(e, 80)}")
                continue
            try:
                got = mod(*copy.deepcopy(args))
            except Exception as e:
                if "-v" in sys.argv:
                    traceback.print_exc()
                notes.append(f"{stage} refuses {_show(args)}: {error_line(e, 110)}")
                continue
            if not same(want, got):
                notes.append(f"{stage} WRONG at {_show(args)}")
        for args in p.bad:
            try:
                want = eager(*copy.deepcopy(args))
            except Exception:
                want = None
            try:
                got = mod(*copy.deepcopy(args))
                notes.append(f"{stage} {'WRONG' if want is not None and not same(want, got) else 'accepts'} "
                             f"bad {_show(args)}")
            except Exception as e:
                if stage == "ep" and "-v" in sys.argv:
                    print(f"   [{lib}] bad {_show(args)}: {type(e).__name__}: {error_line(e, 140)}")
    return _ranges(ep) + " " + ("=" if not notes else "; ".join(dict.fromkeys(notes)))


def _show(args: Any) -> str:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(str(a.tolist()) if a.numel() <= 4 and a.dim() <= 1 else f"T{tuple(a.shape)}")
        elif isinstance(a, dict):
            out.append("{" + ",".join(f"{k}:{_show((v,))}" for k, v in a.items()) + "}")
        else:
            out.append(repr(a))
    return ",".join(out)


# --- the small programs ---------------------------------------------------------------------

def _add(x, y):
    return x + y


def _cat(x, y):
    return torch.cat([x, x]) * 2 + y  # y.shape[0] == 2 * x.shape[0]


def _reshape_prod(x, y):
    return x.reshape(-1) + y  # y.shape[0] == a * b


def _view4(x):
    return x.view(-1, 4) * 2  # numel divisible by 4


def _view_flat(x):
    return x.view(x.shape[0] * x.shape[1]).cumsum(0)


def _item(x, n):
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return x[:k] * 2


def _nonzero(x):
    idx = torch.nonzero(x > 0)
    torch._check(idx.shape[0] > 0)
    return idx.float().sum(0) + idx.shape[0]


def _check_index(x, n):
    k = n.item()
    torch._check(k >= 0)
    torch._check(k < x.shape[0])
    return x[k] + 1


def _cond(x):
    return torch.cond(x.shape[0] > 4, lambda t: t * 2, lambda t: t - 1, (x,))


def _branch(x):
    return x * 2 if x.shape[0] > 4 else x - 1


def _pin_assert(x):
    assert x.shape[0] == 3
    return x * x + 1


def _pin_const(x):
    return (x + torch.arange(9.0).reshape(3, 3)).sum(0)


def _narrow_check(x):
    torch._check(x.shape[0] > 4)
    return x * 2


def _derived(x, y):
    return x.repeat(2, 1) + y


def _plus_one(x, y):
    return torch.cat([x, torch.zeros(1, x.shape[1])]) - y


def _eq_branch(x, y):
    return torch.cat([x, y]) if x.shape[0] == y.shape[0] * 2 else x


def _slice_min(x):
    return x[:4] * 2


def _matmul(x, w):
    return x @ w


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.lin(x).relu()


class ParamAdd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))

    def forward(self, x):
        return x * self.w


def probes() -> list[Probe]:
    P = []
    # relations between dims
    for tag, sp in (("auto", [{0: A}, {0: A}]), ("dims", [{0: Dim("a")}, {0: Dim("b")}]),
                    ("one", [{0: Dim("a")}, {0: Dim("a")}])):
        P.append(Probe(f"add_{tag}", _add, (r(3, 2), r(3, 2)), sp, ok=[(r(5, 2), r(5, 2)), (r(1, 2), r(1, 2))],
                       bad=[(r(4, 2), r(5, 2))]))
    n = Dim("n")
    for tag, sp in (("auto", [{0: A}, {0: A}]), ("derived", [{0: n}, {0: 2 * n}]), ("dims", [{0: n}, {0: Dim("m")}])):
        P.append(Probe(f"cat_{tag}", _cat, (r(3, 2), r(6, 2)), sp, ok=[(r(5, 2), r(10, 2))],
                       bad=[(r(4, 2), r(7, 2))]))
    P.append(Probe("derived_repeat", _derived, (r(3, 2), r(6, 2)), [{0: n}, {0: 2 * n}],
                   ok=[(r(7, 2), r(14, 2))], bad=[(r(4, 2), r(7, 2))]))
    P.append(Probe("plus_one_auto", _plus_one, (r(3, 2), r(4, 2)), [{0: A}, {0: A}],
                   ok=[(r(6, 2), r(7, 2))], bad=[(r(6, 2), r(6, 2))]))
    P.append(Probe("plus_one_derived", _plus_one, (r(3, 2), r(4, 2)), [{0: n}, {0: n + 1}],
                   ok=[(r(6, 2), r(7, 2))], bad=[(r(6, 2), r(6, 2))]))
    for tag, sp in (("auto", [{0: A, 1: A}, {0: A}]), ("dims", [{0: Dim("a"), 1: Dim("b")}, {0: Dim("c")}])):
        P.append(Probe(f"reshape_prod_{tag}", _reshape_prod, (r(2, 3), r(6)), sp, ok=[(r(4, 5), r(20))],
                       bad=[(r(4, 5), r(21))]))
    for tag, sp in (("auto", [{0: A}]), ("dim", [{0: Dim("n")}]), ("dim4", [{0: 4 * Dim("k")}])):
        P.append(Probe(f"view4_{tag}", _view4, (r(8, 3),), sp, ok=[(r(12, 3),), (r(4, 3),)], bad=[(r(6, 3),)]))
    P.append(Probe("view_flat_auto", _view_flat, (r(2, 3),), [{0: A, 1: A}], ok=[(r(5, 7),)]))
    # data-dependent
    for tag, sp in (("auto", [{0: A}, None]), ("dim", [{0: Dim("n", max=20)}, None])):
        P.append(Probe(f"item_{tag}", _item, (r(6, 2), torch.tensor(4)), sp,
                       ok=[(r(9, 2), torch.tensor(9)), (r(9, 2), torch.tensor(0))], bad=[(r(5, 2), torch.tensor(6))]))
        P.append(Probe(f"check_index_{tag}", _check_index, (r(6, 2), torch.tensor(4)), sp,
                       ok=[(r(9, 2), torch.tensor(8))], bad=[(r(5, 2), torch.tensor(5))]))
    P.append(Probe("nonzero", _nonzero, (r(6, 2),), [{0: A}], ok=[(r(9, 2).abs(),)], bad=[(-r(5, 2).abs(),)]))
    # control flow on shapes
    for tag, sp in (("auto", [{0: A}]), ("dim", [{0: Dim("n")}]), ("bounded", [{0: Dim("n", min=2, max=10)}])):
        out = [(r(11, 2),)] if tag == "bounded" else []
        P.append(Probe(f"cond_{tag}", _cond, (r(6, 2),), sp, ok=[(r(3, 2),), (r(9, 2),)], bad=out))
        P.append(Probe(f"branch_{tag}", _branch, (r(6, 2),), sp, ok=[(r(9, 2),)], bad=[(r(3, 2),), *out]))
    P.append(Probe("eq_branch_auto", _eq_branch, (r(6, 2), r(3, 2)), [{0: A}, {0: A}],
                   ok=[(r(8, 2), r(4, 2))], bad=[(r(8, 2), r(3, 2))]))
    # pinned
    for tag, sp in (("auto", [{0: A}]), ("dynamic", [{0: D}]), ("dim", [{0: Dim("n")}])):
        P.append(Probe(f"pin_assert_{tag}", _pin_assert, (r(3, 3),), sp, bad=[(r(4, 3),), (r(2, 3),)]))
        P.append(Probe(f"pin_const_{tag}", _pin_const, (r(3, 3),), sp, bad=[(r(4, 3),)]))
    P.append(Probe("pin_param_auto", None, (r(4, 8),), {"x": {0: A, 1: A}}, module=Lin,
                   ok=[(r(7, 8),)], bad=[(r(7, 9),)]))
    P.append(Probe("pin_param_dynamic", None, (r(4, 8),), {"x": {0: A, 1: D}}, module=Lin,
                   ok=[(r(7, 8),)], bad=[(r(7, 9),)]))
    P.append(Probe("pin_param2_auto", None, (r(6, 4),), {"x": {0: A, 1: A}}, module=ParamAdd,
                   bad=[(r(6, 5),), (r(5, 4),)]))
    P.append(Probe("matmul_auto", _matmul, (r(3, 4), r(4, 5)), [{0: A, 1: A}, {0: A, 1: A}],
                   ok=[(r(2, 7), r(7, 1))], bad=[(r(2, 7), r(6, 1))]))
    for tag, sp in (("dim", [{0: Dim("n")}]), ("auto", [{0: A}]), ("bounded", [{0: Dim("n", min=2, max=10)}])):
        P.append(Probe(f"narrow_{tag}", _narrow_check, (r(6, 2),), sp, ok=[(r(9, 2),)], bad=[(r(3, 2),)]))
        P.append(Probe(f"slice_min_{tag}", _slice_min, (r(6, 2),), sp, ok=[(r(2, 2),), (r(9, 2),)]))
    P.append(Probe("bounded_out", _add, (r(3, 2), r(3, 2)), [{0: Dim("a", min=2, max=8)}, {0: Dim("a", min=2, max=8)}],
                   ok=[(r(8, 2), r(8, 2))], bad=[(r(9, 2), r(9, 2))]))
    # a pinned dim next to dynamic ones, and what the pinned symbol meets downstream
    P.append(Probe("branch_rel_auto", _branch_rel, (r(6, 2), r(3, 2)), [{0: A}, {0: A}],
                   ok=[(r(9, 2), r(2, 2))], bad=[(r(2, 2), r(9, 2))]))
    P.append(Probe("pin_then_view_auto", _pin_then_view, (r(3, 4), r(5, 3)), [{0: A, 1: A}, {0: A, 1: A}],
                   ok=[(r(4, 4), r(7, 3))], bad=[(r(3, 5), r(7, 3)), (r(3, 4), r(7, 4))]))
    P.append(Probe("pin_cond_auto", _pin_cond, (r(3, 2),), [{0: A}], bad=[(r(4, 2),)]))
    P.append(Probe("pin_item_auto", _pin_item, (r(3, 3), torch.tensor(2)), [{0: A}, None],
                   ok=[(r(3, 3), torch.tensor(0))], bad=[(r(4, 3), torch.tensor(2)), (r(3, 3), torch.tensor(5))]))
    P.append(Probe("pin_bounded_auto", _pin_assert, (r(3, 3),), [{0: Dim.AUTO(min=4)}], bad=[(r(4, 3),)]))
    P.append(Probe("pin_in_range_auto", _pin_assert, (r(3, 3),), [{0: Dim.AUTO(min=2, max=6)}], bad=[(r(4, 3),)]))
    P.append(Probe("pin_mul_auto", _pin_mul, (r(3, 2), r(6, 2)), [{0: A}, {0: A}],
                   bad=[(r(3, 2), r(7, 2)), (r(4, 2), r(8, 2))]))
    P.append(Probe("pin_derived", _derived, (r(3, 2), r(6, 2)), [{0: A}, {0: 2 * n}], bad=[(r(3, 2), r(8, 2))]))
    # sizes 0 and 1 (graphcap keeps them in a dim's range)
    P.append(Probe("bcast_one_auto", _add, (r(3, 2), r(1, 2)), [{0: A}, {0: A}],
                   ok=[(r(5, 2), r(1, 2))], bad=[(r(3, 2), r(3, 2))]))
    P.append(Probe("bcast_one_static_x", _add, (r(3, 2), r(1, 2)), [None, {0: A}], bad=[(r(3, 2), r(3, 2))]))
    P.append(Probe("nonempty_branch", _nonempty, (r(3, 2),), [{0: A}], ok=[(r(1, 2),), (r(0, 2),)]))
    return P


def _nonempty(x):
    return x.sum(0) + 5 if x.shape[0] > 0 else x.new_ones(x.shape[1])


def _branch_rel(x, y):
    return x[: y.shape[0]] * 2 if x.shape[0] > y.shape[0] else x - 1


def _pin_then_view(x, y):
    assert x.shape[1] == 4
    return x.reshape(-1) .sum() + y.view(-1, 3)  # y's dim 1 pinned by the view


def _pin_cond(x):
    assert x.shape[0] == 3
    return torch.cond(x.shape[0] > 2, lambda t: t * 2, lambda t: t - 1, (x,))


def _pin_item(x, n):
    assert x.shape[0] == 3
    k = n.item()
    torch._check(k >= 0)
    torch._check(k < x.shape[0])
    return x[k] + 1


def _pin_mul(x, y):
    assert x.shape[0] == 3
    return torch.cat([x, x]) + y


def main() -> None:
    logging.getLogger("torch._guards").setLevel(logging.CRITICAL)  # dynamo's traceback of a refused export
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    torch.manual_seed(0)
    for p in probes():
        if names and not any(s in p.name for s in names):
            continue
        for flag in (False, True):
            for strict in (False, True):
                gc = run_side("gc", p, strict, flag)
                tt = run_side("te", p, strict, flag)
                mark = "" if gc == tt else "  <>"
                mode = "strict" if strict else "ns    "
                print(f"{p.name:20} flag={'T' if flag else 'F'} {mode} | gc: {gc} | te: {tt}{mark}",
                      flush=True)




# --- real models, draft_export, "infer", consumers (--zoo / --draft / --consumers) -------------

def zoo_main() -> None:
    sys.path.insert(0, "../shared/zoo")
    import zoo
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or ["hf_gpt2", "hf_bert", "hf_llama", "tv_resnet18"]
    for name in names:
        built = zoo.REGISTRY[name].builder()
        model, args, kwargs, spec = built.model, built.args, built.kwargs, built.dynamic_shapes
        auto = pytree_auto(spec)
        for tag, sp in (("zoo spec", spec), ("all AUTO", auto)):
            for lib in ("gc", "te"):
                export = graphcap.export if lib == "gc" else te.export
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ep = export(model, args, kwargs, dynamic_shapes=sp, strict="--strict" in sys.argv,
                                    prefer_deferred_runtime_asserts_over_guards=True)
                except Exception as e:
                    print(f"{name:12} {tag:9} {lib}: export fails: {error_line(e, 140)}", flush=True)
                    continue
                notes = []
                for stage, make in (("ep", lambda ep=ep: ep), ("decomp", lambda ep=ep: ep.run_decompositions()),
                                    ("load", lambda ep=ep: roundtrip(ep))):
                    try:
                        mod = make().module()
                    except Exception as e:
                        notes.append(f"{stage} fails: {error_line(e, 100)}")
                        continue
                    for a, k in ((args, kwargs), (built.args2, built.kwargs2)):
                        with torch.no_grad():
                            want = model(*a, **k)
                            try:
                                got = mod(*a, **k)
                            except Exception as e:
                                notes.append(f"{stage} refuses: {error_line(e, 100)}")
                                continue
                        if not same(_plain(want), _plain(got), 1e-4):
                            notes.append(f"{stage} WRONG")
                    # batch 65: past the zoo's max
                    a65, k65 = _batch_of(args, 65), _batch_of(kwargs, 65)
                    try:
                        mod(*a65, **k65)
                        notes.append(f"{stage} accepts batch 65")
                    except Exception as e:
                        if stage == "ep" and "-v" in sys.argv:
                            print(f"   65: {error_line(e, 140)}")
                print(f"{name:12} {tag:9} {lib}: {_ranges(ep)} {'=' if not notes else '; '.join(dict.fromkeys(notes))}",
                      flush=True)


def pytree_auto(spec: Any) -> Any:
    if isinstance(spec, dict) and all(isinstance(k, int) for k in spec):
        return {k: A for k in spec}
    if isinstance(spec, dict):
        return {k: pytree_auto(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(pytree_auto(v) for v in spec)
    return spec


def _plain(out: Any) -> Any:
    if hasattr(out, "to_tuple"):
        return [v for v in out.to_tuple() if isinstance(v, torch.Tensor)]
    if isinstance(out, (list, tuple)):
        return [v for v in out if isinstance(v, torch.Tensor)]
    return out


def _batch_of(x: Any, b: int) -> Any:
    if isinstance(x, torch.Tensor):
        reps = [b // x.shape[0] + 1] + [1] * (x.dim() - 1)
        return x.repeat(*reps)[:b]
    if isinstance(x, dict):
        return {k: _batch_of(v, b) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_batch_of(v, b) for v in x)
    return x


def draft_main() -> None:
    cases = [("pin_assert", _pin_assert, (r(3, 3),), ({0: Dim("n")},), [(r(3, 3),)], [(r(4, 3),)]),
             ("narrow", _narrow_check, (r(6, 2),), ({0: Dim("n")},), [(r(9, 2),)], [(r(3, 2),)]),
             ("view4", _view4, (r(8, 3),), ({0: Dim("n")},), [(r(12, 3),)], [(r(6, 3),)]),
             ("add_dims", _add, (r(3, 2), r(3, 2)), ({0: Dim("a")}, {0: Dim("b")}), [(r(5, 2), r(5, 2))],
              [(r(4, 2), r(5, 2))]),
             ("pin_param", None, (r(4, 8),), {"x": {0: Dim("b"), 1: Dim("f")}}, [(r(7, 8),)], [(r(7, 9),)])]
    for name, f, args, spec, ok, bad in cases:
        for flag in (False, True):
            for lib in ("gc", "te"):
                draft = graphcap.draft_export if lib == "gc" else te.draft_export
                model = Lin() if f is None else Fn(f)
                torch.manual_seed(0)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ep = draft(model, args, dynamic_shapes=spec if f is None else (spec,),
                                   prefer_deferred_runtime_asserts_over_guards=flag)
                except Exception as e:
                    print(f"draft {name:10} flag={flag:d} {lib}: fails {error_line(e, 120)}", flush=True)
                    continue
                notes = []
                for stage, make in (("ep", lambda ep=ep: ep), ("decomp", lambda ep=ep: ep.run_decompositions()),
                                    ("load", lambda ep=ep: roundtrip(ep))):
                    mod = make().module()
                    for a in [args, *ok]:
                        try:
                            if not same(model(*a), mod(*a)):
                                notes.append(f"{stage} WRONG {_show(a)}")
                        except Exception as e:
                            notes.append(f"{stage} refuses {_show(a)}: {error_line(e, 80)}")
                    for a in bad:
                        try:
                            mod(*a)
                            notes.append(f"{stage} accepts bad {_show(a)}")
                        except Exception:
                            pass
                print(f"draft {name:10} flag={flag:d} {lib}: {_ranges(ep)} {'=' if not notes else '; '.join(notes)}",
                      flush=True)


def infer_main() -> None:
    cases = [("reshape24", lambda x: x.reshape(4, 6) + 1, [(r(2, 12),), (r(3, 8),)], [(r(6, 4),)], [(r(5, 5),)]),
             ("pin3", _pin_then_view, [(r(3, 4), r(5, 3)), (r(3, 4), r(7, 3))], [(r(3, 4), r(9, 3))],
              [(r(3, 5), r(9, 3))]),
             ("rel", lambda x, y: x.reshape(-1) + y, [(r(2, 3), r(6)), (r(4, 5), r(20))], [(r(3, 3), r(9))],
              [(r(3, 3), r(8))])]
    for name, f, samples, ok, bad in cases:
        for strict in (False, True):
            try:
                shapes = graphcap.infer_dynamic_shapes(Fn(f), samples, strict=strict)
                ep = shapes.program
            except Exception as e:
                print(f"infer {name:10} strict={strict:d}: fails {error_line(e, 120)}", flush=True)
                continue
            notes = []
            for stage, make in (("ep", lambda ep=ep: ep), ("decomp", lambda ep=ep: ep.run_decompositions()),
                                ("load", lambda ep=ep: roundtrip(ep))):
                mod = make().module()
                for a in [*samples, *ok]:
                    try:
                        if not same(f(*a), mod(*a)):
                            notes.append(f"{stage} WRONG {_show(a)}")
                    except Exception as e:
                        notes.append(f"{stage} refuses {_show(a)}: {error_line(e, 80)}")
                for a in bad:
                    try:
                        mod(*a)
                        notes.append(f"{stage} accepts bad {_show(a)}")
                    except Exception:
                        pass
            print(f"infer {name:10} strict={strict:d}: checked_when_run={shapes.checked_when_run} {_ranges(ep)} "
                  f"{'=' if not notes else '; '.join(notes)}", flush=True)


if __name__ == "__main__" and "--zoo" in sys.argv:
    zoo_main()
if __name__ == "__main__" and "--draft" in sys.argv:
    draft_main()
    infer_main()

def consumers_main() -> None:
    """ExecuTorch (to_edge_transform_and_lower + executorch.runtime) and torch.onnx.export(ep,
    dynamo=True) + onnxruntime on programs exported with the flag, graphcap's and torch's."""
    # ExecuTorch plans memory for each input's largest size: every dim is bounded (max=16)
    b = Dim.AUTO(max=16)
    cases = [("pin_param_auto", Lin(), (r(4, 8),), {"x": {0: b, 1: b}}, [(r(7, 8),)]),
             ("pin_const_auto", Fn(_pin_const), (r(3, 3),), (({0: b},),), []),
             ("view4_auto", Fn(_view4), (r(8, 3),), (({0: b},),), [(r(12, 3),)]),
             ("cat_derived", Fn(_cat), (r(3, 2), r(6, 2)), (({0: Dim("n", max=8)}, {0: 2 * Dim("n", max=8)}),),
              [(r(5, 2), r(10, 2))])]
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    for name, model, args, spec, ok in cases:
        if only and name not in only:
            continue
        for lib in ("gc", "te"):
            export = graphcap.export if lib == "gc" else te.export
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = export(model, args, dynamic_shapes=spec, prefer_deferred_runtime_asserts_over_guards=True)
            print(f"consumers {name:15} {lib}: executorch {_executorch(ep, model, [args, *ok])}; "
                  f"onnx {_onnx(ep, model, [args, *ok])}", flush=True)


def _executorch(ep: Any, model: Any, calls: list) -> str:
    try:
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime
        pte = to_edge_transform_and_lower(ep).to_executorch()
        method = Runtime.get().load_program(pte.buffer).load_method("forward")
        notes = []
        for a in calls:
            got = method.execute(list(a))[0]
            if not same(model(*a), got, 1e-4):
                notes.append(f"WRONG at {_show(a)}")
        return "=" if not notes else "; ".join(notes)
    except Exception as e:
        return "fails: " + error_line(e, 120)


def _onnx(ep: Any, model: Any, calls: list) -> str:
    try:
        import onnxruntime
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onx = torch.onnx.export(ep, args=calls[0], dynamo=True, verbose=False)
        onx.model_proto.SerializeToString()
        sess = onnxruntime.InferenceSession(onx.model_proto.SerializeToString())
        del buf
        notes = []
        for a in calls:
            feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), a)}
            got = torch.from_numpy(sess.run(None, feeds)[0])
            if not same(model(*a).detach(), got, 1e-4):
                notes.append(f"WRONG at {_show(a)}")
        return "=" if not notes else "; ".join(notes)
    except Exception as e:
        return "fails: " + error_line(e, 120)


if __name__ == "__main__" and "--consumers" in sys.argv:
    consumers_main()
if __name__ == "__main__" and not {"--zoo", "--draft", "--consumers"} & set(sys.argv):
    main()
