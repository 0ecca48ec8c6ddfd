"""Node metadata on real models: graphcap against torch.export, node by node.

Each probe exports one model (the zoo's torchvision, timm and transformers cases, plus small
models that annotate nodes with ``torch.fx.traceback.annotate`` / ``preserve_node_meta``) with
graphcap and with torch.export, matches the two graphs' nodes (by name where both have it, else by
op, target and order) and compares what consumers read from ``node.meta``: ``nn_module_stack``
(keys, paths, class names, order), ``source_fn_stack``, the innermost frame of ``stack_trace``,
``torch_fn``, ``custom``, ``val`` / ``tensor_meta``, ``from_node`` (its chain of node names),
and the node names.  The same after ``run_decompositions()``, after a save/load round trip (each
library's own), in ``ep.module()``'s graph and in the unflattened modules' graphs.

Prints one line per (probe, stage) with the differences counted by key, then each kind of
difference once with an example.  Run:
    PYTHONPATH=src python bench/probes/metadata_audit.py [name-substring ...] [--strict] [-v]
"""
from __future__ import annotations

import collections
import contextlib
import difflib
import io
import re
import sys
import time
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
import torch.fx.traceback as fx_traceback
from torch import nn

import graphcap

sys.path.insert(0, "../shared/zoo")

VERBOSE = "-v" in sys.argv
STRICT = "--strict" in sys.argv


# ---------------------------------------------------------------- normalising what is compared

def _type_name(t: Any) -> str:
    if isinstance(t, type):
        return f"{t.__module__}.{t.__qualname__}"
    return str(t)


def _fn_name(f: Any) -> str:
    if isinstance(f, type):
        return _type_name(f)
    if isinstance(f, str):
        return f
    name = getattr(f, "__name__", None) or str(f)
    return str(name)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _innermost(trace: str | None) -> str | None:
    if not trace:
        return None
    frames = _FRAME.findall(trace)
    if not frames:
        return trace.strip().splitlines()[-1] if trace.strip() else None
    f, line, fn = frames[-1]
    return f"{f.rsplit('/', 2)[-2:] if '/' in f else f}:{line}:{fn}"


_SYMBOL = re.compile(r"\b([su])\d+\b")


def _sym(x: Any) -> str:
    """A size as text with symbols made anonymous (torch and graphcap number them differently)."""
    return _SYMBOL.sub(r"\1?", str(x))


