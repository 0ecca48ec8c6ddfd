"""Training IR audit: grad / autocast regions, train-mode layers and backprop through module().

Each probe is exported with graphcap and with torch.export (the reference), non-strict and
strict; each program's ``module()`` is run on fresh inputs (some requiring grad), and its outputs
(values, dtype, ``requires_grad``), the buffers it writes and the gradients a ``backward`` of
their sum leaves on parameters and inputs are compared with eager's. Then the same after
``run_decompositions()`` (values and dtype only: the inference IR has no grad regions) and after
each library's save/load. Prints one line per probe and mode:

    name [strict] | graphcap: <verdict> | torch: <verdict>

Run:  PYTHONPATH=src python bench/probes/training_ir_audit.py [name-substring ...] [-v]
"""
from __future__ import annotations

import copy
import sys
import traceback
from typing import Any, Callable

import torch
import torch.export as te
from _compare import roundtrip
from torch import nn

import graphcap

VERBOSE = "-v" in sys.argv


def _leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _leaves(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _leaves(o)]
    return []


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.allclose(a.float(), b.float(), atol=2e-2 if a.dtype == torch.bfloat16 else 1e-5)


def _run(fn: Callable, model: nn.Module | None, make_inputs: Callable, seed: int, backward: bool, grad_mode: bool):
    """Run fn on fresh inputs; return (outs, dtypes, requires_grad, grads) as plain data."""
    args = make_inputs()
    torch.manual_seed(seed)
    with torch.set_grad_enabled(grad_mode):
        out = fn(*args)
    leaves = _leaves(out)
    facts = [(o.detach().clone(), o.dtype, o.requires_grad) for o in leaves]
    grads: dict[str, Any] = {}
    if backward:
        diff = [o for o in leaves if o.requires_grad]
        if diff:
            sum(o.float().sum() for o in diff).backward()
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                grads[f"input{i}"] = None if a.grad is None else a.grad.clone()
        params = dict(fn.named_parameters()) if isinstance(fn, nn.Module) else {}
        for name, p in params.items():
            grads[name] = None if p.grad is None else p.grad.clone()
    return facts, grads


def _compare(tag: str, ref, got, check_rg: bool = True, check_grads: bool = True) -> list[str]:
    (rf, rgr), (gf, ggr) = ref, got
    bad = []
    if len(rf) != len(gf):
        return [f"{tag}: {len(gf)} outputs, eager {len(rf)}"]
    for i, ((rv, rd, rr), (gv, gd, gr)) in enumerate(zip(rf, gf)):
        if rd != gd:
            bad.append(f"{tag}: out{i} dtype {gd}, eager {rd}")
        elif not _close(rv, gv):
            bad.append(f"{tag}: out{i} values WRONG")
        if check_rg and rr != gr:
            bad.append(f"{tag}: out{i} requires_grad {gr}, eager {rr}")
    if check_grads:
        for k, v in rgr.items():
            if k not in ggr:
                # module() names parameters by FQN too; a missing key means no grad was seen
                bad.append(f"{tag}: grad {k} missing")
            elif not _close(v, ggr[k]):
                got_kind = "None" if ggr[k] is None else "value"
                bad.append(f"{tag}: grad {k} WRONG ({got_kind} vs {'None' if v is None else 'value'})")
    return bad


def _buffers(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.named_buffers()}


class Probe:
    def __init__(self, name, make, make_inputs, backward=True, grad_mode=True, seed=0, train=False):
        self.name, self.make, self.make_inputs = name, make, make_inputs
        self.backward, self.grad_mode, self.seed, self.train = backward, grad_mode, seed, train


