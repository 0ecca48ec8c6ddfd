"""graphcap.save / graphcap.load on unusual content, second audit (2026-11-27 midday).

Sections (each prints one line per probe: name, verdict, detail):

  legit     real programs saved and loaded: must load and match (zoo models, torchvision,
            transformers, torchao pt2e quantized, cond / map / while_loop, decomposed, from_torch).
            No argument check may refuse any of them.
  kinds     files whose calls pass an argument of another kind than the schema's (a number for
            ``mm``'s Tensor, a string for a size list, a list for an int, ...): refused naming the
            node, or loaded and equal where torch's call takes the value.
  pickle    pickle / deepcopy of ep, ep.graph_module, ep.module(), compared with torch.export.
  versions  a file of a newer format version, of an older one (goldens), extra members.
  cross     run with ``cross save DIR`` under one torch line and ``cross load DIR`` under another.

    PYTHONPATH=src python bench/probes/serialize_audit2.py [legit|kinds|pickle|versions] [--zoo PATTERN]
    PYTHONPATH=src /work/main/.venv-2.15/bin/python bench/probes/serialize_audit2.py cross save /tmp/x
    PYTHONPATH=src /work/main/.venv-2.10/bin/python bench/probes/serialize_audit2.py cross load /tmp/x
"""
from __future__ import annotations

import copy
import io
import json
import logging
import os
import pickle
import sys
import traceback
import warnings

import torch
from torch.export import Dim

import graphcap
from graphcap.errors import GraphcapError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive

warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "..", "..", "..", "shared", "zoo")


def report(name, verdict, detail=""):
    print(f"{name:55} {verdict:10} {str(detail)[:300]}", flush=True)


def roundtrip(ep, **load_kw):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return graphcap.load(buf, **load_kw)


def same(a, b, depth=0):
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if hasattr(x, "__dict__") and not isinstance(x, torch.Tensor) and depth < 4:
            # a class torch's pytree does not know (transformers' DynamicCache): its fields
            if type(x) is not type(y) or not same(vars(x), vars(y), depth + 1):
                return False
        elif isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.shape == y.shape
                    and torch.allclose(x, y, atol=1e-5, equal_nan=True)):
                return False
        elif x != y:
            return False
    return True


# ---------------------------------------------------------------- small programs
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return self.lin(x).relu() + self.b


class Cond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x).relu(), lambda x: self.lin(x) - 1, (x,))


class Map(torch.nn.Module):
    def forward(self, xs, y):
        from torch._higher_order_ops.map import map as hop_map
        return hop_map(lambda x, y: x * y + 2, xs, y)


class While(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2 + i), (torch.tensor(0), x))


class Mixed(torch.nn.Module):
    """Numbers in Tensor slots (add, mul, where's scalar overloads), sizes, dtypes, devices, lists."""

    def forward(self, x, idx):
        n = x.shape[0]
        y = (x + 1) * 0.5 - n
        z = torch.where(y > 0, y, 0.0)
        w = torch.cat([z, x], dim=1).view(n, -1).to(torch.float64).float()
        s = w.sum(dim=[1], keepdim=True) + torch.arange(n, device=x.device).unsqueeze(1)
        i = x[idx, :2]
        return torch.nn.functional.gelu(s, approximate="tanh"), i, torch.full((2,), 3.0).clamp(min=1, max=2)


def small_programs():
    x = torch.randn(3, 4)
    b = Dim("b", min=2, max=16)
    yield "lin", Lin(), (x,), {"x": {0: b}}, (torch.randn(5, 4),)
    yield "cond", Cond(), (x,), {"x": {0: b}}, (-torch.rand(6, 4),)
    yield "map", Map(), (torch.randn(3, 2), torch.randn(2)), None, (torch.randn(3, 2), torch.randn(2))
    yield "while_loop", While(), (x,), None, (torch.randn(3, 4),)
    yield ("mixed", Mixed(), (x, torch.tensor([0, 2])), {"x": {0: b}, "idx": None},
           (torch.randn(7, 4), torch.tensor([1, 3])))