def _val(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return ("T", tuple(_sym(s) for s in v.shape), str(v.dtype), str(v.device).split(":")[0])
    if isinstance(v, (list, tuple)):
        return tuple(_val(x) for x in v)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("S", type(v).__name__)
    if v is None:
        return None
    return (type(v).__name__,)


def _from_node_chain(fn: Any) -> Any:
    if not fn:
        return None
    out = []
    for src in fn:
        chain = []
        s = src
        while s is not None:
            chain.append(getattr(s, "name", "?"))
            prev = getattr(s, "from_node", None)
            s = prev[0] if prev else None
        out.append(tuple(chain))
    return tuple(out)


def norm(node: torch.fx.Node) -> dict[str, Any]:
    m = node.meta
    d: dict[str, Any] = {}
    if "nn_module_stack" in m:
        st = m["nn_module_stack"] or {}
        d["nn_module_stack"] = tuple((k, v[0], _type_name(v[1]).rsplit(".", 1)[-1]) for k, v in st.items())
        d["nn_module_stack.paths"] = tuple(v[0] for v in st.values())
        d["nn_module_stack.types"] = tuple(_type_name(v[1]).rsplit(".", 1)[-1] for v in st.values())
        d["nn_module_stack.keys"] = tuple(st.keys())
    if "source_fn_stack" in m:
        d["source_fn_stack"] = tuple((a, _fn_name(b)) for a, b in (m["source_fn_stack"] or []))
    if "stack_trace" in m:
        d["stack_trace"] = _innermost(m["stack_trace"])
    if "torch_fn" in m:
        d["torch_fn"] = tuple(m["torch_fn"]) if m["torch_fn"] else None
    # torch leaves its own markers (``_torchdynamo_disable*``) in "custom" beside the user's keys;
    # only the user's are compared, and an empty dict counts as none
    user_custom = {k: v for k, v in (m.get("custom") or {}).items() if not str(k).startswith("_torchdynamo")}
    if user_custom:
        d["custom"] = user_custom
    if "val" in m:
        d["val"] = _val(m["val"])
    if "tensor_meta" in m:
        tm = m["tensor_meta"]
        d["tensor_meta"] = ((tuple(_sym(s) for s in tm.shape), str(tm.dtype)) if hasattr(tm, "shape")
                            else type(tm).__name__)
    if "from_node" in m:
        d["from_node"] = _from_node_chain(m["from_node"])
    return d


# ---------------------------------------------------------------- matching and comparing

def _key(n: torch.fx.Node) -> tuple:
    return (n.op, str(n.target))


def match(ga: torch.fx.Graph, gb: torch.fx.Graph) -> list[tuple[torch.fx.Node | None, torch.fx.Node | None]]:
    """Pairs of nodes: the two node sequences aligned by (op, target) (difflib), so that nodes
    numbered differently (``add_3`` / ``add_70``) still meet their counterpart."""
    a, b = list(ga.nodes), list(gb.nodes)
    pairs: list[tuple[Any, Any]] = []
    sm = difflib.SequenceMatcher(None, [_key(n) for n in a], [_key(n) for n in b], autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(a[i1:i2], b[j1:j2]))
            continue
        left, right = a[i1:i2], b[j1:j2]
        by_name = {n.name: n for n in right}
        for n in left:
            o = by_name.pop(n.name, None)
            pairs.append((n, o) if o is not None and _key(o) == _key(n) else (n, None))
            if o is not None and _key(o) != _key(n):
                by_name[o.name] = o
        pairs.extend((None, o) for o in by_name.values())
    return pairs


class Tally:
    def __init__(self) -> None:
        self.count: collections.Counter = collections.Counter()
        self.example: dict[tuple, str] = {}

    def add(self, probe: str, stage: str, key: str, kind: str, ex: str) -> None:
        self.count[(stage, key, kind)] += 1
        self.example.setdefault((stage, key, kind), f"{probe}: {ex}")


TALLY = Tally()
SKIP_KEYS = {"nn_module_stack.paths", "nn_module_stack.types", "nn_module_stack.keys"}


def compare(probe: str, stage: str, ga: torch.fx.Graph, gb: torch.fx.Graph) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for ng, nt in match(ga, gb):
        if ng is None or nt is None:
            n = ng or nt
            kind = "only graphcap" if nt is None else "only torch"
            c["node:" + kind] += 1
            TALLY.add(probe, stage, "node", kind, f"{n.op} {n.name} {n.target}")
            continue
        if ng.name != nt.name:
            c["name"] += 1
            TALLY.add(probe, stage, "name", "differs", f"graphcap {ng.name} / torch {nt.name} ({nt.target})")
        dg, dt = norm(ng), norm(nt)
        where = f" ({nt.op})" if nt.op in ("placeholder", "output", "get_attr") else ""
        for k in sorted(set(dg) | set(dt)):
            if k in ("nn_module_stack.paths", "nn_module_stack.types", "nn_module_stack.keys"):
                continue
            if k not in dg:
                c[k + ":missing" + where] += 1
                TALLY.add(probe, stage, k, "missing in graphcap" + where, f"{nt.op} {nt.name}: torch {dt[k]!r}"[:300])
            elif k not in dt:
                if k in ("from_node",) or dg[k] in (None, {}, ()):
                    continue  # extra provenance: not a defect
                c[k + ":extra" + where] += 1
                TALLY.add(probe, stage, k, "extra in graphcap" + where, f"{ng.op} {ng.name}: graphcap {dg[k]!r}"[:300])
            elif dg[k] != dt[k]:
                kind = "differs"
                if k == "nn_module_stack":
                    if dg["nn_module_stack.paths"] != dt["nn_module_stack.paths"]:
                        kind = "paths differ"
                    elif dg["nn_module_stack.types"] != dt["nn_module_stack.types"]:
                        kind = "types differ"
                    else:
                        kind = "keys differ"
                kind += where
                c[k + ":" + kind] += 1
                TALLY.add(probe, stage, k, kind, f"{ng.op} {ng.name}: graphcap {dg[k]!r} / torch {dt[k]!r}"[:400])
    return c


def compare_gm_meta(probe: str, stage: str, ga: torch.fx.GraphModule, gb: torch.fx.GraphModule) -> None:
    ka, kb = set(getattr(ga, "meta", {}) or {}), set(getattr(gb, "meta", {}) or {})
    for k in kb - ka:
        TALLY.add(probe, stage, "gm.meta", "missing in graphcap", k)
    for k in ka - kb:
        TALLY.add(probe, stage, "gm.meta", "extra in graphcap", k)


def unflat_graphs(m: nn.Module) -> dict[str, torch.fx.Graph]:
    out = {}
    for fqn, sub in m.named_modules(remove_duplicate=False):
        g = getattr(sub, "graph", None)
        if isinstance(g, torch.fx.Graph):
            out[fqn] = g
    return out


# ---------------------------------------------------------------- the models

class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with fx_traceback.annotate({"stage": "block", "pp": 1}):
            y = self.lin(x)
        return self.norm(torch.relu(y) + x)


class Annotated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        with fx_traceback.annotate({"head": True}):
            x = torch.nn.functional.gelu(x * self.scale)
        return x.sum(-1)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


class CondBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.other = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda y: self.inner(y) + 1, lambda y: self.other(y) - 1, (x,))


