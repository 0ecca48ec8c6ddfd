"""Inferred dynamic shapes audit: graphcap.infer_dynamic_shapes on real and edge-case models, against torch.export.

Each case is a model and its samples (each ``(args, kwargs)``), plus inputs the inferred program should
accept (sizes between and beyond the samples, inside the inferred ranges) and inputs it should refuse.
Three sides:

- ``gc``: ``graphcap.infer_dynamic_shapes(model, samples)``: the spec printed as code, its ranges; the
  program run on every sample and the extra inputs (compared with eager), the refused inputs (must raise
  before computing), ``run_decompositions()`` and a ``graphcap.save`` / ``graphcap.load`` round trip run
  on the samples.
- ``auto``: ``torch.export.export`` on the first sample with ``Dim.AUTO`` on every dim of every tensor;
  its range constraints, and its program run on every sample.
- ``ai``: ``torch.export.export`` with ``torch.export.AdditionalInputs`` holding every sample; ranges and
  runs on the samples.

Run: PYTHONPATH=src python bench/probes/inferred_shapes_audit.py [name-substring ...] [-v] [--strict]
(``--strict``: graphcap infers with ``strict=True``; torch's side stays non-strict)
"""
from __future__ import annotations

import copy
import dataclasses
import os
import sys
import tempfile
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import error_line

import graphcap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "zoo"))

Call = tuple[tuple, dict]


@dataclasses.dataclass
class Case:
    name: str
    make: Callable[[], torch.nn.Module]
    samples: list[Call]
    ok: list[Call] = dataclasses.field(default_factory=list)   # in the inferred ranges: must run = eager
    bad: list[Call] = dataclasses.field(default_factory=list)  # must be refused
    note: str = ""


def _leaves(x: Any) -> list[Any]:
    return [v for v in torch.utils._pytree.tree_leaves(x)]


def _same(a: Any, b: Any) -> bool:
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape:
                return False
            if not torch.allclose(x.float(), y.float(), atol=1e-4, rtol=1e-4, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def _shape(c: Call) -> str:
    parts = [("x".join(map(str, v.shape)) if isinstance(v, torch.Tensor) else repr(v)) for v in _leaves(c)]
    return "(" + ",".join(parts) + ")"


def _ranges(ep: Any) -> str:
    return "{" + ", ".join(f"{k}:[{r.lower},{r.upper}]" for k, r in ep.range_constraints.items()) + "}"


def _run_on(mod: Any, model: Any, calls: list[Call], label: str) -> list[str]:
    notes = []
    for c in calls:
        with torch.no_grad():
            try:
                want = model(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))
            except Exception as e:
                notes.append(f"eager fails at {_shape(c)}: {error_line(e)}")
                continue
            try:
                got = mod(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))
            except Exception as e:
                notes.append(f"{label} refuses {_shape(c)}: {error_line(e)}")
                continue
        if not _same(want, got):
            notes.append(f"{label} WRONG at {_shape(c)}")
    return notes


def _gc(case: Case) -> str:
    model = case.make()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shapes = graphcap.infer_dynamic_shapes(model, copy.deepcopy(case.samples), strict="--strict" in sys.argv)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        where = getattr(e, "where", "")
        fix = getattr(e, "fix", "")
        return f"refused: {error_line(e)} [where={where!r}] [fix={'yes' if fix else 'NO'}]"
    code = shapes.code.split("\n", 2)[2].replace("\n", "; ")
    out = [f"spec: {code}", f"ranges {_ranges(shapes.program)}", f"verified {shapes.verified}"]
    ep = shapes.program
    mod = ep.module()
    out += _run_on(mod, model, case.samples + case.ok, "module()")
    for c in case.bad:
        try:
            got = mod(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))
        except Exception as e:
            out.append(f"refuses {_shape(c)} ({type(e).__name__})")
            continue
        try:
            same = _same(model(*copy.deepcopy(c[0]), **copy.deepcopy(c[1])), got)
            out.append(f"accepts {_shape(c)}, {'= eager' if same else 'WRONG'}")
        except Exception as e:
            out.append(f"accepts {_shape(c)}; eager fails ({type(e).__name__})")
    try:
        dec = ep.run_decompositions()
        out += _run_on(dec.module(), model, case.samples + case.ok, "decomposed")
    except Exception as e:
        out.append(f"run_decompositions fails: {error_line(e)}")
    try:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.pt2")
            graphcap.save(ep, path)
            loaded = graphcap.load(path)
            out += _run_on(loaded.module(), model, case.samples + case.ok, "loaded")
    except Exception as e:
        out.append(f"save/load fails: {error_line(e)}")
    return " | ".join(out)