def zoo_programs(pattern):
    sys.path.insert(0, ZOO)
    import zoo
    for case in zoo.select(pattern):
        try:
            built = case.builder()
        except Exception as e:  # a library missing here
            report(f"zoo:{case.name}", "SKIP", f"{type(e).__name__}: {e}")
            continue
        yield (f"zoo:{case.name}", built.model, built.args, built.kwargs, built.dynamic_shapes,
               built.args2, built.kwargs2)


def pt2e_programs():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.lin(self.conv(x).relu().mean(dim=(2, 3)))

    for kind, config in [("per_tensor", dict(is_per_channel=False)), ("per_channel", dict(is_per_channel=True)),
                         ("dynamic", dict(is_per_channel=True, is_dynamic=True))]:
        torch.manual_seed(0)
        x = torch.randn(2, 3, 8, 8)
        m = graphcap.export(Conv().eval(), (x,)).module()
        prepared = prepare_pt2e(m, XNNPACKQuantizer().set_global(get_symmetric_quantization_config(**config)))
        with torch.no_grad():
            prepared(x)
        converted = convert_pt2e(prepared)
        yield f"pt2e-{kind}", converted, (x,), {}, None, (torch.randn(2, 3, 8, 8),), {}


def check_legit(name, model, args, kwargs, dyn, args2, kwargs2):
    hows = ("graphcap", "graphcap-decomposed", "torch-from_torch") + (() if name.startswith("zoo:") else
                                                                       ("graphcap-strict", "torch-strict"))
    for how in hows:
        label = f"{name} [{how}]"
        strict = how.endswith("strict")
        try:
            if how.startswith("torch"):
                ep = graphcap.from_torch(torch.export.export(model, args, kwargs, dynamic_shapes=dyn, strict=strict))
            else:
                ep = graphcap.export(model, args, kwargs, dynamic_shapes=dyn, strict=strict)
                if how.endswith("decomposed"):
                    ep = ep.run_decompositions()
        except Exception as e:
            report(label, "NOEXPORT", f"{type(e).__name__}: {str(e)[:120]}")
            continue
        try:
            loaded = roundtrip(ep)
        except GraphcapError as e:
            report(label, "REFUSED", str(e).replace("\n", " | "))
            continue
        except Exception as e:
            report(label, "CRASH", f"{type(e).__name__}: {e}")
            continue
        with torch.no_grad():
            ok = all(same(ep.module()(*a, **k), loaded.module()(*a, **k))
                     for a, k in [(args, kwargs), (args2, kwargs2)] if a is not None)
        report(label, "=" if ok else "DIFFERENT")


def legit(zoo_pattern):
    for name, model, args, dyn, args2 in small_programs():
        check_legit(name, model, args, {}, dyn, args2, {})
    try:
        for item in pt2e_programs():
            check_legit(*item)
    except ImportError as e:
        report("pt2e", "SKIP", e)
    if zoo_pattern:
        for item in zoo_programs(zoo_pattern):
            check_legit(*item)


# ---------------------------------------------------------------- kinds
def _saved(model, args, dyn=None):
    buf = io.BytesIO()
    graphcap.save(graphcap.export(model, args, dynamic_shapes=dyn), buf)
    return buf.getvalue()


def _edited(data, edit):
    entries = read_entries(io.BytesIO(data))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    edit(program)
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    out.seek(0)
    return out


class MmView(torch.nn.Module):
    def forward(self, x, y):
        return (x @ y).view(-1).sum(dim=0, keepdim=True).to(torch.float64), torch.cat([x, y.t()]).clone(
            memory_format=torch.contiguous_format)


