"""Audit 2 of run_decompositions: graphcap vs torch.export vs eager.

Run: PYTHONPATH=src python bench/probes/decomp_audit2.py [name ...]   (names: see PROBES)

- ``same_question``: two operators asking one size question (bilinear then bicubic over one
  dynamic dim; bicubic in a torch.cond branch after a bilinear outside): is the second checked?
- ``conds``: three conds whose branches raise two guards: how many checks, how long the retrace.
- ``autocast_off``: a ``torch.autocast(enabled=False)`` region in a model exported under a bf16
  autocast; decomposed outside and inside autocast, each run plain and under autocast.
- ``zoo``: real models (../shared/zoo) with their dynamic shapes: decomposed and decomposed +
  saved + loaded programs vs eager at the example, the second inputs, the ranges' minimum and one
  above it.
One line per case: ``=`` equal to eager, ``WRONG`` a number or dtype differs, ``ERR`` raised.
"""
from __future__ import annotations

import contextlib
import functools
import io
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import graphcap
from graphcap.passes import decomposition_checks

warnings.filterwarnings("ignore")
PROBES = {}


def probe(fn):
    PROBES[fn.__name__] = fn
    return fn


def _outcome(run, want) -> str:
    try:
        got = run()
    except Exception as e:
        return f"ERR {type(e).__name__}: {str(e).strip().splitlines()[0][:90]}"
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    ok = len(got) == len(want) and all(g.dtype == w.dtype and torch.allclose(g.double(), w.double(), atol=1e-4)
                                       for g, w in zip(got, want))
    return "=" if ok else "WRONG"


@probe
def same_question():
    class TwoOutside(torch.nn.Module):
        def forward(self, x, flag):
            return (F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True),
                    F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True))

    class OneInABranch(torch.nn.Module):
        def forward(self, x, flag):
            smooth = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)
            return smooth, torch.cond(flag.sum() > 0,
                                      lambda x: F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True),
                                      lambda x: F.interpolate(x, scale_factor=0.5, mode="nearest"), (x,))

    for model in (TwoOutside(), OneInABranch()):
        args = (torch.randn(1, 2, 6, 6), torch.ones(1))
        for side, export, dim in (("graphcap", graphcap.export, graphcap.Dim),
                                  ("torch", torch.export.export, torch.export.Dim)):
            try:
                ep = export(model, args, dynamic_shapes=({2: dim("h", min=2, max=9)}, None))
                decomposed = ep.run_decompositions()
            except Exception as e:
                print(type(model).__name__, side, f"refused: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            cells = []
            for h in (2, 3, 6, 9):
                x = torch.randn(1, 2, h, 6)
                run = functools.partial(decomposed.module(), x, args[1])
                cells.append(f"h={h}:{_outcome(run, model(x, args[1]))}")
            print(type(model).__name__, side, " ".join(cells))


@probe
def conds():
    class ThreeConds(torch.nn.Module):
        def forward(self, x, flag):
            out = []
            for k in range(3):
                def grow(x):
                    a = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True).sum()
                    b = F.interpolate(x, scale_factor=0.75, mode="bilinear", align_corners=True).sum()
                    return a + b + x.transpose(0, 2).reshape(-1, 5).sum(0)
                def keep(x):
                    return x.amax() + x.transpose(0, 2).reshape(-1, 5).sum(0)
                out.append(torch.cond(flag.sum() > k, grow, keep, (x,)))
            return torch.stack(out)

    ep = graphcap.export(ThreeConds(), (torch.randn(1, 2, 6, 5), torch.ones(1)),
                         dynamic_shapes={"x": {2: graphcap.Dim("h", min=2, max=12)}, "flag": None})
    counted = []
    wrong_at = decomposition_checks._wrong_at
    decomposition_checks._wrong_at = lambda *a: counted.append(1) or wrong_at(*a)
    try:
        times = []
        for _ in range(3):
            counted.clear()
            start = time.perf_counter()
            decomposed = ep.run_decompositions()
            times.append(time.perf_counter() - start)
    finally:
        decomposition_checks._wrong_at = wrong_at
    x = (torch.randn(1, 2, 2, 5), torch.full((1,), 2.5))
    print("conds: checks", len(counted), "retrace s", [round(t, 2) for t in times],
          "h=2", _outcome(functools.partial(decomposed.module(), *x), ThreeConds()(*x)))


