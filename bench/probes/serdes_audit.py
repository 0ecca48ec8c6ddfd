"""Save/load audit: graphcap.save/load against torch.export.save/load and eager.

Each probe exports a small program with graphcap and with torch.export, saves and loads
each with its own functions, then runs the loaded programs at several sizes (out-of-range
ones must be refused) and compares graph text, signature, ranges and node metadata with
the program before saving.  Prints one line per probe:

    name | graphcap: <verdict> | torch: <verdict>

Run: PYTHONPATH=src python bench/probes/serdes_audit.py [name-substring ...]
"""
from __future__ import annotations

import copy
import dataclasses
import io
import sys
import tempfile
import traceback
from collections import namedtuple
from typing import Any, Callable

import torch
import torch.export as te
from torch.export import Dim

import graphcap

# ---------------------------------------------------------------------------- helpers


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_quantized:
            return torch.equal(a.int_repr(), b.int_repr())
        if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            a, b = a.float(), b.float()
        return torch.allclose(a, b, equal_nan=True, atol=1e-5) if a.is_floating_point() or a.is_complex() \
            else torch.equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], torch.nn.Module]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    dynamic_shapes: Any = None
    ok_inputs: list[tuple[tuple[Any, ...], dict[str, Any]]] = dataclasses.field(default_factory=list)
    bad_inputs: list[tuple[tuple[Any, ...], dict[str, Any]]] = dataclasses.field(default_factory=list)
    preserve: tuple[str, ...] = ()
    decompose: bool = False              # run_decompositions before save
    after: Callable[[Any, Any], str] | None = None  # extra check on (original, loaded)


def _meta_summary(ep: Any) -> list[tuple[Any, ...]]:
    out = []
    for n in ep.graph.nodes:
        stack = n.meta.get("nn_module_stack")
        out.append((n.op, n.name, str(n.target), bool(n.meta.get("stack_trace")),
                    tuple((v[0] if isinstance(v, tuple) else v) for v in (stack or {}).values()),
                    repr(n.meta.get("custom")), n.meta.get("torch_fn", (None,))[0] if n.meta.get("torch_fn") else None))
    return out


def _roundtrip(side: str, ep: Any, how: str) -> Any:
    save = graphcap.save if side == "g" else te.save
    load = graphcap.load if side == "g" else te.load
    if how == "bytes":
        buf = io.BytesIO()
        save(ep, buf)
        return load(io.BytesIO(buf.getvalue()))
    with tempfile.NamedTemporaryFile(suffix=".pt2") as f:
        save(ep, f.name)
        return load(f.name)


def _run_side(side: str, p: Probe, how: str = "file") -> str:
    model = p.make()
    pristine = copy.deepcopy(model)
    export = graphcap.export if side == "g" else te.export
    try:
        ep = export(model, p.args, p.kwargs, dynamic_shapes=p.dynamic_shapes,
                    preserve_module_call_signature=p.preserve)
        if p.decompose:
            ep = ep.run_decompositions()
    except Exception as e:
        return f"export fails: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
    try:
        loaded = _roundtrip(side, ep, how)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return f"save/load fails: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    notes = []
    if str(loaded.graph_signature) != str(ep.graph_signature):
        notes.append("signature differs")
    if {str(k): str(v) for k, v in loaded.range_constraints.items()} != \
            {str(k): str(v) for k, v in ep.range_constraints.items()}:
        notes.append(f"ranges differ {dict(ep.range_constraints)} -> {dict(loaded.range_constraints)}")
    if loaded.graph_module.print_readable(print_output=False) != ep.graph_module.print_readable(print_output=False):
        notes.append("graph text differs")
    a, b = _meta_summary(ep), _meta_summary(loaded)
    if a != b:
        diff = [(x, y) for x, y in zip(a, b) if x != y][:1]
        notes.append(f"metadata differs {diff}")
    inputs = [(p.args, p.kwargs)] + p.ok_inputs
    for args, kwargs in inputs:
        try:
            want = copy.deepcopy(pristine)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            got = loaded.module()(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"run fails at {_sizes(args, kwargs)}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            continue
        if not _same(want, got):
            notes.append(f"WRONG at {_sizes(args, kwargs)}")
    for args, kwargs in p.bad_inputs:
        try:
            loaded.module()(*args, **kwargs)
            notes.append(f"accepts out-of-range {_sizes(args, kwargs)}")
        except Exception:
            pass
    if p.after is not None:
        try:
            extra = p.after(ep, loaded)
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            extra = f"after-check fails: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
        if extra:
            notes.append(extra)
    return "=" if not notes else "; ".join(notes)


def _sizes(args: Any, kwargs: Any) -> str:
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return ",".join(str(tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in leaves)


# ---------------------------------------------------------------------------- programs


class Fn(torch.nn.Module):
    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f

    def forward(self, *a: Any, **k: Any) -> Any:
        return self.f(*a, **k)


def fn(f: Callable[..., Any]) -> Callable[[], torch.nn.Module]:
    return lambda: Fn(f)


class MatMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x @ y).relu()


class DerivedPad(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, y], 0).sum(0) + x[1:].mean(0)