def _auto_spec(c: Call) -> Any:
    def leaf(v: Any) -> Any:
        return {d: te.Dim.AUTO for d in range(v.dim())} if isinstance(v, torch.Tensor) else None
    args = tuple(torch.utils._pytree.tree_map(leaf, a) for a in c[0])
    kwargs = {k: torch.utils._pytree.tree_map(leaf, v) for k, v in c[1].items()}
    if kwargs and args:
        return None  # mixing positional and keyword specs: torch wants one dict by name
    return kwargs if kwargs else args


def _torch(case: Case, how: str) -> str:
    model = case.make()
    args, kwargs = copy.deepcopy(case.samples[0])
    try:
        if how == "auto":
            spec = _auto_spec(case.samples[0])
            if spec is None:
                import inspect
                names = list(inspect.signature(model.forward).parameters)
                spec = {**dict(zip(names, _auto_spec((args, {}))[0:len(args)])), **_auto_spec(((), kwargs))}
        else:
            spec = te.AdditionalInputs()
            for a, k in case.samples[1:]:
                spec.add(copy.deepcopy(a), copy.deepcopy(k))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = te.export(model, args, kwargs, dynamic_shapes=spec, strict=False)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return f"refused: {error_line(e)}"
    out = [f"ranges {_ranges(ep)}"]
    out += _run_on(ep.module(), model, case.samples + case.ok, "module()")
    for c in case.bad:
        try:
            got = ep.module()(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))
        except Exception as e:
            out.append(f"refuses {_shape(c)} ({type(e).__name__})")
            continue
        try:
            same = _same(model(*copy.deepcopy(c[0]), **copy.deepcopy(c[1])), got)
            out.append(f"accepts {_shape(c)}, {'= eager' if same else 'WRONG'}")
        except Exception as e:
            out.append(f"accepts {_shape(c)}; eager fails ({type(e).__name__})")
    return " | ".join(out)


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------

def _zoo(name: str) -> Any:
    import zoo
    return zoo.REGISTRY[name].builder()


def _text(b: int, s: int, seed: int = 0, mask: bool = True) -> dict:
    g = torch.Generator().manual_seed(seed)
    kw = {"input_ids": torch.randint(3, 1000, (b, s), generator=g)}
    if mask:
        kw["attention_mask"] = torch.ones(b, s, dtype=torch.long)
    return kw


def _hf(name: str) -> Callable[[], torch.nn.Module]:
    cache: dict[str, Any] = {}

    def make() -> torch.nn.Module:
        if name not in cache:
            cache[name] = _zoo(name).model
        return cache[name]
    return make


def _tv(name: str) -> Callable[[], torch.nn.Module]:
    cache: dict[str, Any] = {}

    def make() -> torch.nn.Module:
        if name not in cache:
            import torchvision
            torch.manual_seed(0)
            cache[name] = getattr(torchvision.models, name)(weights=None).eval()
        return cache[name]
    return make


def _img(b: int, h: int, w: int | None = None, seed: int = 0) -> Call:
    return (torch.randn(b, 3, h, w or h, generator=torch.Generator().manual_seed(seed)),), {}


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


class TwoInputs(torch.nn.Module):
    """x and y share dim 0 only in some samples; the model does not need them equal."""
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(0) + y.sum(0)


class AddTwo(torch.nn.Module):
    """x + y: the model needs their dim 0 equal; the samples agree on it."""
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class FixedReshape(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(4, 6) * 2


class FixedView(torch.nn.Module):
    """Specializes dim 1 to 12 by a view to a fixed size; batch stays free."""
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], 3, 4).sum(-1)


class Relation(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a.sum() + b.sum() + c.sum()


class CatNeeds(torch.nn.Module):
    """The model needs y = 2*x along dim 0 (cat then add)."""
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) + y


class EqualityBranch(torch.nn.Module):
    """Specializes dim 1 by an equality test: 12 takes one path, every other size the other."""
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 12:
            return x.view(x.shape[0], 3, 4).sum(-1)
        return x[:, :3] * 2


class ShapeBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x * 2
        return x - 1


class DataBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


