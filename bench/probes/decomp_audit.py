"""Audit of run_decompositions and the re-export of module(): graphcap vs torch.export vs eager.

Run: PYTHONPATH=src python bench/probes/decomp_audit.py [name ...]

Each probe exports a small model with graphcap and with torch.export, decomposes (with the
probe's table), and compares: the operators left (sorted names), eager's numbers at several
sizes, and a few signature / metadata facts. One line per probe and side:
``= `` equal to eager, ``WRONG`` a number differs, ``refuses`` module() refused before computing,
``ERR`` export or decomposition raised.
"""
from __future__ import annotations

import copy
import sys
import traceback
import warnings

import torch
from torch import nn
from torch.export import Dim

import graphcap

warnings.filterwarnings("ignore")
torch.manual_seed(0)
aten = torch.ops.aten

PROBES = []


def probe(fn):
    PROBES.append(fn)
    return fn


def ops_of(ep):
    out = set()
    for m in ep.graph_module.modules():
        if isinstance(m, torch.fx.GraphModule):
            for n in m.graph.nodes:
                if n.op == "call_function":
                    out.add(getattr(n.target, "__name__", str(n.target)) if not hasattr(n.target, "name")
                            else n.target.name())
    return out


def same(a, b):
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not torch.allclose(x.double() if not x.is_complex() else x, y.double() if not y.is_complex() else y,
                                  atol=1e-5, rtol=1e-4, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def run_side(export, model, args, kwargs, spec, table, sizes, strict, post=None, reexport=False):
    """Export, decompose, run at each input set; return (ops, verdicts, ep)."""
    m = copy.deepcopy(model)
    try:
        ep = export(m, args, kwargs or {}, dynamic_shapes=spec, strict=strict)
        if reexport:
            ep = export(ep.module(), args, kwargs or {}, dynamic_shapes=spec, strict=strict)
        dep = ep.run_decompositions(table) if table is not None else ep.run_decompositions()
        if post is not None:
            dep = post(dep, export)
    except Exception as e:
        return None, f"ERR {type(e).__name__}: {str(e).splitlines()[0][:110]}", None
    verdicts = []
    for inp in sizes:
        a, k = inp if isinstance(inp, tuple) and len(inp) == 2 and isinstance(inp[1], dict) else (inp, {})
        e_model = copy.deepcopy(model)
        p_mod = dep.module()
        ea = copy.deepcopy(a)
        pa = copy.deepcopy(a)
        try:
            want = e_model(*ea, **k)
        except Exception:
            want = "raises"
        try:
            got = p_mod(*pa, **k)
        except Exception as e:
            verdicts.append("=" if want == "raises" else f"refuses({type(e).__name__})")
            continue
        if want == "raises":
            verdicts.append("runs-where-eager-raises")
            continue
        ok = same(got, want) and same(pa, ea)
        bufs_ok = same([b for _, b in sorted(p_mod.named_buffers())], [b for _, b in sorted(e_model.named_buffers())]) \
            if any(True for _ in e_model.buffers()) else True
        verdicts.append("=" if ok and bufs_ok else ("WRONG" if not ok else "WRONG-buffers"))
    return ops_of(dep), " ".join(verdicts), dep


def compare(name, model, args, sizes, spec=None, table=None, kwargs=None, strict=False, post=None,
            reexport=False, extra=None):
    def tab():
        return table() if callable(table) else table
    g_ops, g_v, g_ep = run_side(graphcap.export, model, args, kwargs, spec, tab(), sizes, strict, post, reexport)
    t_ops, t_v, t_ep = run_side(torch.export.export, model, args, kwargs, spec,
                                tab() if not callable(table) else table(torch=True) if _takes_torch(table) else tab(),
                                sizes, strict, post, reexport)
    diff = ""
    if g_ops is not None and t_ops is not None and g_ops != t_ops:
        diff = f" ops g-t={sorted(g_ops - t_ops)} t-g={sorted(t_ops - g_ops)}"
    more = ""
    if extra is not None and g_ep is not None:
        try:
            more = " | " + extra(g_ep, t_ep)
        except Exception as e:
            more = f" | extra ERR {type(e).__name__}: {e}"[:200]
    print(f"{name:38s} graphcap: {g_v:40s} torch: {t_v:40s}{diff}{more}", flush=True)


def _takes_torch(fn):
    import inspect
    try:
        return "torch" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def R(*shape, dtype=torch.float32):
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(*shape, dtype=dtype)
    return torch.randint(0, 5, shape, dtype=dtype)


# ---------------------------------------------------------------- tables
class LinearConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x, img):
        return self.lin(x).relu(), self.conv(img).sigmoid()


def lc_args(b=2):
    return (R(b, 4), R(b, 2, 5, 5))


@probe
def default_table():
    compare("default table", LinearConv(), lc_args(), [lc_args(), lc_args(1), lc_args(0), lc_args(7)],
            spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}))


@probe
def empty_table():
    compare("empty table {}", LinearConv(), lc_args(), [lc_args(), lc_args(3)], table={})