class ItemBound(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k].sum(0) * 2


class NonzeroCount(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        idx = torch.nonzero(x > 0)
        return idx.shape[0] * 1.0 + x.sum(), idx


class CondClosure(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("b", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.randn(4) * 0 + 3.0

        def t(x: torch.Tensor) -> torch.Tensor:
            def inner_t(y: torch.Tensor) -> torch.Tensor:
                return y * self.w + c

            def inner_f(y: torch.Tensor) -> torch.Tensor:
                return y - self.b

            return torch.cond(y_pos(x), inner_t, inner_f, (x,))

        def f(x: torch.Tensor) -> torch.Tensor:
            return x.cos() + self.b

        return torch.cond(x.shape[0] > 3, t, f, (x,))


def y_pos(x: torch.Tensor) -> torch.Tensor:
    return x.sum() > 0


class WhileLoop(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("step", torch.full((3,), 0.5))

    def forward(self, it: torch.Tensor, x: torch.Tensor) -> Any:
        def cond_fn(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return i < 5

        def body_fn(i: torch.Tensor, x: torch.Tensor) -> Any:
            return i + 1, x + self.step

        return torch._higher_order_ops.while_loop(cond_fn, body_fn, (it, x))


class MapScan(torch.nn.Module):
    def forward(self, xs: torch.Tensor, y: torch.Tensor) -> Any:
        from torch._higher_order_ops.map import map as hop_map
        from torch._higher_order_ops.scan import scan

        m = hop_map(lambda x, y: x * y + 1, xs, y)

        def step(carry: torch.Tensor, x: torch.Tensor) -> Any:
            nc = carry + x * y
            return nc, nc.sin()

        c, ys = scan(step, torch.zeros_like(xs[0]), xs)
        return m, c, ys


class AssocScan(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.associative_scan import associative_scan
        return associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")


class Buffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.lin2 = torch.nn.Linear(4, 4)
        self.lin2.weight = self.lin.weight           # tied
        self.register_buffer("persist", torch.arange(4.0))
        self.register_buffer("nonpersist", torch.full((4,), 2.0), persistent=False)
        self.const = torch.tensor([1.0, -1.0, 2.0, 0.5])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.lin(x)) * self.persist + self.nonpersist - self.const


class Mutations(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("run", torch.zeros(3))

    def forward(self, x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        self.run.mul_(0.5).add_(x.mean(0))
        acc.add_(x.sum(0))
        return x * self.count


def _mutation_check(ep: Any, loaded: Any) -> str:
    m1, m2 = ep.module(), loaded.module()
    x = torch.randn(2, 3)
    a1, a2 = torch.zeros(3), torch.zeros(3)
    for _ in range(3):
        m1(x, a1)
        m2(x, a2)
    ok = torch.equal(a1, a2) and all(torch.equal(b1, b2) for b1, b2 in zip(m1.buffers(), m2.buffers()))
    return "" if ok else "mutation state differs"


Pair = namedtuple("Pair", ["first", "second"])


@dataclasses.dataclass
class Out:
    value: torch.Tensor
    scale: float


torch.export.register_dataclass(Out, serialized_type_name="serdes_audit.Out")


class Outputs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return {"n": x.shape[0], "f": 1.5, "b": True, "none": None,
                "nest": [Pair(x + 1, (x * 2, None)), (x.shape[0] * 2,)],
                "dc": Out(x - 1, 0.25)}


class KwOnly(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, scale: torch.Tensor, bias: float = 1.0,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        y = x * scale + bias
        if mask is not None:
            y = y.masked_fill(mask, 0)
        return y


torch.library.define("serdes_audit::twice", "(Tensor x) -> Tensor")


@torch.library.impl("serdes_audit::twice", "CompositeExplicitAutograd")
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.register_fake("serdes_audit::twice")
def _twice_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("serdes_audit::rows_above", mutates_args=())
def rows_above(x: torch.Tensor, t: float) -> torch.Tensor:
    return x[x.sum(1) > t]


@rows_above.register_fake
def _rows_above_fake(x: torch.Tensor, t: float) -> torch.Tensor:
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(n, x.shape[1])


class Custom(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.ops.serdes_audit.twice(x), rows_above(x, 0.0).shape[0] + 0 * x.sum()


class Dtypes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c", torch.randn(3, 4, dtype=torch.complex64))
        self.register_buffer("bb", torch.tensor([True, False, True, True]))
        self.register_buffer("bf", torch.randn(4, dtype=torch.bfloat16))
        self.register_buffer("f8", torch.randn(4).to(torch.float8_e4m3fn))
        self.register_buffer("nc", torch.randn(4, 3).t())                 # non-contiguous
        self.register_buffer("cl", torch.randn(1, 3, 2, 2).to(memory_format=torch.channels_last))
        self.register_buffer("empty", torch.zeros(0, 4))

    def forward(self, x: torch.Tensor) -> Any:
        return ((x * self.c).abs() + self.bb + self.bf.float() + self.f8.float() + self.nc + self.empty.sum(0),
                self.cl * 2, x.to(torch.bfloat16) * 2)


class Quant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("q", torch.quantize_per_tensor(torch.randn(4), 0.1, 3, torch.qint8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.q.dequantize()


class SymMath(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        n = x.shape[0]
        a = torch.sym_float(n) / 3
        k = torch.sym_int(a) + round(a)
        m = torch.sym_max(n, 4) + torch.sym_min(n, 2)
        return x.new_zeros(n // 2 + n % 3 + 1), x.new_ones(k + 1), x.new_ones(m), a * 2.0


class SymMathPiecewise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        n = x.shape[0]
        return x[: torch.sym_max(n - 3, 0)].sum() + x.new_ones(torch.sym_min(n, 5)).sum(), x.new_ones((n + 1) % 4)


class Child(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor, *, gain: float = 2.0) -> torch.Tensor:
        self.seen.add_(x.sum(0))
        return self.lin(x) * gain


class Parent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = Child()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x, gain=3.0) + self.child(x.relu(), gain=3.0)


def _unflatten_check(ep: Any, loaded: Any) -> str:
    uf = graphcap.unflatten(loaded) if hasattr(loaded, "_graphcap") or type(loaded).__module__.startswith("graphcap") \
        else te.unflatten(loaded)
    ref = Parent()
    ref.load_state_dict(ep.state_dict)
    x = torch.randn(4, 3)
    want, got = ref(x), uf(x)
    if not torch.allclose(want, got):
        return "unflatten WRONG"
    if not torch.allclose(ref.child.seen, uf.child.seen):
        return "unflatten buffer WRONG"
    return ""


def _decomp_after_load(ep: Any, loaded: Any) -> str:
    d = loaded.run_decompositions()
    x = torch.randn(7, 4)
    want = ep.module()(x)
    got = d.module()(x)
    if not _same(want, got):
        return "decompose-after-load WRONG"
    for n in d.graph.nodes:
        if n.op == "call_function" and not n.meta.get("stack_trace"):
            return f"decompose-after-load lost stack_trace on {n.name}"
    return ""


def _reexport_resave(ep: Any, loaded: Any) -> str:
    g = type(loaded).__module__.startswith("graphcap")
    export = graphcap.export if g else te.export
    x = torch.randn(6, 4)
    spec = ({0: Dim("b", min=2, max=10)},)
    ep2 = export(loaded.module(), (x,), dynamic_shapes=spec)
    again = _roundtrip("g" if g else "t", ep2, "bytes")
    got = again.module()(torch.randn(3, 4))
    return "" if got.shape == (3, 4) else "re-export WRONG"


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.a(x)).softmax(-1)


def _custom_meta_model() -> torch.nn.Module:
    return Lin()


def _custom_meta_check(ep: Any, loaded: Any) -> str:
    return ""


def _load_variants(ep: Any, loaded: Any) -> str:
    g = type(loaded).__module__.startswith("graphcap")
    save = graphcap.save if g else te.save
    load = graphcap.load if g else te.load
    buf = io.BytesIO()
    save(ep, buf)
    data = buf.getvalue()
    notes = []
    # file-like, read from the middle of a stream
    s = io.BytesIO(b"xxxx" + data)
    s.seek(4)
    try:
        load(s)
    except Exception as e:
        notes.append(f"offset stream fails: {type(e).__name__}")
    # truncated / damaged files
    for cut in (len(data) // 2, len(data) - 10, 100):
        try:
            load(io.BytesIO(data[:cut]))
            notes.append(f"truncated at {cut} LOADS")
        except Exception:
            pass
    try:
        if g:
            loaded_m = load(io.BytesIO(data), map_location="cpu")
            loaded_m.module()(torch.randn(7, 4))
    except Exception as e:
        notes.append(f"map_location fails: {type(e).__name__}: {e}")
    return "; ".join(notes)


def _meta_after(ep: Any, loaded: Any) -> str:
    for a, b in zip(ep.graph.nodes, loaded.graph.nodes):
        for k in ("stack_trace", "nn_module_stack", "custom", "source_fn_stack", "torch_fn"):
            if repr(a.meta.get(k)) != repr(b.meta.get(k)):
                return f"{k} differs on {a.name}: {a.meta.get(k)!r:.80} vs {b.meta.get(k)!r:.80}"
    if repr(ep.graph_module.meta.get("custom")) != repr(loaded.graph_module.meta.get("custom")):
        return "gm custom differs"
    return ""


class Annotated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.fx.traceback.annotate({"stage": 1, "tags": ["x", "y"]}):
            y = self.a(x)
        return y.relu()


def _export_annotated(side: str) -> Any:
    with torch.fx.traceback.preserve_node_meta():
        export = graphcap.export if side == "g" else te.export
        return export(Annotated(), (torch.randn(3, 4),))


class Frozen(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.lin.bias.requires_grad_(False)
        self.register_buffer("bview", self.lin.weight.detach()[0])     # a buffer viewing a parameter
        self.empty = torch.nn.Parameter(torch.zeros(0, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.bview + self.empty.sum()


def _frozen_check(ep: Any, loaded: Any) -> str:
    notes = []
    for k, v in ep.state_dict.items():
        w = loaded.state_dict[k]
        if type(v) is not type(w) or v.requires_grad != w.requires_grad:
            notes.append(f"{k}: {type(v).__name__}/{v.requires_grad} -> {type(w).__name__}/{w.requires_grad}")
    m = loaded.module()
    for k, v in ep.module().named_parameters():
        if dict(m.named_parameters())[k].requires_grad != v.requires_grad:
            notes.append(f"module() {k} requires_grad differs")
    return "; ".join(notes)


torch.library.define("serdes_audit::scale_", "(Tensor(a!) x, float s) -> ()")


@torch.library.impl("serdes_audit::scale_", "CompositeExplicitAutograd")
def _scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@torch.library.register_fake("serdes_audit::scale_")
def _scale_fake(x: torch.Tensor, s: float) -> None:
    return None


class MutatingOp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("st", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.serdes_audit.scale_(self.st, 2.0)
        y = x.clone()
        torch.ops.serdes_audit.scale_(y, 3.0)
        return y + self.st


class GradRegions(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = self.lin(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.lin(y)
        return y + z.float()


class Aliases(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> Any:
        v = x.view(-1)
        return x, v, self.p, v, x.t()


class IntInput(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int, alpha: float) -> torch.Tensor:
        return x.new_ones(n) * alpha + x.sum()


class CondUnbacked(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        def t(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            k = n.item()
            torch._check(k >= 0)
            torch._check(k <= 8)
            return x.new_zeros(k).sum() + x
        return torch.cond(x.sum() > 0, t, lambda x, n: x - 1, (x, n))


class Sparse(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("s", torch.eye(3).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.s, x)


class NonpersistMut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(3), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.add_(x)
        return self.cache * 2


def _mutation_free_check(ep: Any, loaded: Any) -> str:
    m1, m2 = ep.module(), loaded.module()
    for _ in range(3):
        a, b_ = m1(torch.ones(3)), m2(torch.ones(3))
    return "" if torch.equal(a, b_) else f"state after 3 calls differs {a} {b_}"


def _example_check(ep: Any, loaded: Any) -> str:
    if ep.example_inputs is None:
        return ""
    if loaded.example_inputs is None or not _same(ep.example_inputs, loaded.example_inputs):
        return "example_inputs differ"
    if str(ep.module_call_graph) != str(loaded.module_call_graph):
        return "module_call_graph differs"
    if ep.verifiers != loaded.verifiers if hasattr(ep, "verifiers") else False:
        return "verifiers differ"
    return ""


def _save_twice(ep: Any, loaded: Any) -> str:
    g = type(loaded).__module__.startswith("graphcap")
    if not g:
        return ""
    a, b2 = io.BytesIO(), io.BytesIO()
    graphcap.save(ep, a)
    graphcap.save(loaded, b2)
    again = graphcap.load(io.BytesIO(b2.getvalue()))
    import pathlib
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "m.pt2"
        graphcap.save(loaded, path, extra_files={"n.txt": "hi"})
        extra: dict[str, Any] = {"n.txt": ""}
        graphcap.load(path, extra_files=extra)
        if extra["n.txt"] not in ("hi", b"hi"):
            return f"extra_files {extra}"
        with open(path, "rb") as fh:
            graphcap.load(fh)
    if a.getvalue() != b2.getvalue():
        return "save(load(f)) bytes differ from save(ep)"
    return "" if str(again.graph) == str(ep.graph) else "second round graph differs"


class Odd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        big = torch.arange(10.0)
        self.register_buffer("big", big)
        self.register_buffer("tail", big[3:7])                        # storage offset, aliasing
        self.register_buffer("expanded", torch.ones(1).expand(4))     # stride 0
        self.p = torch.nn.Parameter(torch.randn(4, 3).t())            # non-contiguous parameter
        self.c = torch.tensor([float("inf"), -0.0, float("nan"), 1e-300])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.p) + self.tail + self.expanded + self.big[:4] + torch.nan_to_num(self.c)


def _odd_check(ep: Any, loaded: Any) -> str:
    notes = []
    for k, v in {**ep.state_dict, **ep.constants}.items():
        w = {**loaded.state_dict, **loaded.constants}[k]
        if v.stride() != w.stride() or v.storage_offset() != w.storage_offset() or \
                not torch.equal(torch.nan_to_num(v), torch.nan_to_num(w)) or \
                torch.signbit(v).tolist() != torch.signbit(w).tolist():
            notes.append(f"{k} stride/offset/values differ {v.stride()} {w.stride()}")
    sd = loaded.state_dict
    if sd["tail"].untyped_storage().data_ptr() != sd["big"].untyped_storage().data_ptr():
        notes.append("tail/big aliasing lost")
    return "; ".join(notes)


class ScalarArgs(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> Any:
        a = x.masked_fill(mask, float("-inf")).softmax(-1)
        b_ = x.clamp(min=-float("inf"), max=1e30)
        c = torch.full((2,), float("nan"))
        d = (x * (1 + 2j)).abs()
        e = x + (2 ** 62)
        f = torch.nn.functional.gelu(x, approximate="tanh")
        g = torch.einsum("ij,kj->ik", x, x)
        h = x.to(torch.float64, memory_format=torch.contiguous_format)
        i = x[None, :, None]
        return a, b_, c, d, e.double(), f, g, h, i


class SizeOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x.shape, x.shape[0] > 2, "tag", x.sum()


class DictInputs(torch.nn.Module):
    def forward(self, d: dict[int, Any], xs: list[torch.Tensor], none: None = None) -> torch.Tensor:
        return d[1] * d[2]["a"] + xs[0] + xs[1]


class Named(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleDict({"a-b": torch.nn.Linear(3, 3), "0": torch.nn.Linear(3, 3)})
        self.seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq(self.blocks["0"](self.blocks["a-b"](x)))


class InputViewMut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x[0].add_(1)
        x.transpose(0, 1)[1].mul_(2)
        return x.sum(0)


def _view_mut_check(ep: Any, loaded: Any) -> str:
    x1 = torch.arange(6.0).reshape(2, 3)
    x2 = x1.clone()
    ep.module()(x1)
    loaded.module()(x2)
    return "" if torch.equal(x1, x2) else "input mutation differs"


class Unbounded(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 3:
            return x[:-3] * 2
        return x


class Effects(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.aten._print("probe")
        y = x * 2
        torch.ops.aten._print("again")
        return y


class CondShapes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cond(x.sum() > 0, lambda x: x[:2] * 2, lambda x: x[1:] - 1, (x,))
        return out.sum(0)


class WhileDyn(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        def c(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return i < x.shape[0]

        def body(i: torch.Tensor, acc: torch.Tensor) -> Any:
            return i + 1, acc + x[0] * 0 + x.sum(0)

        return torch._higher_order_ops.while_loop(c, body, (torch.tensor(0), torch.zeros(x.shape[1])))


class Region(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        @torch.compiler.nested_compile_region
        def block(y: torch.Tensor) -> torch.Tensor:
            return self.lin(y).relu()
        return block(block(x))


class Flex(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        def score(s: torch.Tensor, b: Any, h: Any, qi: Any, ki: Any) -> torch.Tensor:
            return s + self.bias[ki]
        return flex_attention(q, k, v, score_mod=score)


class Ckpt(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(lambda y: self.lin(y).sin(), x, use_reentrant=False)


def _messages_check(ep: Any, loaded: Any) -> str:
    notes = []
    for bad in (torch.randn(1, 4), torch.randn(3, 5), torch.randn(3, 4, dtype=torch.float64)):
        msgs = []
        for prog in (ep, loaded):
            try:
                prog.module()(bad)
                msgs.append("accepted")
            except Exception as e:
                msgs.append(f"{type(e).__name__}: {e}")
        if msgs[0] != msgs[1]:
            notes.append(f"refusal differs: {msgs[0][:80]!r} vs {msgs[1][:80]!r}")
        if msgs[1] == "accepted":
            notes.append("accepted a bad input")
    return "; ".join(notes)


class RareDtypes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c128", torch.polar(torch.ones(4, dtype=torch.float64), torch.arange(4.0).double()))
        self.register_buffer("e8m0", torch.tensor([0.5, 1.0, 2.0, 4.0]).to(torch.float8_e8m0fnu))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() * self.c128).abs() + self.e8m0.double()


class PathErrors(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _path_errors(ep: Any, loaded: Any) -> str:
    g = type(loaded).__module__.startswith("graphcap")
    save = graphcap.save if g else te.save
    with tempfile.TemporaryDirectory() as d:
        notes = []
        for target in (f"{d}/missing/m.pt2", d):
            try:
                save(ep, target)
                notes.append(f"saved to {target}!")
            except Exception as e:
                if target not in str(e).replace("'", ""):
                    notes.append(f"error does not name the path: {type(e).__name__}: {str(e)[:80]}")
        return "; ".join(notes)


b = Dim("b", min=2, max=12)

PROBES = [
    Probe("derived dims 2*b / b+1", lambda: DerivedPad(), (torch.randn(4, 3), torch.randn(8, 3)),
          dynamic_shapes=({0: b}, {0: 2 * b}),
          ok_inputs=[((torch.randn(2, 3), torch.randn(4, 3)), {}), ((torch.randn(12, 3), torch.randn(24, 3)), {})],
          bad_inputs=[((torch.randn(1, 3), torch.randn(2, 3)), {}), ((torch.randn(4, 3), torch.randn(9, 3)), {}),
                      ((torch.randn(13, 3), torch.randn(26, 3)), {})]),
    Probe("Dim.AUTO + DYNAMIC", lambda: MatMul(), (torch.randn(5, 3), torch.randn(3, 6)),
          dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO}, {0: Dim.AUTO, 1: Dim.DYNAMIC}),
          ok_inputs=[((torch.randn(0, 2), torch.randn(2, 1)), {}), ((torch.randn(1, 1), torch.randn(1, 1)), {})],
          bad_inputs=[((torch.randn(5, 3), torch.randn(4, 6)), {})]),
    Probe(".item() + torch._check", lambda: ItemBound(), (torch.randn(6, 2), torch.tensor(3)),
          dynamic_shapes=({0: Dim("n", min=1, max=20)}, None),
          ok_inputs=[((torch.randn(1, 2), torch.tensor(0)), {}), ((torch.randn(20, 2), torch.tensor(20)), {})],
          bad_inputs=[((torch.randn(6, 2), torch.tensor(7)), {}), ((torch.randn(6, 2), torch.tensor(-1)), {})]),
    Probe("nonzero count", lambda: NonzeroCount(), (torch.randn(8),), dynamic_shapes=({0: Dim("n", max=64)},),
          ok_inputs=[((torch.randn(64),), {}), ((torch.randn(2),), {}), ((-torch.ones(5),), {})]),
    Probe("nested cond closing over param/buffer/const", lambda: CondClosure(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", min=1, max=9)},),
          ok_inputs=[((torch.randn(1, 4),), {}), ((-torch.ones(9, 4),), {}), ((torch.ones(3, 4),), {})],
          bad_inputs=[((torch.randn(10, 4),), {})]),
    Probe("while_loop with buffer", lambda: WhileLoop(), (torch.tensor(0), torch.randn(3)),
          ok_inputs=[((torch.tensor(3), torch.zeros(3)), {}), ((torch.tensor(7), torch.zeros(3)), {})]),
    Probe("map + scan closing over input", lambda: MapScan(), (torch.randn(4, 3), torch.randn(3)),
          dynamic_shapes=({0: Dim("n", min=1, max=8)}, None),
          ok_inputs=[((torch.randn(1, 3), torch.randn(3)), {}), ((torch.randn(8, 3), torch.randn(3)), {})]),
    Probe("associative_scan", lambda: AssocScan(), (torch.randn(5, 2),)),
    Probe("params/buffers/non-persistent/const/tied", lambda: Buffers(), (torch.randn(3, 4),),
          dynamic_shapes=({0: Dim("n", max=16)},),
          ok_inputs=[((torch.randn(0, 4),), {}), ((torch.randn(1, 4),), {}), ((torch.randn(16, 4),), {})],
          after=lambda ep, ld: "" if (ld.state_dict["lin.weight"].data_ptr() == ld.state_dict["lin2.weight"].data_ptr()
                                      if "lin2.weight" in ld.state_dict else True) and
          set(ld.constants) == set(ep.constants) else f"state {set(ld.state_dict)} {set(ld.constants)}"),
    Probe("buffer + input mutation", lambda: Mutations(), (torch.randn(2, 3), torch.zeros(3)),
          after=_mutation_check),
    Probe("buffer + input mutation, decomposed", lambda: Mutations(), (torch.randn(2, 3), torch.zeros(3)),
          decompose=True, after=_mutation_check),
    Probe("outputs: int/float/bool/None/namedtuple/dataclass", lambda: Outputs(), (torch.randn(4, 2),),
          dynamic_shapes=({0: Dim("n", max=10)},),
          ok_inputs=[((torch.randn(0, 2),), {}), ((torch.randn(10, 2),), {})]),
    Probe("kwargs-only + defaults + None", lambda: KwOnly(), (torch.randn(3, 2),),
          {"scale": torch.randn(2), "mask": torch.tensor([True, False])},
          ok_inputs=[((torch.randn(3, 2),), {"scale": torch.ones(2), "mask": torch.tensor([False, True])})],
          bad_inputs=[((torch.randn(3, 2),), {"scale": torch.ones(2)})]),
    Probe("custom ops (fake kernel, new_dynamic_size)", lambda: Custom(), (torch.randn(5, 3),),
          dynamic_shapes=({0: Dim("n", max=30)},),
          ok_inputs=[((torch.randn(30, 3),), {}), ((-torch.ones(2, 3),), {})]),
    Probe("dtypes complex/bool/bf16/fp8/strided/channels_last/empty", lambda: Dtypes(),
          (torch.randn(3, 4),), after=lambda ep, ld: "" if all(
              (ld.state_dict[k].stride(), ld.state_dict[k].dtype) == (ep.state_dict[k].stride(), ep.state_dict[k].dtype)
              for k in ep.state_dict) else "strides/dtypes differ"),
    Probe("quantized buffer", lambda: Quant(), (torch.randn(4),)),
    Probe("sym_float/sym_int/round/Min/Max/FloorDiv/Mod", lambda: SymMath(), (torch.randn(7),),
          dynamic_shapes=({0: Dim("n", min=1, max=40)},),
          ok_inputs=[((torch.randn(1),), {}), ((torch.randn(40),), {}), ((torch.randn(3),), {})],
          bad_inputs=[((torch.randn(41),), {})]),
    Probe("Piecewise / sym_ite", lambda: SymMathPiecewise(), (torch.randn(7),),
          dynamic_shapes=({0: Dim("n", min=0, max=40)},),
          ok_inputs=[((torch.randn(0),), {}), ((torch.randn(1),), {}), ((torch.randn(40),), {}),
                     ((torch.randn(4),), {})]),
    Probe("preserve_module_call_signature + unflatten after load", lambda: Parent(), (torch.randn(4, 3),),
          preserve=("child",), after=_unflatten_check),
    Probe("run_decompositions after load", lambda: Lin(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", max=20)},), after=_decomp_after_load),
    Probe("run_decompositions before save", lambda: Lin(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", max=20)},), decompose=True,
          ok_inputs=[((torch.randn(0, 4),), {}), ((torch.randn(20, 4),), {})]),
    Probe("re-export of loaded module, saved again", lambda: Lin(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", min=2, max=20)},), after=_reexport_resave),
    Probe("metadata after load", lambda: Lin(), (torch.randn(5, 4),), after=_meta_after),
    Probe("frozen param, buffer viewing a param, empty param", lambda: Frozen(), (torch.randn(2, 3),),
          after=_frozen_check),
    Probe("custom op mutating buffer and input (auto_functionalized)", lambda: MutatingOp(), (torch.randn(3),),
          after=_example_check),
    Probe("custom op mutating, decomposed", lambda: MutatingOp(), (torch.randn(3),), decompose=True),
    Probe("no_grad + autocast regions", lambda: GradRegions(), (torch.randn(2, 3),),
          dynamic_shapes=({0: Dim("n", max=8)},), ok_inputs=[((torch.randn(8, 3),), {})]),
    Probe("outputs aliasing inputs/params", lambda: Aliases(), (torch.randn(2, 3),), after=_example_check),
    Probe("int/float inputs specialized", lambda: IntInput(), (torch.randn(2), 3, 0.5),
          bad_inputs=[((torch.randn(2), 4, 0.5), {}), ((torch.randn(2), 3, 0.25), {})]),
    Probe("int input dynamic", lambda: IntInput(), (torch.randn(2), 3, 0.5),
          dynamic_shapes=(None, Dim.DYNAMIC, None),
          ok_inputs=[((torch.randn(2), 5, 0.5), {}), ((torch.randn(2), 0, 0.5), {})]),
    Probe("cond branch with unbacked item", lambda: CondUnbacked(), (torch.randn(3), torch.tensor(4)),
          ok_inputs=[((-torch.ones(3), torch.tensor(2)), {}), ((torch.ones(3), torch.tensor(8)), {})],
          bad_inputs=[((torch.ones(3), torch.tensor(9)), {})]),
    Probe("sparse COO buffer", lambda: Sparse(), (torch.randn(3, 2),)),
    Probe("non-persistent buffer mutation", lambda: NonpersistMut(), (torch.randn(3),), after=_mutation_free_check),
    Probe("save(load()) again, pathlib, open file, extra_files", lambda: Lin(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", max=20)},), after=_save_twice),
    Probe("buffer views/offsets/stride 0, strided param, inf/nan/-0 constants", lambda: Odd(), (torch.randn(2, 3),),
          after=_odd_check),
    Probe("graph args: -inf/nan/complex/2**62/strings/dtype/memory_format/None index", lambda: ScalarArgs(),
          (torch.randn(2, 3), torch.tensor([[True, False, False], [False, True, False]]))),
    Probe("outputs torch.Size / SymBool / str", lambda: SizeOutputs(), (torch.randn(4, 2),),
          dynamic_shapes=({0: Dim("n", max=9)},), ok_inputs=[((torch.randn(1, 2),), {}), ((torch.randn(9, 2),), {})]),
    Probe("dict with int keys / list / None inputs", lambda: DictInputs(),
          ({1: torch.randn(3), 2: {"a": torch.randn(3)}}, [torch.randn(3), torch.randn(3)])),
    Probe("ModuleDict odd keys + Sequential", lambda: Named(), (torch.randn(2, 3),), after=_meta_after),
    Probe("input view mutation", lambda: InputViewMut(), (torch.randn(2, 3),), after=_view_mut_check),
    Probe("guard-narrowed unbounded range (Dim.AUTO)", lambda: Unbounded(), (torch.randn(6, 2),),
          dynamic_shapes=({0: Dim.AUTO},), ok_inputs=[((torch.randn(4, 2),), {}), ((torch.randn(100, 2),), {})],
          bad_inputs=[((torch.randn(3, 2),), {})]),
    Probe("effectful op (_print tokens)", lambda: Effects(), (torch.randn(3),)),
    Probe("effectful op, decomposed", lambda: Effects(), (torch.randn(3),), decompose=True),
    Probe("cond with branch-dependent output size", lambda: CondShapes(), (torch.randn(4, 2),),
          ok_inputs=[((-torch.ones(4, 2),), {})]),
    Probe("while_loop bounded by dynamic size", lambda: WhileDyn(), (torch.randn(4, 2),),
          dynamic_shapes=({0: Dim("n", min=1, max=10)},), ok_inputs=[((torch.randn(1, 2),), {}),
                                                                   ((torch.randn(10, 2),), {})]),
    Probe("nested_compile_region (invoke_subgraph)", lambda: Region(), (torch.randn(2, 3),),
          dynamic_shapes=({0: Dim("n", max=8)},), ok_inputs=[((torch.randn(8, 3),), {})]),
    Probe("flex_attention score_mod closing over a parameter", lambda: Flex(),
          (torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4))),
    Probe("activation checkpoint", lambda: Ckpt(), (torch.randn(2, 3),)),
    Probe("refusal messages same before and after load; Dim min only", lambda: Lin(), (torch.randn(3, 4),),
          dynamic_shapes=({0: Dim("n", min=2)},), ok_inputs=[((torch.randn(2, 4),), {}), ((torch.randn(300, 4),), {})],
          after=_messages_check),
    Probe("complex128 / float8_e8m0fnu buffers", lambda: RareDtypes(), (torch.randn(4),)),
    Probe("save to a missing folder / a folder", lambda: PathErrors(), (torch.randn(2),), after=_path_errors),
    Probe("bytes / offset stream / truncated / map_location", lambda: Lin(), (torch.randn(5, 4),),
          dynamic_shapes=({0: Dim("n", max=20)},), after=_load_variants),
]


def _annotated_row() -> tuple[str, str]:
    out = []
    for side in ("g", "t"):
        try:
            ep = _export_annotated(side)
            ld = _roundtrip(side, ep, "bytes")
            out.append(_meta_after(ep, ld) or "=")
        except Exception as e:
            out.append(f"fails: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    return out[0], out[1]


def main() -> None:
    want = [a for a in sys.argv[1:] if not a.startswith("-")]
    for p in PROBES:
        if want and not any(w in p.name for w in want):
            continue
        torch.manual_seed(0)
        g = _run_side("g", p)
        torch.manual_seed(0)
        t = _run_side("t", p) if "--no-torch" not in sys.argv else "-"
        print(f"{p.name} | graphcap: {g} | torch: {t}", flush=True)
    if not want or any(w in "annotate custom meta" for w in want):
        g, t = _annotated_row()
        print(f"annotate() custom metadata | graphcap: {g} | torch: {t}", flush=True)


if __name__ == "__main__":
    main()