def check(p: Probe, lib: str, strict: bool) -> str:
    torch.manual_seed(0)
    base = p.make()
    base.train(p.train)
    eager = copy.deepcopy(base)
    ref = _run(eager, eager, p.make_inputs, p.seed, p.backward, p.grad_mode)
    ref_bufs = _buffers(eager)
    problems: list[str] = []
    try:
        model = copy.deepcopy(base)
        torch.manual_seed(p.seed)
        ex = p.make_inputs()
        exporter = graphcap.export if lib == "graphcap" else te.export
        ep = exporter(model, tuple(ex), strict=strict)
    except Exception as e:
        if VERBOSE:
            traceback.print_exc()
        return f"export fails: {type(e).__name__}: {str(e).splitlines()[0][:140]}"
    stages: list[tuple[str, Callable[[], Any], bool]] = []
    stages.append(("module", lambda: ep, True))
    stages.append(("decomposed", lambda: ep.run_decompositions(), False))
    stages.append(("saved", lambda: roundtrip(ep), True))
    for tag, get, full in stages:
        try:
            prog = get()
            m = prog.module()
            got = _run(m, m, p.make_inputs, p.seed, p.backward and full, p.grad_mode)
            problems += _compare(tag, ref, got, check_rg=full, check_grads=p.backward and full)
            gb = _buffers(m)
            for k, v in ref_bufs.items():
                if k in gb and not _close(v, gb[k]):
                    problems.append(f"{tag}: buffer {k} WRONG")
        except Exception as e:
            if VERBOSE:
                traceback.print_exc()
            problems.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    return "=" if not problems else "; ".join(problems)


# ---------------------------------------------------------------------------- probes


def _x(*shape, rg=False):
    def make():
        torch.manual_seed(1)
        t = torch.randn(*shape)
        return (t.requires_grad_(rg),)
    return make


def _pair(rx: bool, ry: bool):
    torch.manual_seed(1)
    return torch.randn(3, 4).requires_grad_(rx), torch.randn(3, 4).requires_grad_(ry)