class CondModel(nn.Module):
    """A submodule holding a ``torch.cond`` whose branches call submodules (the zoo has none)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([CondBlock(), CondBlock()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x * 2


def _zoo(name: str) -> Callable[[], tuple[nn.Module, tuple, dict, Any]]:
    def build() -> tuple[nn.Module, tuple, dict, Any]:
        import zoo

        case = next(c for c in zoo.select(name) if c.name == name)
        b = case.builder()
        return b.model, tuple(b.args), dict(b.kwargs or {}), b.dynamic_shapes
    return build


PROBES: dict[str, Callable[[], tuple[nn.Module, tuple, dict, Any]]] = {
    "annotated": lambda: (Annotated().eval(), (torch.randn(3, 8),), {}, None),
    "cond_blocks": lambda: (CondModel().eval(), (torch.randn(3, 8),), {}, None),
    "tv_resnet18": _zoo("tv_resnet18"),
    "tv_mobilenet_v3_small": _zoo("tv_mobilenet_v3_small"),
    "tv_vit_small": _zoo("tv_vit_small"),
    "timm_vit_tiny_patch16_224": _zoo("timm_vit_tiny_patch16_224"),
    "hf_gpt2": _zoo("hf_gpt2"),
    "hf_bert": _zoo("hf_bert"),
    "hf_llama": _zoo("hf_llama"),
}


def run_probe(name: str, strict: bool) -> None:
    model, args, kwargs, dyn = PROBES[name]()
    tag = name + (" strict" if strict else "")
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # non-strict records torch.fx.traceback.annotate's "custom" only under preserve_node_meta
        with fx_traceback.preserve_node_meta() if name == "annotated" else contextlib.nullcontext():
            ep_g = graphcap.export(model, args, kwargs, dynamic_shapes=dyn, strict=strict)
            ep_t = te.export(model, args, kwargs, dynamic_shapes=dyn, strict=strict)
    stages: list[tuple[str, Any, Any]] = [("export", ep_g.graph_module, ep_t.graph_module)]
    decomposed = []
    for lib, ep in (("graphcap", ep_g), ("torch", ep_t)):
        try:
            decomposed.append(ep.run_decompositions().graph_module)
        except Exception as e:
            print(f"{tag} | {lib}'s run_decompositions failed: {type(e).__name__}: {str(e)[:200]}")
    if len(decomposed) == 2:
        stages.append(("run_decompositions", *decomposed))
    try:
        bg, bt = io.BytesIO(), io.BytesIO()
        graphcap.save(ep_g, bg)
        te.save(ep_t, bt)
        bg.seek(0)
        bt.seek(0)
        lg, lt = graphcap.load(bg), te.load(bt)
        stages.append(("save/load", lg.graph_module, lt.graph_module))
    except Exception as e:
        print(f"{tag} | save/load failed: {type(e).__name__}: {e}"[:300])
    try:
        stages.append(("module()", ep_g.module(), ep_t.module()))
    except Exception as e:
        print(f"{tag} | module() failed: {type(e).__name__}: {e}"[:300])
    for stage, gg, gt in stages:
        c = compare(tag, stage, gg.graph, gt.graph)
        subs_t = dict(gt.named_modules())
        for sub_name, sub in gg.named_modules():  # control-flow subgraphs, by their (shared) names
            other = subs_t.get(sub_name)
            if sub_name and isinstance(sub, torch.fx.GraphModule) and isinstance(other, torch.fx.GraphModule):
                c.update(compare(tag, stage, sub.graph, other.graph))
        compare_gm_meta(tag, stage, gg, gt)
        print(f"{tag} | {stage} | {sum(c.values())} differences | {dict(c) if c else '='}", flush=True)
    try:
        ug = graphcap.unflatten(ep_g)
        ut = te.unflatten(ep_t)
        ggs, gts = unflat_graphs(ug), unflat_graphs(ut)
        total: collections.Counter = collections.Counter()
        for fqn in sorted(set(ggs) | set(gts)):
            if fqn not in ggs or fqn not in gts:
                TALLY.add(tag, "unflatten", "module", "only " + ("torch" if fqn in gts else "graphcap"), fqn)
                total["module"] += 1
                continue
            total.update(compare(tag, "unflatten", ggs[fqn], gts[fqn]))
        print(f"{tag} | unflatten | {sum(total.values())} differences | {dict(total) if total else '='}")
    except Exception as e:
        print(f"{tag} | unflatten failed: {type(e).__name__}: {e}"[:300])
    if VERBOSE:
        print(f"{tag} | {time.time() - t0:.1f}s")


def main() -> None:
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    names = [n for n in PROBES if not wanted or any(w in n for w in wanted)]
    for n in names:
        for strict in ([False, True] if STRICT else [False]):
            try:
                run_probe(n, strict)
            except Exception:
                print(f"{n} | failed:\n{traceback.format_exc()[-1500:]}")
    print("\nDifferences by stage, key and kind (count; one example):")
    for (stage, key, kind), cnt in sorted(TALLY.count.items()):
        print(f"  {stage:18s} {key:18s} {kind:22s} {cnt:5d}  {TALLY.example[(stage, key, kind)]}")


if __name__ == "__main__":
    main()