class KwargsModel(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
        out = x * scale
        if mask is not None:
            out = out * mask.unsqueeze(-1)
        return out


class Optional_(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, flag: bool = False) -> torch.Tensor:
        out = x * 2
        if mask is not None:
            out = out * mask
        return out + 1 if flag else out


class ListIn(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return sum(x.sum(0) for x in xs)


class IntIn(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:n] * 2


class Padded(torch.nn.Module):
    """Batch shared by x and y in samples; seq of y = seq of x + 1 (a BOS token)."""
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(1) + y[:, 1:].sum(1)


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _cases() -> list[Case]:
    c: list[Case] = []
    # ---- transformers tiny configs (zoo), batch and sequence vary
    for name in ("hf_bert", "hf_gpt2", "hf_llama"):
        c.append(Case(name, _hf(name), [((), _text(2, 7, 1)), ((), _text(3, 12, 2)), ((), _text(4, 9, 3))],
                      ok=[((), _text(5, 20, 4)), ((), _text(1, 3, 5)), ((), _text(3, 1, 7))],
                      bad=[((), _text(2, 600, 6))]))
    c.append(Case("hf_gpt2_ids_only", _hf("hf_gpt2"), [((), _text(2, 7, 1, False)), ((), _text(3, 12, 2, False))],
                  ok=[((), _text(1, 5, 4, False)), ((), _text(6, 30, 5, False)), ((), _text(2, 1, 6, False))]))
    # ---- torchvision, batch and image size vary
    c.append(Case("tv_resnet18_batch_hw", _tv("resnet18"), [_img(2, 64), _img(3, 96, seed=1)],
                  ok=[_img(1, 80, seed=2), _img(4, 128, 112, seed=3)]))
    c.append(Case("tv_mobilenet_batch", _tv("mobilenet_v3_small"), [_img(2, 64), _img(3, 64, seed=1)],
                  ok=[_img(5, 64, seed=2)], bad=[_img(2, 96, seed=3)]))
    # ---- zoo cases with their own two input sets
    for name in ("custom_dict_list_io", "custom_kwargs_only"):
        b = None

        def make(name: str = name) -> Any:
            return _zoo(name).model
        b = _zoo(name)
        c.append(Case(name, make, [(tuple(b.args), dict(b.kwargs)), (tuple(b.args2), dict(b.kwargs2))]))
    # ---- small models
    c.append(Case("mlp_batch", Mlp, [((_r(2, 8),), {}), ((_r(5, 8),), {})],
                  ok=[((_r(3, 8),), {}), ((_r(40, 8),), {})], bad=[((_r(3, 9),), {})]))
    c.append(Case("shared_in_some_samples", TwoInputs,
                  [((_r(3, 4), _r(3, 4)), {}), ((_r(5, 4), _r(2, 4)), {})],
                  ok=[((_r(6, 4), _r(7, 4)), {})]))
    c.append(Case("shared_in_all_samples_independent_model", TwoInputs,
                  [((_r(3, 4), _r(3, 4)), {}), ((_r(5, 4), _r(5, 4)), {})],
                  ok=[((_r(6, 4), _r(6, 4)), {}), ((_r(6, 4), _r(2, 4)), {})],
                  note="the samples tie x0=y0; a program over independent sizes would be wider"))
    c.append(Case("shared_needed", AddTwo, [((_r(3, 4), _r(3, 4)), {}), ((_r(5, 4), _r(5, 4)), {})],
                  ok=[((_r(7, 4), _r(7, 4)), {})], bad=[((_r(7, 4), _r(6, 4)), {})]))
    c.append(Case("reshape_fixed_size", FixedReshape, [((_r(24),), {}), ((_r(4, 6),), {})]))
    c.append(Case("reshape_fixed_varying", FixedReshape, [((_r(2, 12),), {}), ((_r(3, 8),), {})],
                  ok=[((_r(6, 4),), {}), ((_r(1, 24),), {})], bad=[((_r(5, 5),), {})]))
    c.append(Case("view_specializes_dim1", FixedView, [((_r(2, 12),), {}), ((_r(3, 12),), {}), ((_r(4, 12),), {})],
                  ok=[((_r(9, 12),), {})], bad=[((_r(2, 8),), {})]))
    c.append(Case("view_dim1_varies_eager_fails", FixedView, [((_r(2, 12),), {}), ((_r(3, 8),), {})]))
    c.append(Case("equality_branch_dim1_varies", EqualityBranch, [((_r(2, 12),), {}), ((_r(3, 8),), {})],
                  ok=[((_r(4, 12),), {}), ((_r(4, 9),), {})]))
    c.append(Case("size_0_and_1", Mlp, [((_r(0, 8),), {}), ((_r(1, 8),), {})],
                  ok=[((_r(4, 8),), {})]))
    c.append(Case("size_1_and_3", Mlp, [((_r(1, 8),), {}), ((_r(3, 8),), {})],
                  ok=[((_r(0, 8),), {}), ((_r(9, 8),), {})]))
    c.append(Case("relation_2x_and_plus1", Relation,
                  [((_r(2), _r(4), _r(3)), {}), ((_r(3), _r(6), _r(4)), {}), ((_r(5), _r(10), _r(6)), {})],
                  ok=[((_r(7), _r(14), _r(8)), {}), ((_r(7), _r(3), _r(2)), {})],
                  note="model needs no relation; the samples show b=2a, c=a+1"))
    c.append(Case("relation_plus1_needed_2samples", Padded,
                  [((_r(2, 5), _r(2, 6)), {}), ((_r(3, 7), _r(3, 8)), {})],
                  ok=[((_r(4, 9), _r(4, 10)), {})]))
    c.append(Case("relation_2x_needed", CatNeeds, [((_r(2, 3), _r(4, 3)), {}), ((_r(5, 3), _r(10, 3)), {})],
                  ok=[((_r(7, 3), _r(14, 3)), {})], bad=[((_r(7, 3), _r(13, 3)), {})]))
    c.append(Case("one_sample", Mlp, [((_r(2, 8),), {})]))
    c.append(Case("different_structure", ListIn, [(([_r(2, 3), _r(2, 3)],), {}), (([_r(3, 3)],), {})]))
    c.append(Case("different_dtype", Mlp, [((_r(2, 8),), {}), ((_r(3, 8).double(),), {})]))
    c.append(Case("kwargs_samples", KwargsModel,
                  [((), {"x": _r(2, 5, 4), "mask": torch.ones(2, 5)}),
                   ((), {"x": _r(3, 7, 4), "mask": torch.ones(3, 7)})],
                  ok=[((), {"x": _r(6, 2, 4), "mask": torch.ones(6, 2)})]))
    c.append(Case("kwargs_float_varies", KwargsModel,
                  [((), {"x": _r(2, 5, 4), "scale": 1.0}), ((), {"x": _r(3, 7, 4), "scale": 2.0})]))
    c.append(Case("none_vs_tensor", Optional_, [((_r(2, 3),), {"mask": None}), ((_r(4, 3),), {"mask": _r(4, 3)})]))
    c.append(Case("missing_keyword", Optional_, [((_r(2, 3),), {}), ((_r(4, 3),), {"mask": _r(4, 3)})]))
    c.append(Case("bool_varies", Optional_, [((_r(2, 3),), {"flag": True}), ((_r(4, 3),), {"flag": False})]))
    c.append(Case("shape_branch_both_sides", ShapeBranch, [((_r(2, 3),), {}), ((_r(6, 3),), {})]))
    c.append(Case("shape_branch_one_side", ShapeBranch, [((_r(5, 3),), {}), ((_r(7, 3),), {})],
                  ok=[((_r(9, 3),), {})], bad=[((_r(3, 3),), {})]))
    c.append(Case("data_branch_both_paths", DataBranch, [((_r(2, 3).abs(),), {}), ((-_r(4, 3).abs(),), {})]))
    c.append(Case("int_input_varies", IntIn, [((_r(6, 3), 2), {}), ((_r(8, 3), 5), {})],
                  ok=[((_r(7, 3), 3), {})]))
    c.append(Case("list_input_lengths_vary", ListIn, [(([_r(2, 3), _r(4, 3)],), {}), (([_r(3, 3), _r(5, 3)],), {})],
                  ok=[(([_r(6, 3), _r(1, 3)],), {})]))
    return c


def main() -> None:
    want = [a for a in sys.argv[1:] if not a.startswith("-")]
    torch.manual_seed(0)
    for case in _cases():
        if want and not any(w in case.name for w in want):
            continue
        print(f"== {case.name}  samples {[_shape(s) for s in case.samples]}", flush=True)
        print(f"   gc:   {_gc(case)}", flush=True)
        print(f"   auto: {_torch(case, 'auto')}", flush=True)
        print(f"   ai:   {_torch(case, 'ai') if len(case.samples) > 1 else 'n/a'}", flush=True)


if __name__ == "__main__":
    main()