def _table_keep_conv(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    del t[aten.conv2d.default]
    return t


def torch_default():
    import torch as _t
    return _t.export.default_decompositions()


@probe
def table_keep_conv():
    compare("default minus conv2d (kept)", LinearConv(), lc_args(), [lc_args()], table=_table_keep_conv)


def _table_custom_relu(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t[aten.relu.default] = lambda x: aten.clamp_min.default(x, 0.0) * 1.0
    return t


@probe
def table_custom_core_op():
    compare("custom decomposition of relu (core)", LinearConv(), lc_args(), [lc_args()], table=_table_custom_relu)


def _table_linear(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t[aten.linear.default] = lambda x, w, b=None: aten.add.Tensor(aten.mm.default(x, aten.t.default(w)), b)
    return t


@probe
def table_custom_composite():
    compare("CIA op linear given a decomposition", LinearConv(), lc_args(), [lc_args()], table=_table_linear)


@probe
def torch_table_to_graphcap():
    # torch's own table object handed to graphcap (and vice versa)
    compare("torch.export.default_decompositions()", LinearConv(), lc_args(), [lc_args()],
            table=lambda torch=False: torch_default())


@probe
def graphcap_table_to_torch():
    compare("graphcap.default_decompositions() both", LinearConv(), lc_args(), [lc_args()],
            table=lambda torch=False: graphcap.default_decompositions())


@probe
def plain_dict_one_entry():
    compare("plain dict {relu: fn}", LinearConv(), lc_args(), [lc_args()],
            table=lambda torch=False: {aten.relu.default: lambda x: aten.clamp_min.default(x, 0.0)})


# ---------------------------------------------------------------- custom ops
lib = torch.library.Library("dcaudit", "FRAGMENT")
lib.define("cia(Tensor x) -> Tensor")
lib.impl("cia", lambda x: x.sin() * 2, "CompositeImplicitAutograd")
lib.define("cex(Tensor x) -> Tensor")
lib.impl("cex", lambda x: x.cos() + 1, "CompositeExplicitAutograd")


@torch.library.custom_op("dcaudit::fakeonly", mutates_args=())
def fakeonly(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@fakeonly.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("dcaudit::inplace", mutates_args=("x",))
def inplace_op(x: torch.Tensor) -> None:
    x.add_(1)


@inplace_op.register_fake
def _(x):
    return None


class UsesCustom(nn.Module):
    def forward(self, x):
        return torch.ops.dcaudit.cia(x) + torch.ops.dcaudit.cex(x) + fakeonly(x)


@probe
def custom_ops():
    compare("custom ops CIA/CEX/fake-only", UsesCustom(), (R(3, 4),), [(R(3, 4),), (R(1, 4),), (R(0, 4),)],
            spec=({0: Dim("n")},))


def _keep_cia(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t.pop(torch_mod().ops.dcaudit.cia.default, None) if hasattr(t, "pop") else None
    return t


def torch_mod():
    import torch as _t
    return _t


@probe
def custom_cia_kept():
    compare("custom CIA op kept (pop from table)", UsesCustom(), (R(3, 4),), [(R(3, 4),)], table=_keep_cia)


class InplaceCustom(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(3))

    def forward(self, x):
        inplace_op(self.b)
        inplace_op(x)
        return x * self.b


@probe
def custom_inplace():
    compare("custom op mutating buffer+input", InplaceCustom(), (R(3),), [(R(3),)])


# ---------------------------------------------------------------- views / inplace
class Views(nn.Module):
    def forward(self, x, c):
        a = torch.view_as_real(c).sum(-1)
        u = x.unfold(1, 2, 1).sum(-1)
        s = x.as_strided((2, 2), (1, 2)).sum()
        d = x.diagonal().clone()
        t = x.t().clone()
        t.copy_(x.t() * 2)
        return a, u, s, d, t


@probe
def views():
    compare("view_as_real/unfold/as_strided/diag/t.copy_", Views(), (R(4, 4), R(4, dtype=torch.complex64)),
            [(R(4, 4), R(4, dtype=torch.complex64))])


class InplaceInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("hist", torch.zeros(4, 3))

    def forward(self, x, y):
        self.count.add_(1)
        self.hist[0].copy_(x[0])
        x.mul_(2)
        y[:, 1:].zero_()
        return x + y, x  # x returned: an aliasing output


@probe
def inplace_inputs_buffers():
    compare("in-place on inputs/buffers, aliasing out", InplaceInputs(), (R(4, 3), R(4, 3)),
            [(R(4, 3), R(4, 3)), (R(1, 3), R(1, 3))], spec=({0: Dim("n", max=4)}, {0: Dim("n", max=4)}),
            extra=lambda g, t: f"g-sig={_mut(g)} t-sig={_mut(t)}")


def _mut(ep):
    if ep is None:
        return None
    s = ep.graph_signature
    return (sorted(s.buffers_to_mutate.values()), sorted(s.user_inputs_to_mutate.values()),
            [o.kind.name for o in s.output_specs])


class OutVariant(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        torch.add(x, 1, out=out)
        return out * 2


@probe
def out_variant():
    compare("out= variant", OutVariant(), (R(3, 2),), [(R(3, 2),), (R(0, 2),)], spec=({0: Dim("n")},))


# ---------------------------------------------------------------- regions / control flow
class Regions(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            a = self.lin(x)
        with torch.enable_grad():
            b = nn.functional.gelu(self.lin(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = self.lin(x)
        return a + b, c


@probe
def grad_autocast_regions():
    compare("no_grad/enable_grad/autocast regions", Regions(), (R(2, 4),), [(R(2, 4),), (R(5, 4),)],
            spec=({0: Dim("b")},))


class CondLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, n):
        def t(x):
            return nn.functional.hardswish(nn.functional.layer_norm(self.lin(x), (4,)))

        def f(x):
            return nn.functional.silu(x).logsumexp(-1, keepdim=True) * torch.ones_like(x)

        y = torch.cond(x.sum() > 0, t, f, (x,))
        i, z = torch._higher_order_ops.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, nn.functional.elu(z)),
                                                  (torch.zeros((), dtype=torch.int64), y))
        m = torch._higher_order_ops.map(lambda r: nn.functional.softplus(r).addcmul(r, r), z)
        return m


@probe
def cond_while_map():
    args = (R(3, 4), torch.tensor(3))
    compare("cond/while_loop/map, decomposing ops inside", CondLoop(), args,
            [args, (-R(3, 4).abs(), torch.tensor(2)), (R(1, 4), torch.tensor(0))], spec=({0: Dim("b")}, None))


# ---------------------------------------------------------------- dynamic
class Dyn(nn.Module):
    def forward(self, x, y, k):
        n = k.item()
        torch._check(n >= 1)
        torch._check(n <= x.shape[0])
        z = torch.cat([x, y], 0)[:n]
        return z.sum(0) * x.shape[0], torch.zeros(n) + 1, x.view(-1, 2).mean(0)


@probe
def dynamic_unbacked_derived():
    dx = Dim("dx", min=1, max=12)
    spec = ({0: dx}, {0: dx + 1}, None)
    mk = lambda b, n: (R(b, 4), R(b + 1, 4), torch.tensor(n))  # noqa: E731
    compare("derived dim + unbacked .item() + view", Dyn(), mk(3, 2), [mk(3, 2), mk(1, 1), mk(12, 5), mk(4, 4)],
            spec=spec)


@probe
def decompose_twice():
    compare("decomposed twice", LinearConv(), lc_args(), [lc_args(), lc_args(1)],
            spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}), post=lambda ep, ex: ep.run_decompositions())


@probe
def decompose_reexport_decompose():
    def post(ep, ex):
        ep2 = ex(ep.module(), lc_args(), dynamic_shapes=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}))
        return ep2.run_decompositions()
    compare("decomposed, module() re-exported, decomposed", LinearConv(), lc_args(),
            [lc_args(), lc_args(1), lc_args(8)],
            spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}), post=post)