class NoGradRegion(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            h = self.a(x)
        return self.b(h) + h, h


class EnableGradInside(nn.Module):  # forward called under no_grad, enable_grad inside
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.enable_grad():
            y = self.a(x)
        return y, self.a(x)


class SetGradToggles(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        torch.set_grad_enabled(False)
        h = self.a(x)
        torch.set_grad_enabled(True)
        return self.b(h).relu(), h.sin()


class SetGradCtx(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.set_grad_enabled(False):
            h = self.a(x) * 2
        with torch.set_grad_enabled(True):
            g = self.a(h)
        return g, h


class NoGradDecorated(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    @torch.no_grad()
    def helper(self, x):
        return self.a(x)

    def forward(self, x):
        return self.a(x) + self.helper(x)


class Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        return y.detach() * 2 + y, y.detach()


class InferenceModeInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.inference_mode():
            h = x * 2
        return self.a(x) + h.clone()


class NoGradOutputOnly(nn.Module):  # every output made under no_grad
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            return self.a(x).relu()


class InputGradOnly(nn.Module):  # no parameters; input requires grad
    def forward(self, x, y):
        with torch.no_grad():
            s = y.sum()
        return x.sin() * s, (x * y).cos()


class Autocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
            m = h @ h.t()
        return self.b(h.float()), m, h


class AutocastNoGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                h = self.a(x)
            y = self.a(x)
        return y, h


class FrozenParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.a.weight.requires_grad_(False)

    def forward(self, x):
        return self.b(self.a(x)).relu()


class AllFrozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        return self.a(x)


class BNDrop(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.d = nn.Dropout(0.3)

    def forward(self, x):
        return self.d(self.bn(self.l(x)))


class BNMomentumNone(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3, momentum=None)

    def forward(self, x):
        return self.bn(x)


class TrainingBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        return torch.nn.functional.dropout(y, 0.5, self.training) + (1.0 if self.training else 0.0)


class GradInsideNoGradParamUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.register_buffer("ema", torch.zeros(4, 4))

    def forward(self, x):
        with torch.no_grad():
            self.ema.mul_(0.9).add_(self.a.weight * 0.1)
        return self.a(x) + self.ema.sum()


class RequiresGradQuery(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        return y * 2 if torch.is_grad_enabled() else y * 3


class NestedNoGradEnable(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            h = self.a(x)
            with torch.enable_grad():
                g = self.b(h)
            k = self.b(h)
        return g + k, k


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        h = torch.utils.checkpoint.checkpoint(lambda t: self.a(t).relu(), x, use_reentrant=False)
        return self.b(h)


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class UsesFunction(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.fn = nn.Linear(4, 4), fn

    def forward(self, x):
        return self.fn.apply(self.a(x) * 3)


class WritesInputUnderNoGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            x.mul_(2)
        return self.a(x) * x


PROBES = [
    Probe("no_grad region", NoGradRegion, _x(3, 4)),
    Probe("no_grad region, input requires grad", NoGradRegion, _x(3, 4, rg=True)),
    Probe("enable_grad inside, called under no_grad", EnableGradInside, _x(3, 4), grad_mode=False),
    Probe("set_grad_enabled toggles", SetGradToggles, _x(3, 4)),
    Probe("set_grad_enabled context", SetGradCtx, _x(3, 4, rg=True)),
    Probe("@no_grad helper", NoGradDecorated, _x(3, 4)),
    Probe("detach", Detached, _x(3, 4)),
    Probe("inference_mode inside", InferenceModeInside, _x(3, 4)),
    Probe("every output under no_grad", NoGradOutputOnly, _x(3, 4)),
    Probe("input grad only", InputGradOnly, lambda: _pair(True, False)),
    Probe("both inputs grad", InputGradOnly, lambda: _pair(True, True)),
    Probe("autocast bf16", Autocast, _x(3, 4)),
    Probe("autocast + no_grad", AutocastNoGrad, _x(3, 4)),
    Probe("frozen weight", FrozenParams, _x(3, 4)),
    Probe("all frozen", AllFrozen, _x(3, 4)),
    Probe("all frozen, input grad", AllFrozen, _x(3, 4, rg=True)),
    Probe("BN+dropout train", BNDrop, _x(8, 4), train=True, seed=3),
    Probe("BN+dropout eval", BNDrop, _x(8, 4), train=False),
    Probe("BN momentum None train", BNMomentumNone, _x(2, 3, 4, 4), train=True),
    Probe("self.training branch train", TrainingBranch, _x(3, 4), train=True, seed=5),
    Probe("self.training branch eval", TrainingBranch, _x(3, 4), train=False),
    Probe("ema under no_grad", GradInsideNoGradParamUpdate, _x(3, 4)),
    Probe("is_grad_enabled branch", RequiresGradQuery, _x(3, 4)),
    Probe("is_grad_enabled branch, run under no_grad", RequiresGradQuery, _x(3, 4), grad_mode=False),
    Probe("nested no_grad/enable_grad", NestedNoGradEnable, _x(3, 4)),
    Probe("activation checkpoint", Checkpointed, _x(3, 4, rg=True)),
    Probe("autograd.Function, true backward", lambda: UsesFunction(_SiLU), _x(3, 4)),
    Probe("autograd.Function, straight-through backward", lambda: UsesFunction(_StraightThrough), _x(3, 4)),
    Probe("leaf input requiring grad written under no_grad", WritesInputUnderNoGrad, _x(3, 4, rg=True)),
]


# ---------------------------------------------------------------------------- scenarios
# Each returns a short verdict per library and mode; printed as "scenario [strict] | graphcap: ... | torch: ...".


def _rg(out):
    return [t.requires_grad for t in _leaves(out)]


X = torch.randn(8, 4)


def s_export_under_no_grad(ex, strict, lib):
    """NoGradRegion exported under no_grad, run with grad: eager says [True, False]."""
    with torch.no_grad():
        ep = ex(NoGradRegion(), (X,), strict=strict)
    return _rg(ep.module()(X))


def s_enable_grad_under_no_grad_export(ex, strict, lib):
    """EnableGradInside exported and run under no_grad: eager says [True, False]."""
    with torch.no_grad():
        ep = ex(EnableGradInside(), (X,), strict=strict)
        return _rg(ep.module()(X))


def s_export_under_inference_mode(ex, strict, lib):
    m = BNDrop().eval()
    with torch.inference_mode():
        ep = ex(m, (X,), strict=strict)
    return torch.allclose(ep.module()(X), m(X))


def s_ambient_autocast(ex, strict, lib):
    """Exported inside autocast: (dtype run outside, inside, eager outside)."""
    m = nn.Linear(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ep = ex(m, (X,), strict=strict)
        inside = ep.module()(X).dtype
    return ep.module()(X).dtype, inside, m(X).dtype


def s_sgd_loop(ex, strict, lib):
    torch.manual_seed(0)
    m = GradInsideNoGradParamUpdate()
    runs = []
    for mod in (copy.deepcopy(m), ex(copy.deepcopy(m), (X,), strict=strict).module()):
        opt = torch.optim.SGD(mod.parameters(), lr=0.1)
        outs = []
        for i in range(3):
            opt.zero_grad()
            y = mod(X + i)
            y.sum().backward()
            opt.step()
            outs.append(y.detach())
        runs.append(torch.cat(outs))
    return torch.allclose(*runs)


def s_functional_call_and_func_grad(ex, strict, lib):
    torch.manual_seed(0)
    m = BNDrop().eval()
    g = ex(copy.deepcopy(m), (X,), strict=strict).module()
    params = {k: v.detach() * 2 for k, v in m.named_parameters()}
    ge = torch.func.grad(lambda p: torch.func.functional_call(m, p, (X,)).sum())(params)
    gg = torch.func.grad(lambda p: torch.func.functional_call(g, p, (X,)).sum())(params)
    return all(torch.allclose(ge[k], gg[k]) for k in ge)


def s_double_backward(ex, strict, lib):
    class M(nn.Module):
        def forward(self, x):
            return (x.sin() * x).sum()
    m = M()
    g = ex(m, (X,), strict=strict).module()
    r = []
    for mod in (m, g):
        xx = X.clone().requires_grad_()
        (gx,) = torch.autograd.grad(mod(xx), xx, create_graph=True)
        r.append(torch.autograd.grad(gx.sum(), xx)[0])
    return torch.allclose(*r)


def s_train_mode_three_calls(ex, strict, lib):
    """(module, decomposed, saved) equal eager over 3 calls, buffers included."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    m.eval()
    m[1].train()
    ep = ex(copy.deepcopy(m), (X,), strict=strict)
    res = []
    for g in (ep.module(), ep.run_decompositions().module(), roundtrip(ep).module()):
        e, ok = copy.deepcopy(m), True
        for i in range(3):
            torch.manual_seed(i)
            want = e(X + i)
            torch.manual_seed(i)
            ok &= torch.allclose(want, g(X + i), atol=1e-5)
        gb = dict(g.named_buffers())
        res.append(ok and all(torch.allclose(v.float(), gb[k].float()) for k, v in e.named_buffers()))
    return res


def s_lstm_dropout(ex, strict, lib):
    torch.manual_seed(0)
    m = nn.LSTM(4, 5, num_layers=2, dropout=0.5, batch_first=True).train()
    x = torch.randn(2, 3, 4)
    ep = ex(copy.deepcopy(m), (x,), strict=strict)
    res = []
    for g in (ep.module(), ep.run_decompositions().module(), roundtrip(ep).module()):
        torch.manual_seed(1)
        want = m(x)[0]
        torch.manual_seed(1)
        res.append(torch.allclose(want, g(x)[0], atol=1e-5))
    return res


def s_train_eval_calls(ex, strict, lib):
    m = BNDrop().eval()
    ep = ex(copy.deepcopy(m), (X,), strict=strict)
    out = []
    for prog in (ep, ep.run_decompositions()):
        for meth in ("train", "eval"):
            try:
                getattr(prog.module(), meth)()
                out.append("ok")
            except NotImplementedError:
                out.append("NotImplementedError")
    from torchao.quantization.pt2e import move_exported_model_to_train
    g = ep.module()
    move_exported_model_to_train(g)
    torch.manual_seed(0)
    a = g(X)
    torch.manual_seed(0)
    out.append(torch.allclose(a, copy.deepcopy(m).train()(X)))
    return out


def s_frozen_state(ex, strict, lib):
    m = nn.Linear(4, 4)
    m.weight.requires_grad_(False)
    ep = ex(m, (X,), strict=strict)
    before = (ep.state_dict["weight"].requires_grad, roundtrip(ep).state_dict["weight"].requires_grad)
    g = ep.module()
    dict(g.named_parameters())["weight"].requires_grad_(True)  # module() shares it with ep.state_dict
    g(X).sum().backward()
    return (*before, dict(g.named_parameters())["weight"].grad is not None)


def s_autocast_variants(ex, strict, lib):
    class A2(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.float16, cache_enabled=False):
                h = self.a(x)
                with torch.autocast("cpu", enabled=False):
                    k = self.a(h.float())
            return h, k

    class A3(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        @torch.autocast("cpu", dtype=torch.bfloat16)
        def forward(self, x):
            return self.a(x).relu()
    res = []
    for make in (A2, A3):
        m = make()
        ep = ex(m, (X,), strict=strict)
        want = _leaves(m(X))
        for prog in (ep, ep.run_decompositions(), roundtrip(ep)):
            got = _leaves(prog.module()(X))
            res.append(all(a.dtype == b.dtype and torch.allclose(a.float(), b.float(), atol=1e-2)
                           for a, b in zip(want, got)))
    return res


def s_decomposed_train_bn_backward(ex, strict, lib):
    m = BNDrop().train()
    g = ex(copy.deepcopy(m), (X,), strict=strict).run_decompositions().module()
    g(X).sum().backward()
    return "backward ok"


def s_autograd_grad_in_forward(ex, strict, lib):
    class GP(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 1)

        def forward(self, x):
            x = x.requires_grad_()
            (g,) = torch.autograd.grad(self.a(x).tanh().sum(), x, create_graph=True)
            return g
    ex(GP(), (X,), strict=strict)
    return "exported"


def s_reentrant_and_selective_checkpoint(ex, strict, lib):
    """(reentrant, selective): outputs and input gradients equal eager's."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    class C(nn.Module):
        def __init__(self, reentrant):
            super().__init__()
            self.a, self.reentrant = nn.Linear(4, 4), reentrant

        def forward(self, x):
            def f(t):
                return self.a(t).relu()
            if self.reentrant:
                return checkpoint(f, x, use_reentrant=True) * 2
            return checkpoint(f, x, use_reentrant=False,
                              context_fn=lambda: create_selective_checkpoint_contexts(policy)) * 2
    out = []
    for reentrant in (True, False):
        try:
            torch.manual_seed(0)
            m = C(reentrant)
            g = ex(copy.deepcopy(m), (X,), strict=strict).module()
            r = []
            for mod in (m, g):
                xx = X.clone().requires_grad_()
                o = mod(xx)
                o.sum().backward()
                r.append((o.detach(), xx.grad))
            out.append(all(torch.allclose(a, b) for a, b in zip(*r)))
        except Exception as e:
            out.append(f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")
    return out


SCENARIOS = [s_reentrant_and_selective_checkpoint,
             s_export_under_no_grad, s_enable_grad_under_no_grad_export, s_export_under_inference_mode,
             s_ambient_autocast, s_sgd_loop, s_functional_call_and_func_grad, s_double_backward,
             s_train_mode_three_calls, s_lstm_dropout, s_train_eval_calls, s_frozen_state,
             s_autocast_variants, s_decomposed_train_bn_backward, s_autograd_grad_in_forward]


def _scenario(fn, lib, strict) -> str:
    try:
        return str(fn(graphcap.export if lib == "graphcap" else te.export, strict, lib))
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def main() -> None:
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    for p in PROBES:
        if wanted and not any(w in p.name for w in wanted):
            continue
        for strict in (False, True):
            g = check(p, "graphcap", strict)
            t = "-" if "--no-torch" in sys.argv else check(p, "torch", strict)
            print(f"{p.name}{' [strict]' if strict else ''} | graphcap: {g} | torch: {t}", flush=True)
    for fn in SCENARIOS:
        if wanted and not any(w in fn.__name__ for w in wanted):
            continue
        for strict in (False, True):
            g = _scenario(fn, "graphcap", strict)
            t = "-" if "--no-torch" in sys.argv else _scenario(fn, "torch", strict)
            print(f"{fn.__name__}{' [strict]' if strict else ''} | graphcap: {g} | torch: {t}", flush=True)


if __name__ == "__main__":
    main()