def kinds():
    """Every argument of every call replaced by values of each kind: each load refused naming the
    node, or loaded and then runs (or fails for another reason than the argument's kind)."""
    x, y = torch.randn(3, 4), torch.randn(4, 3)
    data = _saved(MmView(), (x, y), {"x": {0: Dim("n", min=2, max=8)}, "y": {1: Dim.AUTO}})
    program = json.loads(read_entries(io.BytesIO(data))[schema.PROGRAM_ENTRY])
    values = {"int": 3, "float": 0.5, "bool": True, "None": None, "str": "x", "dtype": {"dtype": "torch.float32"},
              "device": {"device": "cpu"}, "list_int": {"list": [1, 2]}, "list_str": {"list": ["a"]},
              "tensor_node": {"node": "x"}, "list_nodes": {"list": [{"node": "x"}]}}
    counts = {}
    for i, node in enumerate(program["graph_module"]["nodes"]):
        if node["op"] != "call_function" or "op" not in node["target"]:
            continue
        for pos in range(len(node["args"])):
            for vname, v in values.items():
                def edit(p, i=i, pos=pos, v=v):
                    p["graph_module"]["nodes"][i]["args"][pos] = v
                label = f"{node['name']}.args[{pos}]={vname}"
                try:
                    ep = graphcap.load(_edited(data, edit))
                except GraphcapError as e:
                    counts["refused"] = counts.get("refused", 0) + 1
                    text = str(e)
                    if "Where: program.json" not in text:
                        report(label, "NO-WHERE", text)
                    continue
                except Exception as e:
                    report(label, "CRASH", f"{type(e).__name__}: {e}")
                    continue
                try:
                    ep.module()(x, y)
                    counts["loaded-runs"] = counts.get("loaded-runs", 0) + 1
                except Exception as e:
                    text = str(e).split("\n")[0]
                    binding = "Expected a value of type" in text
                    verdict = "LOADED-BINDING-FAILS" if binding else "loaded-fails"
                    counts[verdict] = counts.get(verdict, 0) + 1
                    report(label, verdict, f"{type(e).__name__}: {text}")
    report("kinds", "summary", counts)


def _binding_refuses(op, args, kwargs):
    """Whether torch's call binding refuses these arguments (not the kernel after it)."""
    try:
        op(*args, **kwargs)
    except Exception as e:
        text = str(e)
        return ("Expected a value of type" in text or "instead found type" in text or "incompatible function" in text
                or "Expected a proper Tensor but got None" in text)  # the call fails before any kernel runs
    return False