@probe
def reexport_inplace_decompose():
    def post(ep, ex):
        a = (R(4, 3), R(4, 3))
        return ex(ep.module(), a, dynamic_shapes=({0: Dim("n", max=4)}, {0: Dim("n", max=4)})).run_decompositions()
    compare("mutations: decomposed, re-exported, decomposed", InplaceInputs(), (R(4, 3), R(4, 3)),
            [(R(4, 3), R(4, 3)), (R(2, 3), R(2, 3))], spec=({0: Dim("n", max=4)}, {0: Dim("n", max=4)}), post=post,
            extra=lambda g, t: f"g-sig={_mut(g)} t-sig={_mut(t)}")


# ---------------------------------------------------------------- nn layers
class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.gn = nn.GroupNorm(2, 4)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.0)

    def forward(self, x, img):
        return self.drop(self.ln(x)), self.gn(img), self.bn(img)


def norm_args(b=2):
    return (R(b, 8), R(b, 4, 3, 3))


@probe
def norms_train():
    compare("layer/group/batch norm TRAIN", Norms().train(), norm_args(), [norm_args(), norm_args(5)],
            spec=({0: Dim("b", min=2)}, {0: Dim("b", min=2)}))


@probe
def norms_eval():
    compare("layer/group/batch norm EVAL", Norms().eval(), norm_args(), [norm_args(), norm_args(1)],
            spec=({0: Dim("b")}, {0: Dim("b")}))


class Attn(nn.Module):
    def forward(self, q, k, v, m):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)


@probe
def sdpa():
    mk = lambda s: (R(2, 2, s, 8), R(2, 2, s, 8), R(2, 2, s, 8), torch.ones(s, s, dtype=torch.bool).tril())  # noqa
    s = Dim("s", max=32)
    compare("SDPA with mask, dynamic seq", Attn(), mk(5), [mk(5), mk(1), mk(32)],
            spec=({2: s}, {2: s}, {2: s}, {0: s, 1: s}))


class Misc(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, mode="sum")
        self.lstm = nn.LSTM(4, 3, batch_first=True)
        self.gru = nn.GRU(4, 3)

    def forward(self, img, idx, off, seq):
        a = nn.functional.interpolate(img, scale_factor=2, mode="bilinear", align_corners=False)
        b = nn.functional.pixel_shuffle(img, 2)
        c = self.bag(idx, off)
        d, _ = self.lstm(seq)
        e, _ = self.gru(seq)
        f = torch.einsum("bij,bjk->bik", seq, seq.transpose(1, 2))
        return a, b, c, d, e, f


@probe
def misc_layers():
    args = (R(1, 4, 3, 3), torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2]), R(2, 5, 4))
    compare("interp/pixel_shuffle/bag/lstm/gru/einsum", Misc(), args, [args])


class Scatter(nn.Module):
    def forward(self, x, idx, v):
        y = x.index_put((idx,), v, accumulate=True)
        z = x.scatter_reduce(0, idx.unsqueeze(1).expand(-1, x.shape[1]), v, "amax", include_self=False)
        w = torch.zeros_like(x)
        w.index_put_((idx,), v, accumulate=True)
        return y, z, w


@probe
def scatter_index_put():
    args = (R(5, 3), torch.tensor([0, 2, 2, 4]), R(4, 3))
    compare("index_put accumulate / scatter_reduce", Scatter(), args, [args])


class Complex(nn.Module):
    def forward(self, x):
        c = torch.fft.rfft(x)
        return (c * c.conj()).real, torch.polar(x.abs(), x).angle(), torch.view_as_complex(x.view(-1, 2)).abs()


@probe
def complex_ops():
    compare("complex ops", Complex(), (R(4, 4),), [(R(4, 4),)])