@probe
def autocast_off():
    def bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    class Region(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.l1(x)
            with torch.autocast("cpu", enabled=False):
                z = self.l2(y.float()) @ x.t()
            return y, z

    torch.manual_seed(0)
    model, x = Region().eval(), torch.randn(5, 16)
    with bf16():
        want_under = model(x)
    for side, export in (("graphcap", graphcap.export), ("torch", torch.export.export)):
        for strict in (False, True):
            with bf16():
                ep = export(model, (x,), strict=strict)
            for decomposed_under in (False, True):
                where = "under" if decomposed_under else "outside"
                try:
                    with bf16() if decomposed_under else contextlib.nullcontext():
                        decomposed = ep.run_decompositions()
                except Exception as e:
                    print(side, f"strict={strict}", f"decomposed {where} autocast:",
                          f"ERR {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                    continue
                cells = []
                for run_under in (False, True):
                    run = functools.partial(_run, bf16 if run_under else contextlib.nullcontext, decomposed.module(), x)
                    want = want_under if run_under or decomposed_under else model(x)
                    cells.append(f"run {'under' if run_under else 'plain'}: {_outcome(run, want)}")
                print(side, f"strict={strict}", f"decomposed {where} autocast:", ", ".join(cells))


def _run(context, module, *args):
    with context():
        return module(*args)


def _narrowed(value, spec, size):
    if isinstance(value, torch.Tensor) and isinstance(spec, dict):
        for d, dim in spec.items():
            if hasattr(dim, "min"):
                value = value.narrow(d, 0, size(dim))
        return value
    if isinstance(value, dict):
        return {k: _narrowed(v, spec.get(k) if isinstance(spec, dict) else None, size) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_narrowed(v, spec[i] if isinstance(spec, (tuple, list)) else None, size)
                           for i, v in enumerate(value))
    return value


ZOO = "tv_resnet18,tv_deeplabv3_mbv3_large,tv_vit_small,hf_bert,hf_llama,hf_wav2vec2,timm_efficientformer_l1"


@probe
def zoo(names: str = ZOO):
    sys.path.insert(0, "../shared/zoo")
    import zoo as shared_zoo
    for name in names.split(","):
        built = shared_zoo.select(name)[0].builder()
        model, ds = built.model, built.dynamic_shapes
        ep = graphcap.export(model, built.args, built.kwargs, dynamic_shapes=ds)
        start = time.perf_counter()
        try:
            decomposed = ep.run_decompositions()
        except Exception as e:
            print(name, f"decompose ERR {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        seconds = time.perf_counter() - start
        buf = io.BytesIO()
        graphcap.save(decomposed, buf)
        buf.seek(0)
        loaded = graphcap.load(buf)
        ds_args, ds_kwargs = (ds, None) if isinstance(ds, (tuple, list)) else (None, ds)
        inputs = {"example": (built.args, built.kwargs), "second": (built.args2, built.kwargs2)}
        for tag, extra in (("min", 0), ("min+1", 1)):
            def size(dim, extra=extra):
                return max(dim.min, 1) + extra
            inputs[tag] = (_narrowed(built.args2, ds_args, size), _narrowed(built.kwargs2, ds_kwargs, size))
        cells = []
        for tag, (args, kwargs) in inputs.items():
            with torch.no_grad():
                want = model(*args, **kwargs)
                for program, which in ((decomposed, "decomposed"), (loaded, "loaded")):
                    run = functools.partial(program.module(), *args, **kwargs)
                    cells.append(f"{tag}/{which}:{_outcome(run, want)}")
        print(name, f"decomposed in {seconds:.1f}s", " ".join(cells))


@probe
def spatial():
    """torchvision models with dynamic image height and width (their interpolations and pools ask
    size questions), decomposed and loaded, at the ranges' ends and between."""
    import torchvision
    for name, low in (("resnet18", 32), ("deeplabv3_mobilenet_v3_large", 32), ("lraspp_mobilenet_v3_large", 32)):
        torch.manual_seed(0)
        model = getattr(torchvision.models.segmentation if "mobilenet_v3_large" in name else torchvision.models,
                        name)(weights=None, **({"weights_backbone": None} if "mobilenet_v3_large" in name else {}))
        model = model.eval()
        h, w = graphcap.Dim("h", min=low, max=256), graphcap.Dim("w", min=low, max=256)
        try:
            ep = graphcap.export(model, (torch.randn(1, 3, 96, 128),), dynamic_shapes=({2: h, 3: w},))
            start = time.perf_counter()
            decomposed = ep.run_decompositions()
        except Exception as e:
            print(name, f"ERR {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        seconds = time.perf_counter() - start
        buf = io.BytesIO()
        graphcap.save(decomposed, buf)
        buf.seek(0)
        loaded = graphcap.load(buf)
        cells = []
        for size in ((low, low), (low + 1, low + 3), (77, 200), (256, 256)):
            x = torch.randn(1, 3, *size)
            with torch.no_grad():
                want = model(x)
                for program, which in ((decomposed, "decomposed"), (loaded, "loaded")):
                    cells.append(f"{size}/{which}:{_outcome(functools.partial(program.module(), x), want)}")
        print(name, f"decomposed in {seconds:.1f}s", " ".join(cells))


if __name__ == "__main__":
    for name in sys.argv[1:] or list(PROBES):
        PROBES[name]()