def binding():
    """``call_types.misfit`` against torch's own call binding, argument by argument: a value it refuses
    that the binding takes would refuse a file that runs (OVER); one the binding refuses that it lets
    through loads and fails when run (under, allowed: the check refuses only what it is sure of)."""
    from graphcap.serialize.call_types import misfit
    aten = torch.ops.aten
    x, m = torch.randn(3, 4), torch.randn(1, 1, 2, 2)
    graph = torch.fx.Graph()

    def node(val):
        n = graph.placeholder(f"n{len(graph.nodes)}")
        n.meta["val"] = val
        return n
    cands = {"int": 2, "bool": True, "float": 2.0, "complex": 1j, "str": "cpu", "None": None,
             "dtype": torch.float32, "layout": torch.strided, "memory_format": torch.contiguous_format,
             "device": torch.device("cpu"), "tensor": x, "int 0-dim tensor": torch.tensor(2),
             "float 0-dim tensor": torch.tensor(2.0), "[int]": [1], "[tensor]": [x], "[None]": [None],
             "(int,)": (1,), "[float]": [1.0], "[bool]": [True], "[]": [], "[str]": ["a"], "[0-dim]": [torch.tensor(1)]}
    cases = [
        (aten.mm.default, [x, x.t()], {}, "mat2"), (aten.add.Tensor, [x, x], {}, "other"),
        (aten.add.Tensor, [x, x], {}, "alpha"), (aten.linear.default, [x, torch.randn(2, 4), None], {}, "bias"),
        (aten.cat.default, [[x, x], 0], {}, "tensors"), (aten.index.Tensor, [x, [torch.tensor([0])]], {}, "indices"),
        (aten.select.int, [x, 0, 1], {}, "dim"), (aten.select.int, [x, 0, 1], {}, "index"),
        (aten.sum.dim_IntList, [x, [0]], {}, "dim"), (aten.sum.dim_IntList, [x, [0]], {}, "keepdim"),
        (aten.view.default, [x, [12]], {}, "size"), (aten.permute.default, [x, [1, 0]], {}, "dims"),
        (aten.mul.Scalar, [x, 2], {}, "other"), (aten.leaky_relu.default, [x, 0.1], {}, "negative_slope"),
        (aten.dropout.default, [x, 0.1, False], {}, "p"), (aten.dropout.default, [x, 0.1, False], {}, "train"),
        (aten._to_copy.default, [x], {}, "dtype"), (aten.gelu.default, [x], {}, "approximate"),
        (aten.full.default, [[2], 1.0], {}, "device"), (aten.full.default, [[2], 1.0], {}, "layout"),
        (aten.clone.default, [x], {}, "memory_format"), (aten.upsample_nearest2d.vec, [m, None, [2.0, 2.0]], {},
                                                         "scale_factors"),
        (aten.split.Tensor, [x, 1], {}, "split_size"), (aten.expand.default, [x, [3, 4]], {}, "size"),
        (aten.embedding.default, [torch.randn(5, 2), torch.tensor([1])], {}, "indices"),
        (aten.where.self, [x > 0, x, x], {}, "other"), (aten.clamp.default, [x, 0.0, 1.0], {}, "min"),
        (aten.arange.start, [0, 4], {}, "end"), (aten.native_layer_norm.default, [x, [4], None, None, 1e-5], {},
                                                  "normalized_shape"),
        (aten.repeat.default, [x, [1, 2]], {}, "repeats"), (aten.to.dtype, [x, torch.float64], {}, "dtype"),
    ]
    counts = {}
    for op, args, kwargs, slot in cases:
        names = [a.name for a in op._schema.arguments]
        pos = names.index(slot)
        for cname, value in cands.items():
            a, k = list(args), dict(kwargs)
            if pos < len(a):
                a[pos] = value
            else:
                k[slot] = value
            refused_by_torch = _binding_refuses(op, a, k)

            def as_node(v):
                if isinstance(v, list):
                    return [node(i) if isinstance(i, torch.Tensor) else i for i in v]
                return node(v) if isinstance(v, torch.Tensor) else v
            values = dict(zip(names, [as_node(v) for v in a]))
            values.update({key: as_node(v) for key, v in k.items()})
            ours = misfit(op, values)
            ours_refuses = ours is not None and ours[0] == slot
            verdict = ("both refuse" if ours_refuses and refused_by_torch else "OVER" if ours_refuses else
                       "under" if refused_by_torch else "both take")
            counts[verdict] = counts.get(verdict, 0) + 1
            if verdict in ("OVER", "under"):
                report(f"{op} {slot}={cname}", verdict, ours)
    report("binding", "summary", counts)


# ---------------------------------------------------------------- pickle
def pickles():
    x = torch.randn(3, 4)
    for name, model in [("lin", Lin()), ("cond", Cond())]:
        for exporter in ("torch", "graphcap", "graphcap-loaded"):
            if exporter == "torch":
                ep = torch.export.export(model, (x,))
            else:
                ep = graphcap.export(model, (x,))
                if exporter.endswith("loaded"):
                    ep = roundtrip(ep)
            for what, fn, run in [
                    ("pickle ep.graph_module", lambda ep=ep: pickle.loads(pickle.dumps(ep.graph_module)), None),
                    ("deepcopy ep.graph_module", lambda ep=ep: copy.deepcopy(ep.graph_module), None),
                    ("deepcopy ep", lambda ep=ep: copy.deepcopy(ep), lambda r: r.module()(x)),
                    ("copy ep", lambda ep=ep: copy.copy(ep), lambda r: r.module()(x)),
                    ("pickle ep", lambda ep=ep: pickle.loads(pickle.dumps(ep)), lambda r: r.module()(x)),
                    ("pickle ep.module()", lambda ep=ep: pickle.loads(pickle.dumps(ep.module())), lambda r: r(x)),
                    ("deepcopy ep.module()", lambda ep=ep: copy.deepcopy(ep.module()), lambda r: r(x))]:
                label = f"{name} {exporter} {what}"
                try:
                    r = fn()
                except Exception as e:
                    report(label, "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0]}")
                    continue
                if run is None:
                    report(label, "ok")
                else:
                    report(label, "=" if same(run(r), ep.module()(x)) else "DIFFERENT")
                    if exporter != "torch" and what == "deepcopy ep":
                        report(label + " then save/load", "=" if same(roundtrip(r).module()(x), ep.module()(x))
                               else "DIFFERENT")


