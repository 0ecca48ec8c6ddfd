"""Custom and higher-order operators audit: graphcap against torch.export and eager.

Each probe is exported with graphcap and with torch.export, non-strict and strict, and each
program is run (``module()``) at the example and at other inputs in range, refused at inputs
out of range, then decomposed (the default table, or the probe's own table, which may hold an
entry for the custom operator) and saved and loaded with each library's own functions, and run
again. Outputs, written buffers and written inputs are compared with eager's. Prints one line
per probe and mode:

    name [strict] | graphcap: <verdict> | torch: <verdict>

"=" means every stage matched eager. Run:
    PYTHONPATH=src python bench/probes/ops_audit.py [name-substring ...] [-v] [--no-torch] [--no-strict]
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import traceback
import warnings
from typing import Any, Callable, Optional

import torch
import torch.export as te
from _compare import roundtrip, same
from torch import Tensor
from torch.export import Dim

import graphcap

# ---------------------------------------------------------------------------- helpers


Inputs = tuple[Any, ...]


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], torch.nn.Module]
    args: Inputs
    dynamic_shapes: Any = None
    ok_inputs: list[Inputs] = dataclasses.field(default_factory=list)
    bad_inputs: list[Inputs] = dataclasses.field(default_factory=list)
    table: Callable[[], Any] | None = None       # decomposition table; None: the default one
    gone_after_decomp: tuple[str, ...] = ()      # operator names that must not survive decomposition
    stateful_runs: int = 1                       # run module() this many times per input (buffers evolve)
    checks_log: bool = False                     # compare what the logging custom ops recorded (LOG)


def _sizes(args: Any) -> str:
    leaves = torch.utils._pytree.tree_leaves(args)
    return ",".join(str(tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in leaves)


def _check_runs(p: Probe, eager_make: Callable[[], torch.nn.Module], program: Any, stage: str) -> list[str]:
    notes: list[str] = []
    for args in [p.args] + p.ok_inputs:
        eager = eager_make()
        try:
            mod = program.module()
        except Exception as e:
            return [f"{stage}: module() fails: {type(e).__name__}: {str(e).splitlines()[0][:100]}"]
        a_eager, a_prog = copy.deepcopy(args), copy.deepcopy(args)
        try:
            for _ in range(p.stateful_runs):
                LOG.clear()
                want = eager(*a_eager)
                logged, LOG[:] = list(LOG), []
                got = mod(*a_prog)
                if p.checks_log and LOG != logged:
                    notes.append(f"{stage}: WRONG effects (logged {LOG}, eager {logged})")
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage}: run fails at {_sizes(args)}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            continue
        if not same(want, got):
            notes.append(f"{stage}: WRONG output at {_sizes(args)}")
        if not same(list(a_eager), list(a_prog)):
            notes.append(f"{stage}: WRONG written input at {_sizes(args)}")
        eb = dict(eager.named_buffers())
        pb = dict(mod.named_buffers())
        if any(k in pb and not same(v, pb[k]) for k, v in eb.items()):
            notes.append(f"{stage}: WRONG buffer at {_sizes(args)}")
    for args in p.bad_inputs:
        try:
            program.module()(*copy.deepcopy(args))
            notes.append(f"{stage}: accepts out-of-range {_sizes(args)}")
        except Exception:
            pass
    return notes


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {(lines[0] if lines else '')[:140]}"


def _run_side(side: str, p: Probe, strict: bool) -> str:
    export = graphcap.export if side == "g" else te.export
    torch.manual_seed(0)
    model = p.make()
    pristine = copy.deepcopy(model)

    def eager_make() -> torch.nn.Module:
        return copy.deepcopy(pristine)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = export(model, copy.deepcopy(p.args), dynamic_shapes=p.dynamic_shapes, strict=strict)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return f"export fails: {_first_line(e)}"
    notes = _check_runs(p, eager_make, ep, "ep")
    try:
        table = p.table() if p.table is not None else None
        dec = ep.run_decompositions(table) if table is not None else ep.run_decompositions()
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        notes.append(f"decomp fails: {_first_line(e)}")
        dec = None
    if dec is not None:
        notes += _check_runs(p, eager_make, dec, "decomp")
        left = {str(n.target) for n in dec.graph.nodes if n.op == "call_function"}
        for name in p.gone_after_decomp:
            if any(name in t for t in left):
                notes.append(f"decomp: {name} still there")
    for stage, prog in (("saved", ep), ("decomp+saved", dec)):
        if prog is None:
            continue
        try:
            loaded = roundtrip(prog)
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage}: save/load fails: {_first_line(e)}")
            continue
        notes += _check_runs(p, eager_make, loaded, stage)
    return "=" if not notes else "; ".join(dict.fromkeys(notes))


# ---------------------------------------------------------------------------- custom operators


@torch.library.custom_op("ops_audit::two_out", mutates_args=())
def two_out(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.sin(), x.cos() * 2


@two_out.register_fake
def _(x):
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("ops_audit::many_args", mutates_args=())
def many_args(xs: list[Tensor], w: Optional[Tensor], n: int, alpha: float, mode: str) -> Tensor:
    out = xs[0] * alpha + n
    for t in xs[1:]:
        out = out + t
    if w is not None:
        out = out * w
    return out.relu() if mode == "relu" else out.tanh()


@many_args.register_fake
def _(xs, w, n, alpha, mode):
    return torch.empty_like(xs[0])


@torch.library.custom_op("ops_audit::scale_into", mutates_args=("buf",))
def scale_into(x: Tensor, buf: Tensor, f: float) -> None:
    buf.mul_(f).add_(x.mean())


@scale_into.register_fake
def _(x, buf, f):
    return None


@torch.library.custom_op("ops_audit::acc_and_double", mutates_args=("acc",))
def acc_and_double(x: Tensor, acc: Tensor) -> Tensor:
    acc.add_(x.sum(0))
    return x * 2


@acc_and_double.register_fake
def _(x, acc):
    return torch.empty_like(x)


@torch.library.custom_op("ops_audit::repeat2", mutates_args=())
def repeat2(x: Tensor) -> Tensor:
    return torch.cat([x, x], 0)


@repeat2.register_fake
def _(x):
    return x.new_empty(x.shape[0] * 2, *x.shape[1:])


@torch.library.custom_op("ops_audit::positive", mutates_args=())
def positive(x: Tensor) -> Tensor:
    return x[x > 0]


@positive.register_fake
def _(x):
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(n)


@torch.library.custom_op("ops_audit::split_at", mutates_args=())
def split_at(x: Tensor, k: int) -> list[Tensor]:
    return [x[:k].clone(), x[k:].clone()]


@split_at.register_fake
def _(x, k):
    return [x.new_empty(k, *x.shape[1:]), x.new_empty(x.shape[0] - k, *x.shape[1:])]


@torch.library.custom_op("ops_audit::pad_to", mutates_args=())
def pad_to(x: Tensor, n: int) -> Tensor:
    out = x.new_zeros(n)
    out[: x.shape[0]] = x
    return out


@pad_to.register_fake
def _(x, n):
    return x.new_empty(n)


@torch.library.custom_op("ops_audit::kw_scale", mutates_args=())
def kw_scale(x: Tensor, *, alpha: float = 2.0, dtype: Optional[torch.dtype] = None) -> Tensor:
    y = x * alpha
    return y.to(dtype) if dtype is not None else y


@kw_scale.register_fake
def _(x, *, alpha=2.0, dtype=None):
    return torch.empty_like(x, dtype=dtype if dtype is not None else x.dtype)


@torch.library.custom_op("ops_audit::with_grad", mutates_args=())
def with_grad(x: Tensor) -> Tensor:
    return x.exp()


@with_grad.register_fake
def _(x):
    return torch.empty_like(x)


def _with_grad_backward(ctx, g):
    (y,) = ctx.saved_tensors
    return g * y


def _with_grad_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


with_grad.register_autograd(_with_grad_backward, setup_context=_with_grad_setup)

LOG: list[float] = []


@torch.library.custom_op("ops_audit::log_sum", mutates_args=())
def log_sum(x: Tensor) -> None:
    LOG.append(float(x.sum()))


@log_sum.register_fake
def _(x):
    return None


_LIB = torch.library.Library("ops_audit_lib", "DEF")
_LIB.define("blend(Tensor x, Tensor? y, int[] dims, float alpha=0.5, str mode='sum') -> Tensor")


def _blend(x: Tensor, y: Optional[Tensor], dims: list[int], alpha: float = 0.5, mode: str = "sum") -> Tensor:
    r = x.sum(dims, keepdim=True) if mode == "sum" else x.amax(dims, keepdim=True)
    out = x * alpha + r
    return out if y is None else out - y


_LIB.impl("blend", _blend, "CompositeExplicitAutograd")
torch.library.register_fake("ops_audit_lib::blend", lambda x, y, dims, alpha=0.5, mode="sum": torch.empty_like(x),
                            lib=_LIB)
_LIB.define("bump_out(Tensor x, *, Tensor(a!) out) -> ()")


def _bump_out(x: Tensor, *, out: Tensor) -> None:
    out.add_(x)


_LIB.impl("bump_out", _bump_out, "CompositeExplicitAutograd")
torch.library.register_fake("ops_audit_lib::bump_out", lambda x, *, out: None, lib=_LIB)
_LIB.define("bump_(Tensor(a!) x, float s) -> Tensor(a!)")


def _bump_(x: Tensor, s: float) -> Tensor:
    return x.add_(s)


_LIB.impl("bump_", _bump_, "CompositeExplicitAutograd")
torch.library.register_fake("ops_audit_lib::bump_", lambda x, s: x, lib=_LIB)
_LIB.define("cpu_kernel(Tensor x) -> Tensor")
_LIB.impl("cpu_kernel", lambda x: x * 3 + 1, "CPU")
torch.library.register_fake("ops_audit_lib::cpu_kernel", lambda x: torch.empty_like(x), lib=_LIB)

_EFFECTFUL: list[str] = []
try:
    from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

    @torch.library.custom_op("ops_audit::record", mutates_args=())
    def record(x: Tensor) -> Tensor:
        LOG.append(float(x.sum()))
        return x + 0

    @record.register_fake
    def _(x):
        return torch.empty_like(x)

    _register_effectful_op(torch.ops.ops_audit.record.default, _EffectType.ORDERED)
    _EFFECTFUL.append("ops_audit::record")
except ImportError:
    pass


class Fn1(torch.nn.Module):
    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f

    def forward(self, a: Any) -> Any:
        return self.f(a)


class Fn2(Fn1):
    def forward(self, a: Any, b: Any) -> Any:  # type: ignore[override]
        return self.f(a, b)


class Fn3(Fn1):
    def forward(self, a: Any, b: Any, c: Any) -> Any:  # type: ignore[override]
        return self.f(a, b, c)


def fn(f: Callable[..., Any]) -> Callable[[], torch.nn.Module]:
    cls = {1: Fn1, 2: Fn2, 3: Fn3}[f.__code__.co_argcount]
    return lambda: cls(f)


class BufferOp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.ones(3))

    def forward(self, x: Tensor) -> Tensor:
        scale_into(x, self.buf, 0.5)
        return x + self.buf


class InputOp(torch.nn.Module):
    def forward(self, x: Tensor, acc: Tensor) -> Tensor:
        y = acc_and_double(x, acc)
        return y + acc


class OldOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: Tensor) -> Tensor:
        torch.ops.ops_audit_lib.bump_out(x.sum(0), out=self.total)
        return x * self.total


class Logs(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        log_sum(x)
        return x + 1


class Records(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        a = torch.ops.ops_audit.record(x)
        b = torch.ops.ops_audit.record(x * 2)
        return a + b


def _two_out_table() -> Any:
    t = te.default_decompositions()
    t[torch.ops.ops_audit.two_out.default] = lambda x: (x.sin(), x.cos() * 2)
    return t


def _blend_table() -> Any:
    t = te.default_decompositions()
    t[torch.ops.ops_audit_lib.blend.default] = _blend
    return t


def _repeat_table() -> Any:
    t = te.default_decompositions()
    t[torch.ops.ops_audit.repeat2.default] = lambda x: torch.cat([x, x], 0)
    return t


def _scale_into_table() -> Any:
    t = te.default_decompositions()

    def dec(x: Tensor, buf: Tensor, f: float) -> None:
        buf.mul_(f).add_(x.mean())

    t[torch.ops.ops_audit.scale_into.default] = dec
    return t


# ---------------------------------------------------------------------------- higher-order operators

from torch._higher_order_ops.associative_scan import associative_scan  # noqa: E402
from torch._higher_order_ops.map import map as hop_map  # noqa: E402
from torch._higher_order_ops.scan import scan  # noqa: E402
from torch._higher_order_ops.while_loop import while_loop  # noqa: E402


class NestedCond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("b", torch.arange(3.0))

    def forward(self, x: Tensor) -> Tensor:
        def inner_t(y: Tensor) -> Tensor:
            return torch.cond(y.shape[0] > 4, lambda z: self.lin(z) + self.b, lambda z: z * self.b, (y,))

        def inner_f(y: Tensor) -> Tensor:
            return two_out(y)[0] - self.b

        def outer_t(y: Tensor) -> Tensor:
            return torch.cond(y.sum() > 0, inner_t, inner_f, (y,))

        def outer_f(y: Tensor) -> Tensor:
            return y.cos()

        return torch.cond(x.mean() > -0.5, outer_t, outer_f, (x,))


class CondWritesBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        def t(y: Tensor) -> Tensor:
            self.count.add_(1)
            return y + self.count

        def f(y: Tensor) -> Tensor:
            return y - self.count

        return torch.cond(y_pos(x), t, f, (x,))


class CondWritesInput(torch.nn.Module):
    def forward(self, x: Tensor, acc: Tensor) -> Tensor:
        def t(y: Tensor, a: Tensor) -> Tensor:
            a.add_(1)
            return y + a

        def f(y: Tensor, a: Tensor) -> Tensor:
            return y - a

        return torch.cond(y_pos(x), t, f, (x, acc))


class WhileWritesBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: Tensor) -> Any:
        def c(i: Tensor, y: Tensor) -> Tensor:
            return i < 3

        def b(i: Tensor, y: Tensor) -> Any:
            self.seen.add_(y)
            return i + 1, y * 2

        return while_loop(c, b, (torch.zeros((), dtype=torch.int64), x))


class MapWritesInput(torch.nn.Module):
    def forward(self, xs: Tensor, acc: Tensor) -> Tensor:
        def body(r: Tensor) -> Tensor:
            acc[0:1].add_(r.sum())
            return r * 2

        return hop_map(body, xs)


class ScanWritesCarry(torch.nn.Module):
    def forward(self, xs: Tensor) -> Any:
        def step(c: Tensor, x: Tensor) -> Any:
            c.add_(x)
            return c + 0, c * 1

        return scan(step, torch.zeros(xs.shape[1]), xs)


class NestedCondWritesInNoGrad(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        def inner_t(y: Tensor) -> Tensor:
            with torch.no_grad():
                self.count.add_(1)
            return y + 1

        def t(y: Tensor) -> Tensor:
            return torch.cond(y.mean() > 1, inner_t, lambda z: z * 2, (y,))

        return torch.cond(y_pos(x), t, lambda y: y - 1, (x,))


class CondWritesACopy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.ones(3))

    def forward(self, x: Tensor) -> Tensor:
        def t(y: Tensor) -> Tensor:
            z = self.b.clone()
            z.add_(y)
            z[0:1].mul_(3)
            return z

        return torch.cond(y_pos(x), t, lambda y: y - self.b, (x,))


class CondStructures(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        return torch.cond(y_pos(x), lambda y: (y + 1, y * 2), lambda y: [y - 1, y / 2], (x,))


class CondStructuresDiffer(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        return torch.cond(y_pos(x), lambda y: (y + 1, y * 2), lambda y: y - 1, (x,))


class CondDictOut(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        out = torch.cond(y_pos(x), lambda y: {"a": y + 1, "b": y.sum()},
                         lambda y: {"a": y - 1, "b": y.mean()}, (x,))
        return out["a"] * out["b"]


class CondCustomOp(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        return torch.cond(y_pos(x), lambda y: repeat2(y), lambda y: torch.cat([y, -y], 0), (x,))


class CondScalarOut(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        return torch.cond(y_pos(x), lambda y: (y + 1, y.shape[0] * 2), lambda y: (y - 1, y.shape[0] * 2), (x,))


def y_pos(x: Tensor) -> Tensor:
    return x.sum() > 0


class MapNested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, xs: Tensor, y: Tensor) -> Tensor:
        def outer(row: Tensor, y: Tensor) -> Tensor:
            return hop_map(lambda e, y: e * self.w + y, row, y)

        return hop_map(outer, xs, y)


class MapCustom(torch.nn.Module):
    def forward(self, xs: Tensor) -> Any:
        return hop_map(lambda r: two_out(r), xs)


class MapTwoXs(torch.nn.Module):
    def forward(self, xs: Tensor, zs: Tensor) -> Any:
        return hop_map(lambda pair: pair[0] * pair[1].sum(), (xs, zs))


class WhileCustom(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("step", torch.full((3,), 0.25))

    def forward(self, x: Tensor) -> Any:
        def c(i: Tensor, y: Tensor) -> Tensor:
            return (i < 4) & (y.sum() < 100)

        def b(i: Tensor, y: Tensor) -> Any:
            return i + 1, two_out(y)[1] + self.step

        return while_loop(c, b, (torch.zeros((), dtype=torch.int64), x))


class WhileIntCarry(torch.nn.Module):
    def forward(self, x: Tensor) -> Any:
        def c(i: Any, y: Tensor) -> Any:
            return i < 5

        def b(i: Any, y: Tensor) -> Any:
            return i + 1, y * 1.5

        return while_loop(c, b, (0, x))


class ScanMany(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, xs: Tensor, zs: Tensor) -> Any:
        def step(carry: Any, inp: Any) -> Any:
            h, n = carry
            x, z = inp
            h2 = torch.tanh(self.lin(x) + h * z)
            return (h2, n + 1), (h2 * 2, h2.sum(-1))

        init = (torch.zeros(xs.shape[1], 4), torch.zeros(()))
        return scan(step, init, (xs, zs), reverse=True)


class ScanDim1(torch.nn.Module):
    def forward(self, xs: Tensor) -> Any:
        def step(c: Tensor, x: Tensor) -> Any:
            c2 = c * 0.5 + x
            return c2, repeat2(c2)

        return scan(step, torch.zeros(xs.shape[0]), xs, dim=1)


class AssocTuple(torch.nn.Module):
    def forward(self, a: Tensor, b: Tensor) -> Any:
        def combine(x: Any, y: Any) -> Any:
            return (x[0] * y[0], x[1] * y[0] + y[1])

        return associative_scan(combine, (a, b), dim=1, reverse=True, combine_mode="generic")


class AssocMax(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return associative_scan(torch.maximum, x, dim=0, combine_mode="generic")


class FlexScore(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        def score_mod(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, ki: Tensor) -> Tensor:
            return score + self.bias[ki] + (qi - ki)

        return flex_attention(q, k, v, score_mod=score_mod)


class FlexPlain(torch.nn.Module):
    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention.flex_attention import flex_attention
        return flex_attention(q, k, v)


class FlexBlockMask(torch.nn.Module):
    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def causal(b: Tensor, h: Tensor, qi: Tensor, ki: Tensor) -> Tensor:
            return qi >= ki

        mask = create_block_mask(causal, None, None, q.shape[2], k.shape[2], device="cpu")
        return flex_attention(q, k, v, block_mask=mask)


def _qkv(n: int = 8) -> Inputs:
    return (torch.randn(1, 2, n, 4), torch.randn(1, 2, n, 4), torch.randn(1, 2, n, 4))


N = Dim("n", min=2, max=16)

PROBES: list[Probe] = [
    # -- custom operators
    Probe("custom op returning two tensors, dynamic", fn(lambda x: sum(two_out(x))), (torch.randn(4, 3),),
          dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(2, 3),), (torch.randn(16, 3),)],
          bad_inputs=[(torch.randn(17, 3),)]),
    Probe("custom op returning two tensors, own decomposition entry", fn(lambda x: sum(two_out(x))),
          (torch.randn(4, 3),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(9, 3),)],
          table=_two_out_table, gone_after_decomp=("two_out",)),
    Probe("custom op: list[Tensor], Optional[Tensor] (given), int, float, str",
          fn(lambda a, b, w: many_args([a, b], w, 3, 0.5, "relu")),
          (torch.randn(4, 3), torch.randn(4, 3), torch.randn(3)), dynamic_shapes=({0: N}, {0: N}, None),
          ok_inputs=[(torch.randn(7, 3), torch.randn(7, 3), torch.randn(3))]),
    Probe("custom op: Optional[Tensor] None, str 'tanh'", fn(lambda a: many_args([a], None, -1, 2.0, "tanh")),
          (torch.randn(4, 3),), ok_inputs=[(torch.randn(4, 3) * 5,)]),
    Probe("custom op mutating a buffer (mutates_args)", lambda: BufferOp(), (torch.randn(3),),
          ok_inputs=[(torch.randn(3),)], stateful_runs=3),
    Probe("custom op mutating a buffer, own decomposition entry", lambda: BufferOp(), (torch.randn(3),),
          stateful_runs=2, table=_scale_into_table, gone_after_decomp=("scale_into",)),
    Probe("custom op mutating an input and returning a tensor", lambda: InputOp(),
          (torch.randn(4, 3), torch.zeros(3)), dynamic_shapes=({0: N}, None),
          ok_inputs=[(torch.randn(2, 3), torch.ones(3))]),
    Probe("custom op: output size from a dynamic Dim in the fake kernel", fn(lambda x: repeat2(x).sum(1)),
          (torch.randn(4, 3),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(2, 3),), (torch.randn(16, 3),)],
          bad_inputs=[(torch.randn(1, 3),)]),
    Probe("custom op with dynamic-size fake, own decomposition entry", fn(lambda x: repeat2(x).sum(1)),
          (torch.randn(4, 3),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(11, 3),)],
          table=_repeat_table, gone_after_decomp=("repeat2",)),
    Probe("custom op: data-dependent size (new_dynamic_size)", fn(lambda x: positive(x) * 2),
          (torch.randn(8),), dynamic_shapes=({0: N},),
          ok_inputs=[(-torch.ones(5),), (torch.ones(16),)]),
    Probe("custom op: data-dependent size then used with a view", fn(lambda x: positive(x).view(-1, 1) + x.sum()),
          (torch.randn(8),), ok_inputs=[(-torch.ones(8),)]),
    Probe("custom op returning list[Tensor] sized by an int arg", fn(lambda x: split_at(x, 2)),
          (torch.randn(5, 2),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(16, 2),)]),
    Probe("custom op taking a SymInt (x.shape[0] + 2)", fn(lambda x: pad_to(x, x.shape[0] + 2) * 3),
          (torch.randn(5),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(2),), (torch.randn(16),)]),
    Probe("custom op: keyword-only float and dtype", fn(lambda x: kw_scale(x, alpha=3.0, dtype=torch.float64)),
          (torch.randn(3),)),
    Probe("custom op with register_autograd", fn(lambda x: with_grad(x) + 1), (torch.randn(3),)),
    Probe("custom op returning None, no mutation (logging)", lambda: Logs(), (torch.randn(3),), checks_log=True),
    Probe("Library define+impl: Tensor?, int[], defaults, str", fn(lambda x, y: torch.ops.ops_audit_lib.blend(
        x, y, [1], mode="max") + torch.ops.ops_audit_lib.blend(x, None, [0, 1])),
          (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: N}, {0: N}),
          ok_inputs=[(torch.randn(12, 3), torch.randn(12, 3))]),
    Probe("Library op, own decomposition entry", fn(lambda x: torch.ops.ops_audit_lib.blend(x, None, [1])),
          (torch.randn(4, 3),), table=_blend_table, gone_after_decomp=("blend",)),
    Probe("Library op writing a kwarg-only out= buffer, schema (a!) -> ()", lambda: OldOut(),
          (torch.randn(2, 3),), stateful_runs=2),
    Probe("Library in-place op returning its alias (Tensor(a!) -> Tensor(a!))",
          fn(lambda x: torch.ops.ops_audit_lib.bump_(x.clone(), 2.0) * 2), (torch.randn(3),)),
    Probe("Library in-place op on an input", fn(lambda x: torch.ops.ops_audit_lib.bump_(x, 2.0) + 0),
          (torch.randn(3),)),
    Probe("Library op with a CPU-only kernel", fn(lambda x: torch.ops.ops_audit_lib.cpu_kernel(x)),
          (torch.randn(4, 3),), dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(8, 3),)]),
    *([Probe("effectful custom op (registered ORDERED)", lambda: Records(), (torch.randn(3),), checks_log=True)]
      if _EFFECTFUL else []),
    # -- higher-order operators
    Probe("cond nested 3 deep (shape + data predicates, custom op, Linear, buffer)", lambda: NestedCond(),
          (torch.randn(6, 3),), dynamic_shapes=({0: N},),
          ok_inputs=[(torch.randn(3, 3),), (-torch.ones(6, 3),), (-torch.ones(6, 3) * 0.1,), (torch.randn(16, 3),)]),
    Probe("cond writing a buffer in a branch", lambda: CondWritesBuffer(), (torch.randn(3),),
          ok_inputs=[(-torch.ones(3),)]),
    Probe("cond writing an input in a branch", lambda: CondWritesInput(), (torch.randn(3), torch.zeros(3))),
    Probe("while_loop body writing a buffer", lambda: WhileWritesBuffer(), (torch.randn(3),)),
    Probe("map body writing a closed-over input through a view", lambda: MapWritesInput(),
          (torch.randn(4, 3), torch.zeros(2))),
    Probe("scan combine writing its carry", lambda: ScanWritesCarry(), (torch.randn(4, 3),)),
    Probe("cond in cond writing a buffer under no_grad", lambda: NestedCondWritesInNoGrad(), (torch.ones(3) * 2,)),
    Probe("cond branch writing a copy of a buffer (allowed)", lambda: CondWritesACopy(), (torch.randn(3),),
          ok_inputs=[(-torch.ones(3),), (torch.ones(3),)]),
    Probe("cond: tuple vs list outputs", lambda: CondStructures(), (torch.randn(3),), ok_inputs=[(-torch.ones(3),)]),
    Probe("cond: tuple vs single tensor outputs", lambda: CondStructuresDiffer(), (torch.randn(3),)),
    Probe("cond: dict outputs, 0-d tensor", lambda: CondDictOut(), (torch.randn(3),), ok_inputs=[(-torch.ones(3),)]),
    Probe("cond: int output from a dynamic size", lambda: CondScalarOut(), (torch.randn(4),),
          dynamic_shapes=({0: N},), ok_inputs=[(-torch.ones(9),)]),
    Probe("cond: custom op with dynamic fake size in a branch", lambda: CondCustomOp(), (torch.randn(4),),
          dynamic_shapes=({0: N},), ok_inputs=[(-torch.ones(9),)], table=_repeat_table,
          gone_after_decomp=("repeat2",)),
    Probe("map nested in map, closing over a parameter", lambda: MapNested(), (torch.randn(4, 2, 3), torch.randn(3)),
          dynamic_shapes=({0: N, 1: Dim("m", min=2, max=8)}, None),
          ok_inputs=[(torch.randn(2, 8, 3), torch.randn(3))]),
    Probe("map over a custom op returning two tensors", lambda: MapCustom(), (torch.randn(4, 3),),
          dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(12, 3),)]),
    Probe("map over a tuple of xs", lambda: MapTwoXs(), (torch.randn(4, 3), torch.randn(4, 2)),
          ok_inputs=[(torch.randn(4, 3), torch.randn(4, 2))]),
    Probe("while_loop with a custom op and a buffer", lambda: WhileCustom(), (torch.randn(3),),
          ok_inputs=[(torch.ones(3) * 40,)]),
    Probe("while_loop with a python int carry", lambda: WhileIntCarry(), (torch.randn(3),)),
    Probe("scan reverse, tuple carry and xs, Linear, dynamic length and batch", lambda: ScanMany(),
          (torch.randn(5, 2, 4), torch.randn(5, 2, 4)),
          dynamic_shapes=({0: Dim("t", min=2, max=10), 1: Dim("b", min=2, max=6)},
                          {0: Dim("t", min=2, max=10), 1: Dim("b", min=2, max=6)}),
          ok_inputs=[(torch.randn(10, 6, 4), torch.randn(10, 6, 4)), (torch.randn(2, 3, 4), torch.randn(2, 3, 4))]),
    Probe("scan dim=1 with a custom op (dynamic fake) in the body", lambda: ScanDim1(), (torch.randn(3, 5),),
          dynamic_shapes=({1: Dim("t", min=2, max=10)},), ok_inputs=[(torch.randn(3, 10),)]),
    Probe("associative_scan tuple, dim=1, reverse", lambda: AssocTuple(), (torch.rand(2, 6), torch.randn(2, 6)),
          ok_inputs=[(torch.rand(2, 6), torch.randn(2, 6))]),
    Probe("associative_scan maximum, dynamic", lambda: AssocMax(), (torch.randn(6, 2),),
          dynamic_shapes=({0: N},), ok_inputs=[(torch.randn(16, 2),)]),
    Probe("flex_attention, no mods", lambda: FlexPlain(), _qkv()),
    Probe("flex_attention score_mod closing over a parameter", lambda: FlexScore(), _qkv()),
    Probe("flex_attention with a block_mask (causal)", lambda: FlexBlockMask(), _qkv(128)),
]


def main() -> None:
    want = [a for a in sys.argv[1:] if not a.startswith("-")]
    modes = (False,) if "--no-strict" in sys.argv else (False, True)
    for p in PROBES:
        if want and not any(w in p.name for w in want):
            continue
        for strict in modes:
            g = _run_side("g", p, strict)
            t = _run_side("t", p, strict) if "--no-torch" not in sys.argv else "-"
            print(f"{p.name} [{'strict' if strict else 'non-strict'}] | graphcap: {g} | torch: {t}", flush=True)


if __name__ == "__main__":
    main()