class Drop(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Dropout(0.5)
        self.f = nn.Dropout(0.5, inplace=True)

    def forward(self, x):
        return self.f(self.d(x) + 1)


@probe
def dropout_eval():
    compare("dropout eval (+inplace)", Drop().eval(), (R(3, 4),), [(R(3, 4),), (R(0, 4),)], spec=({0: Dim("b")},))


@probe
def dropout_train_p0():
    class D0(nn.Module):
        def forward(self, x):
            return nn.functional.dropout(x, 0.0, True) + nn.functional.dropout(x, 1.0, True)
    compare("dropout train p=0/p=1", D0(), (R(3, 4),), [(R(3, 4),)])


# ---------------------------------------------------------------- metadata / signature
class Meta(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("s", torch.ones(4))

    def forward(self, x, *, scale):
        with torch.fx.traceback.annotate({"tag": "A"}):
            y = self.lin(x) * scale
        self.s.mul_(2)
        return {"out": nn.functional.gelu(y) + self.s}


def _meta_facts(g, t):
    facts = []
    for name, ep in (("g", g), ("t", t)):
        if ep is None:
            continue
        nodes = [n for n in ep.graph.nodes if n.op == "call_function"]
        miss_st = sum(1 for n in nodes if not n.meta.get("stack_trace"))
        miss_nms = sum(1 for n in nodes if not n.meta.get("nn_module_stack"))
        custom = sorted({str(n.meta.get("custom")) for n in nodes if n.meta.get("custom")})
        fn = sum(1 for n in nodes if n.meta.get("from_node"))
        tfn = sum(1 for n in nodes if n.meta.get("torch_fn"))
        seq = sum(1 for n in nodes if "seq_nr" in n.meta)
        sig = ep.graph_signature
        facts.append(f"{name}: n={len(nodes)} no_st={miss_st} no_nms={miss_nms} custom={custom} from_node={fn} "
                     f"torch_fn={tfn} seq_nr={seq} in={sig.user_inputs} out={sig.user_outputs} "
                     f"bm={dict(sig.buffers_to_mutate)}")
    return " ; ".join(facts)


@probe
def metadata_signature():
    compare("metadata + signature after decomposition", Meta(), (R(2, 4),), [((R(2, 4),), {"scale": 3.0})],
            kwargs={"scale": 3.0}, extra=_meta_facts)


@probe
def reexport_metadata():
    compare("metadata after re-export + decomposition", Meta(), (R(2, 4),), [((R(2, 4),), {"scale": 3.0})],
            kwargs={"scale": 3.0}, reexport=True, extra=_meta_facts)


@probe
def strict_decompose():
    compare("strict=True then decomposed", Norms().eval(), norm_args(), [norm_args(), norm_args(1)],
            spec=({0: Dim("b")}, {0: Dim("b")}), strict=True)


@probe
def validate_after():
    def post(ep, ex):
        ep.validate() if hasattr(ep, "validate") else None
        return ep
    compare("validate() after decomposition", InplaceInputs(), (R(4, 3), R(4, 3)), [(R(4, 3), R(4, 3))], post=post)


@probe
def onnx_consumer():
    def post(ep, ex):
        if ex is graphcap.export:
            import io
            torch.onnx.export(ep, (R(2, 4), R(2, 2, 5, 5)), io.BytesIO(), dynamo=True)
        return ep
    compare("torch.onnx.export of decomposed program", LinearConv(), lc_args(), [lc_args()], post=post)


@probe
def executorch_consumer():
    def post(ep, ex):
        if ex is graphcap.export:
            from executorch.exir import to_edge
            to_edge(ep).to_executorch()
        return ep
    compare("executorch to_edge of decomposed program", InplaceInputs(), (R(4, 3), R(4, 3)), [(R(4, 3), R(4, 3))],
            post=post)


# ---------------------------------------------------------------- second batch
def _graphcap_with_torch_table(torch=False):
    t = torch_default()
    del t[aten.conv2d.default]
    t[aten.relu.default] = lambda x: aten.clamp_min.default(x, 0.0)
    return t


@probe
def torch_table_edited():
    compare("torch table edited (del conv2d, relu fn)", LinearConv(), lc_args(), [lc_args()],
            table=_graphcap_with_torch_table)


class NonCoreOps(nn.Module):
    def forward(self, x):
        return nn.functional.silu(x) + nn.functional.hardsigmoid(x) + x.addcmul(x, x) + nn.functional.mish(x)


def _keep_noncore(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    for op in (aten.silu.default, aten.hardsigmoid.default, aten.addcmul.default, aten.mish.default):
        t.pop(op, None)
    return t


@probe
def keep_python_decomposed_ops():
    compare("keep silu/hardsigmoid/addcmul/mish", NonCoreOps(), (R(3, 4),), [(R(3, 4),), (R(0, 4),)],
            table=_keep_noncore, spec=({0: Dim("n")},))


class Asserts(nn.Module):
    def forward(self, x, k):
        n = k.item()
        torch._check(n >= 2)
        torch._check(n <= 10)
        y = x.nonzero()
        return torch.ones(n).sum() + y.shape[0], y, x.repeat_interleave(2, 0)


def _asserts(g, t):
    def count(ep):
        return sum(1 for n in ep.graph.nodes if n.op == "call_function" and "assert" in str(n.target))
    ranges = sorted(map(str, g.range_constraints.values()))
    return f"asserts g={count(g)} t={count(t) if t is not None else None}; g-ranges={ranges}"


@probe
def unbacked_asserts():
    compare("item()+_check, nonzero, repeat_interleave", Asserts(), (R(4, 3), torch.tensor(3)),
            [(R(4, 3), torch.tensor(3)), (R(0, 3), torch.tensor(2)), (R(4, 3), torch.tensor(1)),
             (R(4, 3), torch.tensor(11)), (R(9, 3), torch.tensor(10))],
            spec=({0: Dim("n")}, None), extra=_asserts)


class SymOut(nn.Module):
    def forward(self, x):
        return x.shape[0] * 2, x.sum(), None, x.shape[1]


@probe
def sym_outputs():
    compare("SymInt / None / int outputs", SymOut(), (R(3, 4),), [(R(3, 4),), (R(1, 4),), (R(0, 4),)],
            spec=({0: Dim("n")},))


class Layouts(nn.Module):
    def forward(self, x):
        a = x.contiguous(memory_format=torch.channels_last) * 2
        b = x.to(torch.float64).sum()
        c = torch.empty_strided((2, 3), (1, 2)).fill_(1.0)
        d = x.flatten(1).unsqueeze(0).squeeze(0)
        return a, b, c, d, x.new_zeros(3), torch.arange(x.shape[0])


@probe
def layouts_and_factories():
    compare("channels_last / to / empty_strided / arange", Layouts(), (R(2, 3, 4, 4),),
            [(R(2, 3, 4, 4),), (R(1, 3, 4, 4),), (R(0, 3, 4, 4),)], spec=({0: Dim("n")},))


class Interp(nn.Module):
    def forward(self, x):
        return (nn.functional.interpolate(x, size=(7, 5), mode="nearest"),
                nn.functional.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
                nn.functional.adaptive_avg_pool2d(x, (2, 3)), nn.functional.avg_pool2d(x, 2, ceil_mode=True))


@probe
def interpolate_dynamic():
    mk = lambda b, h: (R(b, 2, h, 6),)  # noqa: E731
    compare("interpolate nearest/bicubic, adaptive pool", Interp(), mk(2, 6),
            [mk(2, 6), mk(1, 6), mk(3, 9), mk(2, 4)], spec=({0: Dim("b"), 2: Dim("h", min=4, max=16)},))


class EmbedIdx(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4, padding_idx=0)

    def forward(self, idx, x):
        y = self.e(idx)
        return y, x.index_select(0, idx.flatten() % x.shape[0]), torch.gather(x, 1, idx % x.shape[1])


@probe
def embedding_gather():
    compare("embedding padding_idx / index_select / gather", EmbedIdx(),
            (torch.tensor([[1, 0, 3]]), R(5, 4)), [(torch.tensor([[1, 0, 3]]), R(5, 4))])


class GradIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("c", torch.zeros(4))

    def forward(self, x):
        with torch.no_grad():
            self.w.mul_(0.5)
        self.c += x.mean(0)
        return x @ self.w + self.c


@probe
def param_update_no_grad():
    compare("param updated under no_grad + buffer +=", GradIn(), (R(3, 4),), [(R(3, 4),), (R(1, 4),)],
            spec=({0: Dim("n")},), extra=lambda g, t: f"g-outs={[o.kind.name for o in g.graph_signature.output_specs]} "
            f"t-outs={[o.kind.name for o in t.graph_signature.output_specs] if t else None}")


class TrainBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(x)


@probe
def train_bn_reexport():
    def post(ep, ex):
        return ex(ep.module(), (R(5, 4),), dynamic_shapes=({0: Dim("b", min=2)},)).run_decompositions()
    compare("train BN: decomposed, re-exported, decomposed", TrainBN().train(), (R(5, 4),), [(R(5, 4),), (R(2, 4),)],
            spec=({0: Dim("b", min=2)},), post=post,
            extra=lambda g, t: f"g-outs={[o.kind.name for o in g.graph_signature.output_specs]}")


class StrOps(nn.Module):
    def forward(self, x):
        return torch.linalg.vector_norm(x, dim=-1), torch.std_mean(x, 0), x.cumsum(0), torch.topk(x, 2), x.argmax(1), \
            torch.where(x > 0, x, 0.0), x.clamp(-0.5, 0.5), torch.softmax(x, -1), torch.log_softmax(x, 0)


@probe
def reductions_misc():
    compare("norms/std_mean/cumsum/topk/argmax/softmax", StrOps(), (R(3, 4),), [(R(3, 4),), (R(1, 4),)],
            spec=({0: Dim("n", min=1)},))


class Unique(nn.Module):
    def forward(self, x):
        return torch.unique(x), torch.bincount(x.flatten() % 4), x.masked_select(x > 1)


@probe
def data_dependent_outputs():
    a = torch.tensor([[1, 2, 2], [3, 1, 0]])
    compare("unique / bincount / masked_select", Unique(), (a,), [(a,)])


# ---------------------------------------------------------------- third batch
def _keep_linear(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    del t[aten.linear.default]
    return t


class CondLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.shape[0] > 2, lambda x: self.a(x).relu(), lambda x: self.b(x) * 2, (x,)) + self.a(x)


@probe
def kept_composite_in_cond_dynamic():
    compare("linear kept, in cond branches, dynamic", CondLinear(), (R(3, 4),),
            [(R(3, 4),), (R(1, 4),), (R(0, 4),), (R(7, 4),)], spec=({0: Dim("b")},), table=_keep_linear)


def _addmm_replaced(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t[aten.addmm.default] = lambda b, x, w, beta=1, alpha=1: aten.add.Tensor(aten.mm.default(x, w), b)
    return t


@probe
def core_op_replaced_reached_by_decomposition():
    compare("addmm replaced (reached via linear)", LinearConv(), lc_args(), [lc_args(), lc_args(1)],
            table=_addmm_replaced, spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}))


class Aliases(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.ones(3))

    def forward(self, x):
        self.buf.add_(x.sum())
        y = x.view(-1)
        return y, y, self.buf, self.buf[1:], x.t()


@probe
def aliasing_outputs():
    compare("outputs aliasing input / buffer / each other", Aliases(), (R(3, 1),), [(R(3, 1),)],
            extra=lambda g, t: f"g-outs={[o.kind.name for o in g.graph_signature.output_specs]}")


class MetaMut(nn.Module):
    def forward(self, x):
        y = x * 2
        y.transpose_(0, 1)
        y.unsqueeze_(0)
        return y


@probe
def intermediate_metadata_mutation():
    compare("transpose_/unsqueeze_ on intermediate", MetaMut(), (R(2, 3),), [(R(2, 3),), (R(0, 3),)],
            spec=({0: Dim("n")},))


class TrainDrop(nn.Module):
    def forward(self, x):
        return nn.functional.dropout(x, 0.5, True).shape, nn.functional.alpha_dropout(x, 0.0, True)


@probe
def dropout_train_ops():
    compare("dropout train p=0.5 (ops only)", TrainDrop(), (R(3, 4),), [])


@probe
def save_load_decompose_reexport():
    import io

    def post(ep, ex):
        if ex is graphcap.export:
            buf = io.BytesIO()
            graphcap.save(ep, buf)
            buf.seek(0)
            ep = graphcap.load(buf)
        else:
            buf = io.BytesIO()
            torch.export.save(ep, buf)
            buf.seek(0)
            ep = torch.export.load(buf)
        return ex(ep.module(), (R(4, 3), R(4, 3)),
                  dynamic_shapes=({0: Dim("n", max=4)}, {0: Dim("n", max=4)})).run_decompositions()
    compare("decomposed, saved, loaded, re-exported, decomposed", InplaceInputs(), (R(4, 3), R(4, 3)),
            [(R(4, 3), R(4, 3)), (R(1, 3), R(1, 3))], spec=({0: Dim("n", max=4)}, {0: Dim("n", max=4)}), post=post)


class GN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)

    def forward(self, x):
        return self.gn(x), self.inorm(x)


@probe
def group_instance_norm_dynamic_spatial():
    mk = lambda b, h: (R(b, 4, h, h + 1),)  # noqa: E731
    compare("group/instance norm, dynamic spatial", GN().train(), mk(2, 3), [mk(2, 3), mk(1, 5), mk(3, 2)],
            spec=({0: Dim("b"), 2: Dim("h", min=2, max=9), 3: Dim("w", min=3, max=10)},))


class CustomDyn(nn.Module):
    def forward(self, x):
        return fakeonly(x.flatten()) + torch.ops.dcaudit.cia(x).flatten()


@probe
def custom_op_dynamic_reexport():
    compare("fake-only custom op, dynamic, re-exported", CustomDyn(), (R(3, 4),), [(R(3, 4),), (R(1, 4),), (R(0, 4),)],
            spec=({0: Dim("n")},), reexport=True)


class SDPA0(nn.Module):
    def forward(self, q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)


@probe
def sdpa_causal_gqa():
    s = Dim("s", min=2, max=16)
    mk = lambda n: (R(1, 4, n, 8), R(1, 2, n, 8), R(1, 2, n, 8))  # noqa: E731
    compare("SDPA causal + gqa + scale, dynamic", SDPA0(), mk(5), [mk(5), mk(2), mk(16)],
            spec=({2: s}, {2: s}, {2: s}))


# ---------------------------------------------------------------- fourth batch
class IntOps(nn.Module):
    def forward(self, a, b):
        return (a // 3, a % 3, torch.div(a, b.clamp(min=1), rounding_mode="floor"), a.bitwise_xor(b), a ** 2,
                (a > b).float().mean(), a.to(torch.float16) / 3, torch.div(a, 2, rounding_mode="trunc"))


@probe
def integer_ops():
    mk = lambda n: (torch.randint(-9, 9, (n, 3)), torch.randint(-9, 9, (n, 3)))  # noqa: E731
    compare("int floor-div/mod/xor/pow/trunc", IntOps(), mk(4), [mk(4), mk(1), mk(0)],
            spec=({0: Dim("n")}, {0: Dim("n")}))


class Masks(nn.Module):
    def forward(self, x, m):
        y = x.clone()
        y[m] = 0.0
        z = x.masked_fill(~m, -1.0)
        w = nn.functional.pad(x.unsqueeze(0), (2, 1), mode="reflect").squeeze(0)
        return y, z, w


@probe
def bool_mask_index_put_pad():
    mk = lambda n: (R(n, 4), torch.rand(n, 4) > 0.5)  # noqa: E731
    compare("bool-mask index_put_, masked_fill, reflect pad", Masks(), mk(3), [mk(3), mk(1), mk(6)],
            spec=({0: Dim("n", min=1)}, {0: Dim("n", min=1)}))


class ItemView(nn.Module):
    def forward(self, x, k):
        n = k.item()
        torch._check(n >= 0)
        torch._check(n % 2 == 0)
        z = torch.arange(n).view(-1, 2).float()
        return z.sum(0) + x.mean(), nn.functional.layer_norm(x[: n // 2 + 1], (3,))


@probe
def unbacked_through_composites():
    compare("unbacked n: arange.view, layer_norm on slice", ItemView(), (R(5, 3), torch.tensor(4)),
            [(R(5, 3), torch.tensor(4)), (R(5, 3), torch.tensor(0)), (R(5, 3), torch.tensor(3))])


class Scalars(nn.Module):
    def forward(self, x, n: int, f: float, flag: bool, none=None, *, mode: str = "a"):
        y = x * f + n
        if flag:
            y = y.relu()
        return y if mode == "a" else -y


@probe
def scalar_inputs():
    args = (R(3, 2), 2, 0.5, True)
    compare("int/float/bool/None/str inputs", Scalars(), args,
            [args, (R(3, 2), 3, 0.5, True), ((R(3, 2), 2, 0.5, True), {"mode": "a"})])


@probe
def onnx_dynamic_consumer():
    def post(ep, ex):
        if ex is graphcap.export:
            import io
            torch.onnx.export(ep, lc_args(3), io.BytesIO(), dynamo=True)
        return ep
    compare("torch.onnx.export of decomposed dynamic program", LinearConv(), lc_args(), [lc_args(), lc_args(5)],
            spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}), post=post)


@probe
def executorch_dynamic_consumer():
    def post(ep, ex):
        if ex is graphcap.export:
            from executorch.exir import to_edge
            to_edge(ep).to_executorch()
        return ep
    compare("executorch to_edge, dynamic + mutations", InplaceInputs(), (R(4, 3), R(4, 3)),
            [(R(4, 3), R(4, 3)), (R(2, 3), R(2, 3))], spec=({0: Dim("n", max=4)}, {0: Dim("n", max=4)}), post=post)


@probe
def strict_reexport_decomposed():
    def post(ep, ex):
        return ex(ep.module(), norm_args(), dynamic_shapes=({0: Dim("b")}, {0: Dim("b")}), strict=True)\
            .run_decompositions()
    compare("decomposed, re-exported strict, decomposed", Norms().eval(), norm_args(), [norm_args(), norm_args(1)],
            spec=({0: Dim("b")}, {0: Dim("b")}), post=post)


def _raising(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()

    def bad(x):
        raise NotImplementedError("no decomposition for you")
    t[aten.relu.default] = bad
    return t


@probe
def raising_decomposition():
    compare("table entry that raises", LinearConv(), lc_args(), [lc_args()], table=_raising)


def _self_composite(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t[aten.linear.default] = lambda x, w, b=None: aten.linear.default(x * 1.0, w, b)
    return t


@probe
def decomposition_calling_itself():
    compare("linear's entry calls linear", LinearConv(), lc_args(), [lc_args()], table=_self_composite)


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode="mean", padding_idx=1)
        self.bag2 = nn.EmbeddingBag(10, 3, mode="sum")

    def forward(self, idx, off, w):
        return self.bag(idx, off), self.bag2(idx, off, per_sample_weights=w)


@probe
def embedding_bag_modes():
    args = (torch.tensor([1, 2, 4, 5, 4, 3, 1]), torch.tensor([0, 2, 5]), R(7))
    compare("embedding_bag mean+padding / per_sample_weights", Bag(), args, [args])


# ---------------------------------------------------------------- fifth batch
def _custom_entries(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    t[torch_mod().ops.dcaudit.fakeonly.default] = lambda x: x * 3
    t[torch_mod().ops.dcaudit.cex.default] = lambda x: x.cos() + 1
    t[aten.add.Tensor] = lambda a, b, alpha=1: aten.sub.Tensor(a, aten.neg.default(aten.mul.Tensor(b, alpha)))
    return t


@probe
def custom_ops_given_decompositions():
    compare("custom ops + core add given decompositions", UsesCustom(), (R(3, 4),),
            [(R(3, 4),), (R(1, 4),)], spec=({0: Dim("n")},), table=_custom_entries)


@probe
def empty_table_mutations():
    compare("empty table, mutations + train BN", Norms().train(), norm_args(), [norm_args()], table={})


@probe
def empty_table_inplace_inputs():
    compare("empty table, in-place inputs/buffers", InplaceInputs(), (R(4, 3), R(4, 3)), [(R(4, 3), R(4, 3))],
            table={})


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.GELU(), nn.Dropout(0.0))
                                    for _ in range(4))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


@probe
def repeated_blocks_train():
    compare("4 identical blocks, train BN (memo path)", Deep().train(), (R(3, 4),), [(R(3, 4),)])


@probe
def repeated_blocks_eval():
    compare("4 identical blocks, eval", Deep().eval(), (R(3, 4),), [(R(3, 4),)])


class TwiceSame(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("k", torch.ones(4))

    def forward(self, x):
        a = self.lin(x) * self.k
        b = self.lin(x) * self.k
        self.k.mul_(2)
        c = self.lin(x) * self.k
        return a, b, c


@probe
def identical_calls_around_a_write():
    compare("identical calls before/after a buffer write", TwiceSame(), (R(2, 4),), [(R(2, 4),)])


# ---------------------------------------------------------------- sixth batch: re-export
def _reexport(args, spec, strict=False, cross=False):
    def post(ep, ex):
        other = (torch.export.export if ex is graphcap.export else graphcap.export) if cross else ex
        return other(ep.module(), args, dynamic_shapes=spec, strict=strict).run_decompositions()
    return post


@probe
def reexport_unbacked():
    spec = ({0: Dim("n")}, None)
    compare("unbacked + asserts: decomposed, re-exported", Asserts(), (R(4, 3), torch.tensor(3)),
            [(R(4, 3), torch.tensor(3)), (R(4, 3), torch.tensor(1)), (R(0, 3), torch.tensor(10))],
            spec=spec, post=_reexport((R(4, 3), torch.tensor(3)), spec), extra=_asserts)


@probe
def reexport_unbacked_strict():
    spec = ({0: Dim("n")}, None)
    compare("same, re-exported strict", Asserts(), (R(4, 3), torch.tensor(3)),
            [(R(4, 3), torch.tensor(3)), (R(4, 3), torch.tensor(1))],
            spec=spec, post=_reexport((R(4, 3), torch.tensor(3)), spec, strict=True))


@probe
def reexport_cross():
    spec = ({0: Dim("n", max=4)}, {0: Dim("n", max=4)})
    compare("decomposed by one, re-exported by the other", InplaceInputs(), (R(4, 3), R(4, 3)),
            [(R(4, 3), R(4, 3)), (R(2, 3), R(2, 3))], spec=spec, post=_reexport((R(4, 3), R(4, 3)), spec, cross=True))


@probe
def reexport_derived():
    dx = Dim("dx", min=1, max=12)
    spec = ({0: dx}, {0: dx + 1}, None)
    mk = lambda b, n: (R(b, 4), R(b + 1, 4), torch.tensor(n))  # noqa: E731
    compare("derived dims: decomposed, re-exported", Dyn(), mk(3, 2), [mk(3, 2), mk(1, 1), mk(12, 5), mk(4, 6)],
            spec=spec, post=_reexport(mk(3, 2), spec))


@probe
def reexport_cond_loop():
    args = (R(3, 4), torch.tensor(3))
    spec = ({0: Dim("b")}, None)
    compare("cond/while/map: decomposed, re-exported", CondLoop(), args,
            [args, (-R(3, 4).abs(), torch.tensor(2)), (R(1, 4), torch.tensor(0))], spec=spec,
            post=_reexport(args, spec))


@probe
def reexport_regions():
    spec = ({0: Dim("b")},)
    compare("no_grad/autocast regions: decomposed, re-exported", Regions(), (R(2, 4),), [(R(2, 4),), (R(5, 4),)],
            spec=spec, post=_reexport((R(2, 4),), spec))


# ---------------------------------------------------------------- seventh batch: keeping ops
def _keep_many(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    for op in (aten.matmul.default, aten.layer_norm.default, aten.instance_norm.default, aten.t.default,
               aten.transpose.int):
        del t[op]
    return t


class KeepMany(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.inorm = nn.InstanceNorm1d(3)

    def forward(self, x):
        y = torch.matmul(x, self.w.t())
        y = nn.functional.layer_norm(y, (4,))
        z = self.inorm(y.transpose(1, 2))
        return y, z


@probe
def keep_matmul_layer_norm_views():
    mk = lambda b: (R(b, 3, 4),)  # noqa: E731
    compare("keep matmul/layer_norm/instance_norm/t/transpose", KeepMany(), mk(2), [mk(2), mk(1), mk(5)],
            spec=({0: Dim("b")},), table=_keep_many)


# ---------------------------------------------------------------- eighth batch
class GradToggle(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        torch.set_grad_enabled(False)
        a = nn.functional.layer_norm(self.lin(x), (4,))
        torch.set_grad_enabled(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = torch.softmax(self.lin(x), -1) @ self.lin.weight
        return a, b.float().sum(-1)


@probe
def set_grad_enabled_calls():
    compare("set_grad_enabled toggles + autocast matmul", GradToggle(), (R(3, 4),), [(R(3, 4),), (R(1, 4),)],
            spec=({0: Dim("b")},))


def _keep_instance_norm(torch=False):
    t = torch_default() if torch else graphcap.default_decompositions()
    del t[aten.instance_norm.default]
    return t


@probe
def keep_instance_norm_no_stats():
    compare("instance_norm kept (no running stats)", nn.InstanceNorm1d(3, affine=True), (R(2, 3, 5),),
            [(R(2, 3, 5),), (R(1, 3, 5),)], spec=({0: Dim("b")},), table=_keep_instance_norm)


@probe
def keep_instance_norm_stats_train():
    compare("instance_norm kept, updating running stats", nn.InstanceNorm1d(3, track_running_stats=True).train(),
            (R(2, 3, 5),), [(R(2, 3, 5),)], table=_keep_instance_norm,
            extra=lambda g, t: f"g-ops-instance_norm={'aten::instance_norm' in ops_of(g)} "
            f"g-outs={[o.kind.name for o in g.graph_signature.output_specs]} "
            f"t-outs={[o.kind.name for o in t.graph_signature.output_specs] if t else None}")


@probe
def keep_lstm():
    class L(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 3, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    def table(torch=False):
        t = torch_default() if torch else graphcap.default_decompositions()
        del t[aten.lstm.input]
        return t
    compare("lstm kept", L().eval(), (R(2, 5, 4),), [(R(2, 5, 4),)], table=table)


# ---------------------------------------------------------------- ninth batch: tables as plain dicts
@probe
def materialized_table():
    compare("default table .materialize() (plain dict)", LinearConv(), lc_args(), [lc_args(), lc_args(1)],
            spec=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}),
            table=lambda torch=False: (torch_default() if torch else graphcap.default_decompositions()).materialize())


@probe
def implied_entry_in_plain_dict():
    def table(torch=False):
        t = torch_default() if torch else graphcap.default_decompositions()
        return {aten.linear.default: t[aten.linear.default], aten.conv2d.default: t[aten.conv2d.default]}
    compare("table's linear/conv2d entries in a plain dict", LinearConv(), lc_args(), [lc_args()], table=table)


# ---------------------------------------------------------------- tenth batch
class Consts(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.ones(3)  # a plain tensor attribute: a lifted constant

    def forward(self, x):
        t = torch.tensor([1.0, 2.0, 3.0])
        return nn.functional.linear(x, torch.eye(3) * self.c) + t


@probe
def constants_reexport():
    compare("tensor constants, decomposed + re-exported", Consts(), (R(2, 3),), [(R(2, 3),), (R(1, 3),)],
            spec=({0: Dim("b")},), post=_reexport((R(2, 3),), ({0: Dim("b")},)),
            extra=lambda g, t: f"g-in={[s.kind.name for s in g.graph_signature.input_specs]} "
            f"t-in={[s.kind.name for s in t.graph_signature.input_specs] if t else None}")


class OddNames(nn.Module):
    def forward(self, add, view, sym_size_int_1, permute):
        return (add + view).view(-1) * sym_size_int_1.shape[0], permute.t()


@probe
def inputs_named_like_nodes():
    mk = lambda n: (R(n, 2), R(n, 2), R(n), R(2, 3))  # noqa: E731
    n = Dim("n")
    compare("inputs named add/view/sym_size_int_1/permute", OddNames(), mk(3), [mk(3), mk(1)],
            spec=({0: n}, {0: n}, {0: n}, None),
            extra=lambda g, t: f"g-in={g.graph_signature.user_inputs} "
            f"t-in={t.graph_signature.user_inputs if t else None}")


# ---------------------------------------------------------------- eleventh batch
lib.define("viewish(Tensor(a) x) -> Tensor(a)")
lib.impl("viewish", lambda x: x.view(-1), "CompositeImplicitAutograd")


class UsesViewish(nn.Module):
    def forward(self, x):
        y = torch.ops.dcaudit.viewish(x * 2)
        y.add_(1)
        return y, torch.ops.dcaudit.viewish(x).sum()


@probe
def custom_aliasing_composite():
    compare("custom CIA op returning a view, then add_", UsesViewish(), (R(3, 2),), [(R(3, 2),), (R(1, 2),)],
            spec=({0: Dim("n")},))


@probe
def keep_then_decompose():
    def post(ep, ex):
        return ep.run_decompositions(_table_keep_conv(torch=ex is not graphcap.export)).run_decompositions()
    compare("decomposed keeping conv2d, then default", LinearConv(), lc_args(), [lc_args()], post=post)


# ---------------------------------------------------------------- twelfth batch
class Scan(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, init, xs):
        from torch._higher_order_ops.scan import scan

        def step(c, x):
            c2 = nn.functional.layer_norm(self.lin(c) + x, (4,)).tanh()
            return c2, nn.functional.silu(c2)
        return scan(step, init, xs)


@probe
def scan_with_composites():
    b, t = Dim("b"), Dim("t")
    mk = lambda n, k: (R(n, 4), R(k, n, 4))  # noqa: E731
    compare("scan with linear/layer_norm/silu, dynamic", Scan(), mk(2, 5), [mk(2, 5), mk(1, 3), mk(3, 1)],
            spec=({0: b}, {0: t, 1: b}))


class UpsampleDirect(nn.Module):
    def forward(self, x, y):
        return aten.upsample_nearest2d.default(x, [6, 5]), aten._upsample_nearest_exact1d.default(y, [7])


@probe
def upsample_default_overloads():
    compare("upsample_nearest*.default called directly", UpsampleDirect(), (R(1, 2, 3, 3), R(1, 2, 4)),
            [(R(1, 2, 3, 3), R(1, 2, 4))])


if __name__ == "__main__":
    wanted = set(sys.argv[1:])
    for p in PROBES:
        if wanted and p.__name__ not in wanted:
            continue
        try:
            p()
        except Exception:
            print(f"{p.__name__}: probe crashed")
            traceback.print_exc()