# ---------------------------------------------------------------- versions
def _archive_of_version(entries, version):
    """The entries written as ``graphcap.save`` writes them, under another format version number."""
    from graphcap.serialize import archive
    kept = schema.FORMAT_VERSION
    schema.FORMAT_VERSION = version
    try:
        out = io.BytesIO()
        archive._write_zip(out, entries)
    finally:
        schema.FORMAT_VERSION = kept
    out.seek(0)
    return out


def versions():
    x = torch.randn(3, 4)
    data = _saved(Lin(), (x,))
    entries = read_entries(io.BytesIO(data))
    newer = graphcap.FORMAT_VERSION + 1
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    program["format_version"] = newer
    newer_both = dict(entries, **{schema.PROGRAM_ENTRY: json.dumps(program).encode()})
    cases = [("version entry newer, program.json current", _archive_of_version(entries, newer)),
             ("version entry and program.json newer", _archive_of_version(newer_both, newer)),
             ("version entry current, program.json newer", _archive_of_version(newer_both, graphcap.FORMAT_VERSION)),
             ("an extra member listed in the manifest (extra/notes.txt)",
              _archive_of_version(dict(entries, **{"extra/notes.txt": b"x"}), graphcap.FORMAT_VERSION))]
    for label, f in cases:
        try:
            ep = graphcap.load(f)
            report(label, "LOADED", same(ep.module()(x), graphcap.load(io.BytesIO(data)).module()(x)))
        except GraphcapError as e:
            report(label, "refused", str(e).replace("\n", " | "))
        except Exception as e:
            report(label, "CRASH", f"{type(e).__name__}: {e}")
    golden = os.path.join(HERE, "..", "..", "tests", "golden")
    for name in sorted(os.listdir(golden)):
        if name.endswith(".pt2"):
            try:
                graphcap.load(os.path.join(golden, name), map_location="cpu")
                report(f"golden {name}", "loaded")
            except Exception as e:
                report(f"golden {name}", "FAIL", f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------- cross
def cross(mode, folder):
    os.makedirs(folder, exist_ok=True)
    for name, model, args, dyn, args2 in small_programs():
        path = os.path.join(folder, f"{name}.pt2")
        if mode == "save":
            torch.manual_seed(0)
            ep = graphcap.export(model, args, dynamic_shapes=dyn)
            graphcap.save(ep, path)
            graphcap.save(ep.run_decompositions(), path.replace(".pt2", "-decomposed.pt2"))
            outs = {"a": ep.module()(*args), "b": ep.module()(*args2)}
            torch.save({"args": args, "args2": args2, "outs": outs}, path + ".io")
            report(f"{name} saved on torch {torch.__version__}", "ok")
            continue
        io_ = torch.load(path + ".io", weights_only=False)
        for p, mmap in [(path, False), (path, True), (path.replace(".pt2", "-decomposed.pt2"), False)]:
            label = f"{os.path.basename(p)} loaded{' with mmap' if mmap else ''} on torch {torch.__version__}"
            try:
                ep = graphcap.load(p, mmap=mmap)
            except GraphcapError as e:
                report(label, "refused", str(e).replace("\n", " | "))
                continue
            except Exception as e:
                report(label, "CRASH", f"{type(e).__name__}: {e}")
                traceback.print_exc()
                continue
            ok = (same(ep.module()(*io_["args"]), io_["outs"]["a"])
                  and same(ep.module()(*io_["args2"]), io_["outs"]["b"]))
            report(label, "=" if ok else "DIFFERENT")


if __name__ == "__main__":
    argv = sys.argv[1:]
    section = argv[0] if argv else "all"
    zoo_pattern = argv[argv.index("--zoo") + 1] if "--zoo" in argv else None
    if section == "cross":
        cross(argv[1], argv[2])
    else:
        if section in ("all", "legit"):
            legit(zoo_pattern)
        if section in ("all", "kinds"):
            kinds()
        if section in ("all", "binding"):
            binding()
        if section in ("all", "pickle"):
            pickles()
        if section in ("all", "versions"):
            versions()
