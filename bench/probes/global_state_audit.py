"""Global state and randomness: graphcap against torch.export.

Each probe builds a fresh model, exports it with graphcap and with torch.export
(strict=False and strict=True) and reports one line per library and mode:

* random probes: for ``ep.module()``, the decomposed program and the saved/loaded one,
  whether two calls differ (``random``, as eager's do) and whether, with
  ``torch.manual_seed(s)`` before the call, the program gives what eager gives with the
  same seed (``seeded=`` / ``seeded DIFFERS``);
* grad-mode, autocast, default-dtype and backend-flag probes: the output's values, dtype and
  ``requires_grad`` against eager's (``=`` when all three match), per stage;
* state probes (BatchNorm in train mode, globals changed after export): the state after
  a ``module()`` call against eager's;
* failing exports: which of torch's process-wide switches (grad mode, inference mode,
  autocast, default dtype, deterministic algorithms) differ after the failed export from
  before it.

    name | lib/mode | verdict

Run: PYTHONPATH=src python bench/probes/global_state_audit.py [name-substring ...]
"""
from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from typing import Any, Callable

import torch
import torch.export as te
import torch.nn as nn
import torch.nn.functional as F
from _compare import roundtrip

import graphcap

logging.disable(logging.WARNING)

PROBES: list[tuple[str, Callable[[str, bool], str]]] = []


def probe(fn):
    PROBES.append((fn.__name__, fn))
    return fn


def _export(lib: str, strict: bool, model: nn.Module, args: tuple, kwargs: dict | None = None) -> Any:
    fn = graphcap.export if lib == "graphcap" else te.export
    return fn(model, args, kwargs, strict=strict)


def _stages(lib: str, ep: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for stage, make in (("module", lambda: ep.module()),
                        ("decomp", lambda: ep.run_decompositions().module()),
                        ("saved", lambda: roundtrip(ep).module())):
        try:
            out.append((stage, make()))
        except Exception as e:
            out.append((stage, f"FAILS {type(e).__name__}: {_first(e)}"))
    return out


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:110] if text else ""


def _leaves(x: Any) -> list:
    return torch.utils._pytree.tree_leaves(x)


def _same(a: Any, b: Any) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(
        (x.shape == y.shape and x.dtype == y.dtype and torch.allclose(x.float(), y.float(), atol=1e-5))
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
        for x, y in zip(la, lb))


def _describe(a: Any, b: Any) -> str:
    """What differs between eager's output ``a`` and the program's ``b``: '' when nothing."""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return f"{len(lb)} outputs, eager {len(la)}"
    bits = []
    for x, y in zip(la, lb):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if x != y:
                bits.append(f"{y!r}!={x!r}")
            continue
        if x.dtype != y.dtype:
            bits.append(f"dtype {y.dtype} (eager {x.dtype})")
        if x.requires_grad != y.requires_grad:
            bits.append(f"requires_grad {y.requires_grad} (eager {x.requires_grad})")
        if x.shape != y.shape or not torch.allclose(x.double(), y.double(), atol=1e-3):
            bits.append("VALUES DIFFER")
    return ", ".join(bits)


def _run(lib: str, strict: bool, make: Callable[[], tuple[nn.Module, tuple]],
         check: Callable[[nn.Module, Any, tuple], str],
         export_ctx: Callable[[], Any] = contextlib.nullcontext) -> str:
    model, args = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with export_ctx():
                ep = _export(lib, strict, model, args)
        except Exception as e:
            return f"FAILS {type(e).__name__}: {_first(e)}"
    told = sorted({str(w.message)[:70].replace("\n", " ") for w in caught
                   if issubclass(w.category, UserWarning) and "deprecated" not in str(w.message)})
    parts = []
    for stage, prog in _stages(lib, ep):
        if isinstance(prog, str):
            parts.append(f"{stage} {prog}")
            continue
        try:
            verdict = check(prog, make, args)
        except Exception as e:
            verdict = f"FAILS {type(e).__name__}: {_first(e)}"
        parts.append(f"{stage} {verdict}")
    if told:
        parts.append("warns: " + " / ".join(told))
    return "; ".join(parts)


# ------------------------------------------------------------------------ checks

def random_check(prog: Any, make: Callable, args: tuple) -> str:
    """Two calls differ? The program with a seed gives eager's seeded values?"""
    a, b = prog(*args), prog(*args)
    rand = "random" if not _same(a, b) else "CONSTANT"
    eager, _ = make()
    torch.manual_seed(11)
    want = eager(*args)
    after_eager = torch.rand(1)
    torch.manual_seed(11)
    got = prog(*args)
    after_prog = torch.rand(1)
    seeded = "seeded=" if _same(want, got) else "seeded DIFFERS"
    stream = "" if torch.equal(after_eager, after_prog) else " (generator left elsewhere)"
    return f"{rand} {seeded}{stream}"


def value_check(prog: Any, make: Callable, args: tuple, call_ctx: Callable[[], Any] = contextlib.nullcontext) -> str:
    eager, _ = make()
    with call_ctx():
        want = eager(*args)
        got = prog(*args)
    return _describe(want, got) or "="


def seeded_values(prog: Any, make: Callable, args: tuple) -> str:
    """For programs meant to be deterministic given the seed (a seed set by the caller)."""
    eager, _ = make()
    torch.manual_seed(3)
    want = eager(*args)
    torch.manual_seed(3)
    got = prog(*args)
    return _describe(want, got) or "="


# ------------------------------------------------------------------------ random operators

class Fn(nn.Module):
    def __init__(self, fn: Callable, **params: torch.Tensor):
        super().__init__()
        self.fn = fn
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.fn(self, x)


def _random_probe(name: str, fn: Callable, train: bool = True, x: Callable[[], torch.Tensor] | None = None):
    def make():
        torch.manual_seed(0)
        m = Fn(fn).train(train)
        return m, ((x or (lambda: torch.randn(3, 4)))(),)

    def run(lib: str, strict: bool) -> str:
        return _run(lib, strict, make, random_check)
    run.__name__ = name
    probe(run)


_random_probe("randn_shape", lambda m, x: x + torch.randn(3, 4))
_random_probe("rand_like", lambda m, x: m.lin(x) * torch.rand_like(x))
_random_probe("randint", lambda m, x: x + torch.randint(0, 10, (3, 4)))
_random_probe("randint_like", lambda m, x: x + torch.randint_like(x, 5))
_random_probe("bernoulli_p", lambda m, x: torch.bernoulli(torch.sigmoid(x)) * x)
_random_probe("bernoulli_scalar", lambda m, x: x.bernoulli(0.3) + x)
_random_probe("dropout_module_train", lambda m, x: F.dropout(m.lin(x), 0.5, m.training))
_random_probe("F_dropout_training_true", lambda m, x: F.dropout(m.lin(x), p=0.4, training=True), train=False)
_random_probe("randperm", lambda m, x: x[torch.randperm(3)])
_random_probe("normal_inplace_new", lambda m, x: x + torch.empty(3, 4).normal_(0, 2))
_random_probe("normal_inplace_clone", lambda m, x: x.clone().normal_() * x)
_random_probe("uniform_exponential", lambda m, x: x.clone().uniform_(-1, 1) + torch.empty_like(x).exponential_())
_random_probe("multinomial", lambda m, x: torch.multinomial(x.abs() + 0.1, 2).float())
_random_probe("two_draws_order", lambda m, x: torch.rand(3, 4) - 2 * torch.randn(3, 4) + x)
_random_probe("dropout2d_alpha",
              lambda m, x: F.alpha_dropout(F.dropout2d(x.reshape(1, 3, 4, 1), 0.5, True), 0.3, True).reshape(3, 4))
_random_probe("rrelu_train", lambda m, x: F.rrelu(x, training=True))
_random_probe("native_dropout_eval_is_identity", lambda m, x: F.dropout(m.lin(x), 0.5, m.training), train=False)

_random_probe("normal_tensor_mean_poisson", lambda m, x: torch.normal(x, 1.0) + torch.poisson(x.abs()))
_random_probe("distributions_sample", lambda m, x: torch.distributions.Normal(x, x.abs() + 1).rsample())
_random_probe("random_cauchy_lognormal", lambda m, x: torch.empty_like(x).random_(0, 5)
              + torch.empty_like(x).cauchy_() * 0 + torch.empty_like(x).log_normal_())


class BufferNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("noise", torch.zeros(3, 4))

    def forward(self, x):
        self.noise.normal_()  # a buffer re-drawn in place on each call
        return x + self.noise


@probe
def buffer_redrawn_in_place(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (BufferNoise(), (torch.randn(3, 4),)), random_check)


class ForkRng(nn.Module):
    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            fixed = torch.rand(3, 4)  # the same values on every call; the caller's stream untouched
        return x + fixed + torch.rand(3, 4)


@probe
def fork_rng_in_forward(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (ForkRng(), (torch.randn(3, 4),)), random_check)


class RngStateReplay(nn.Module):
    def forward(self, x):
        state = torch.get_rng_state()
        a = torch.rand(3, 4)
        torch.set_rng_state(state)
        b = torch.rand(3, 4)  # eager: the same values as a
        return x + a - b


@probe
def get_set_rng_state_in_forward(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (RngStateReplay(), (torch.randn(3, 4),)), random_check)


class DynamicNoise(nn.Module):
    def forward(self, x):
        return x + torch.randn(x.shape) + torch.rand_like(x)


@probe
def random_with_dynamic_batch(lib: str, strict: bool) -> str:
    def make():
        return DynamicNoise(), (torch.randn(3, 4),)

    def run_dynamic(lib: str, strict: bool) -> Any:
        fn = graphcap.export if lib == "graphcap" else te.export
        return fn(DynamicNoise(), (torch.randn(3, 4),), dynamic_shapes=({0: te.Dim("b", min=2)},), strict=strict)
    try:
        ep = run_dynamic(lib, strict)
    except Exception as e:
        return f"FAILS {type(e).__name__}: {_first(e)}"
    parts = []
    for stage, prog in _stages(lib, ep):
        if isinstance(prog, str):
            parts.append(f"{stage} {prog}")
            continue
        parts.append(f"{stage} {random_check(prog, make, (torch.randn(6, 4),))}")
    return "; ".join(parts)


class GenInput(nn.Module):
    def forward(self, x, g):
        return x + torch.rand(x.shape, generator=g)


@probe
def generator_passed_in(lib: str, strict: bool) -> str:
    def make():
        return GenInput(), (torch.randn(3, 4), torch.Generator().manual_seed(1))

    def check(prog, make, args):
        x = args[0]
        a = prog(x, torch.Generator().manual_seed(5))
        b = GenInput()(x, torch.Generator().manual_seed(5))
        return "=" if _same(a, b) else "VALUES DIFFER"
    return _run(lib, strict, make, check)


class GenAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(4)

    def forward(self, x):
        return x + torch.rand(x.shape, generator=self.g)


@probe
def generator_attribute(lib: str, strict: bool) -> str:
    def make():
        return GenAttr(), (torch.randn(3, 4),)

    def check(prog, make, args):
        eager, _ = make()
        w1, w2 = eager(*args), eager(*args)
        g1, g2 = prog(*args), prog(*args)
        return f"first {'=' if _same(w1, g1) else 'DIFFERS'}, second {'=' if _same(w2, g2) else 'DIFFERS'}"
    return _run(lib, strict, make, check)


class SdpaDropout(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


@probe
def sdpa_dropout(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (SdpaDropout(), (torch.randn(1, 2, 4, 8),)), random_check)


# ------------------------------------------------------------------------ grad mode

class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


def _lin():
    torch.manual_seed(0)
    return Lin(), (torch.randn(2, 4),)


@probe
def export_under_no_grad(lib: str, strict: bool) -> str:
    return _run(lib, strict, _lin, value_check, export_ctx=torch.no_grad)


@probe
def export_under_inference_mode(lib: str, strict: bool) -> str:
    return _run(lib, strict, _lin, value_check, export_ctx=torch.inference_mode)


@probe
def call_under_no_grad(lib: str, strict: bool) -> str:
    return _run(lib, strict, _lin, lambda p, m, a: value_check(p, m, a, torch.no_grad))


@probe
def call_under_inference_mode(lib: str, strict: bool) -> str:
    return _run(lib, strict, _lin, lambda p, m, a: value_check(p, m, a, torch.inference_mode))


class GradRegions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        with torch.set_grad_enabled(False):
            y = self.a(x)
        z = self.b(y)
        with torch.no_grad():
            w = z * 2
        return y, z, w


@probe
def set_grad_enabled_in_forward(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return GradRegions(), (torch.randn(2, 4),)
    return _run(lib, strict, make, value_check)


class EnableGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        with torch.enable_grad():
            y = self.a(x)
        return y, self.a(x)


@probe
def enable_grad_in_forward_export_no_grad(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return EnableGrad(), (torch.randn(2, 4),)
    return _run(lib, strict, make, lambda p, m, a: value_check(p, m, a, torch.no_grad), export_ctx=torch.no_grad)


class GradFlip(nn.Module):
    def forward(self, x):
        torch.set_grad_enabled(False)  # not restored: a plain call, not a context
        y = x * 2
        torch.set_grad_enabled(True)
        return y + 1


@probe
def set_grad_enabled_plain_calls(lib: str, strict: bool) -> str:
    def make():
        return GradFlip(), (torch.randn(2, 4, requires_grad=True),)
    return _run(lib, strict, make, value_check)


class ReadsGradMode(nn.Module):
    def forward(self, x):
        return x * 2 if torch.is_grad_enabled() else x * 3


@probe
def branch_on_is_grad_enabled(lib: str, strict: bool) -> str:
    # exported with grad on, called under no_grad: eager takes the other branch
    return _run(lib, strict, lambda: (ReadsGradMode(), (torch.randn(2, 4),)),
                lambda p, m, a: value_check(p, m, a, torch.no_grad))


@probe
def inference_tensor_inputs(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        with torch.inference_mode():
            x = torch.randn(2, 4)
        return Lin(), (x,)
    return _run(lib, strict, make, value_check)


@probe
def model_built_under_inference_mode(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        with torch.inference_mode():
            m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()
        return m, (torch.randn(3, 4),)
    return _run(lib, strict, make, value_check)


@probe
def batchnorm_train_exported_under_inference_mode(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.BatchNorm1d(4)).train(), (torch.randn(5, 4),)
    return _run(lib, strict, make, _bn_check, export_ctx=torch.inference_mode)


class LeavesSwitches(nn.Module):
    def forward(self, x):
        torch.set_grad_enabled(False)  # never switched back: eager leaves grad off
        torch.use_deterministic_algorithms(True)
        return x * 2


@probe
def forward_leaves_switches_set(lib: str, strict: bool) -> str:
    before = _switches()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _export(lib, strict, LeavesSwitches(), (torch.randn(2),))
        outcome = "exported"
    except Exception as e:
        outcome = f"fails {type(e).__name__}"
    after = _switches()
    changed = [f"{k} {before[k]}->{after[k]}" for k in before if before[k] != after[k]]
    torch.set_grad_enabled(before["grad"])
    torch.use_deterministic_algorithms(before["deterministic"])
    return f"{outcome}; " + ("process as before (eager would leave them set)" if not changed
                             else "left as forward set them: " + ", ".join(changed))


class NoGradForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @torch.no_grad()
    def forward(self, x):
        return self.lin(x)


class InferenceForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @torch.inference_mode()
    def forward(self, x):
        return self.lin(x)


class AutocastForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, x):
        return self.lin(x)


@probe
def forward_decorated_no_grad(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return NoGradForward(), (torch.randn(2, 4),)
    return _run(lib, strict, make, value_check)


@probe
def forward_decorated_inference_mode(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return InferenceForward(), (torch.randn(2, 4),)
    return _run(lib, strict, make, value_check)


@probe
def forward_decorated_autocast(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return AutocastForward(), (torch.randn(2, 4),)
    return _run(lib, strict, make, value_check)


@probe
def export_under_detect_anomaly(lib: str, strict: bool) -> str:
    return _run(lib, strict, _lin, value_check, export_ctx=lambda: torch.autograd.detect_anomaly(check_nan=True))


class MakesOnDefaultDevice(nn.Module):
    def forward(self, x):
        return x + torch.ones(x.shape[-1]), torch.zeros(2)


@probe
def export_under_device_context_cpu(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (MakesOnDefaultDevice(), (torch.randn(2, 3),)), value_check,
                export_ctx=lambda: torch.device("cpu"))


@probe
def call_under_device_context_meta(lib: str, strict: bool) -> str:
    # eager under torch.device("meta") makes its own tensors on meta (and fails adding them to x)
    def check(prog, make, args):
        eager, _ = make()
        with torch.device("meta"):
            try:
                want = eager(*args)
            except Exception as e:
                want = f"eager fails {type(e).__name__}"
            try:
                got = prog(*args)
            except Exception as e:
                got = f"program fails {type(e).__name__}"
        if isinstance(want, str) or isinstance(got, str):
            said = (want if isinstance(want, str) else "eager runs", got if isinstance(got, str) else "program runs")
            return "; ".join(said)
        return _describe(want, got) or "="
    return _run(lib, strict, lambda: (MakesOnDefaultDevice(), (torch.randn(2, 3),)), check)


# ------------------------------------------------------------------------ autocast

class AutocastRegion(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
            z = torch.mm(y, y.t())
        return y, z.float() + 1, z


@probe
def autocast_region_in_forward(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return AutocastRegion(), (torch.randn(3, 4),)
    return _run(lib, strict, make, value_check)


class AutocastOff(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        with torch.autocast("cpu", enabled=False):
            z = self.lin(y.float())
        return y, z


@probe
def export_under_autocast(lib: str, strict: bool) -> str:
    # exported under an ambient autocast; called without one (eager without autocast)
    def make():
        torch.manual_seed(0)
        return Lin(), (torch.randn(2, 4),)
    return _run(lib, strict, make, value_check,
                export_ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))


@probe
def export_and_call_under_autocast(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return Lin(), (torch.randn(2, 4),)
    return _run(lib, strict, make,
                lambda p, m, a: value_check(p, m, a, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
                export_ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))


@probe
def autocast_disabled_inside_ambient(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return AutocastOff(), (torch.randn(2, 4),)
    return _run(lib, strict, make,
                lambda p, m, a: value_check(p, m, a, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
                export_ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))


# ------------------------------------------------------------------------ default dtype

@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class MakesTensors(nn.Module):
    def forward(self, x):
        made = torch.ones(x.shape[1]) + torch.arange(x.shape[1]) * 0.5 + torch.tensor(1.5)
        return x + made, made  # made alone: its dtype is the default dtype's


@probe
def default_float64_at_export(lib: str, strict: bool) -> str:
    # the program is exported with float64 default; called with float32 default (eager: float32)
    return _run(lib, strict, lambda: (MakesTensors(), (torch.randn(2, 3, dtype=torch.float64),)),
                value_check, export_ctx=lambda: default_dtype(torch.float64))


@probe
def default_float64_at_call(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (MakesTensors(), (torch.randn(2, 3),)),
                lambda p, m, a: value_check(p, m, a, lambda: default_dtype(torch.float64)))


class SetsDefault(nn.Module):
    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        y = torch.ones(3)
        torch.set_default_dtype(torch.float32)
        return x + y


@probe
def set_default_dtype_in_forward(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (SetsDefault(), (torch.randn(2, 3),)), value_check)


class SetsDefaultPromotes(nn.Module):
    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        y = torch.arange(3) * 0.5  # float64 from an int tensor: no dtype= to write
        torch.set_default_dtype(torch.float32)
        return x + y


@probe
def set_default_dtype_in_forward_promotion(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (SetsDefaultPromotes(), (torch.randn(2, 3),)), value_check)


# ------------------------------------------------------------------------ BatchNorm

def _bn_check(prog, make, args) -> str:
    # the program shares the model's buffers (as torch's does): eager starts from the program's state
    eager, _ = make()
    eager.load_state_dict({k: v.clone() for k, v in prog.state_dict().items()}, strict=False)
    want, got = eager(*args), prog(*args)
    want, got = eager(*args), prog(*args)  # second call: running stats used by nothing in train, but carried
    bits = [_describe(want, got)]
    for name, buf in eager.named_buffers():
        theirs = dict(prog.named_buffers()).get(name)
        if theirs is None or not torch.allclose(buf.double(), theirs.double(), atol=1e-5):
            bits.append(f"{name} {'missing' if theirs is None else 'DIFFERS'}")
    return ", ".join(b for b in bits if b) or "="


@probe
def batchnorm_train(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train(), (torch.randn(5, 4),)
    return _run(lib, strict, make, _bn_check)


@probe
def batchnorm_train_momentum_none(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.BatchNorm1d(4, momentum=None)).train(), (torch.randn(5, 4),)
    return _run(lib, strict, make, _bn_check)


@probe
def batchnorm_eval(lib: str, strict: bool) -> str:
    def make():
        torch.manual_seed(0)
        m = nn.Sequential(nn.BatchNorm1d(4)).train()
        m(torch.randn(8, 4) * 3 + 1)
        return m.eval(), (torch.randn(5, 4),)
    return _run(lib, strict, make, _bn_check)


@probe
def batchnorm_train_then_eval_call(lib: str, strict: bool) -> str:
    # exported in train mode; module().eval() asked for
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.BatchNorm1d(4)).train(), (torch.randn(5, 4),)

    def check(prog, make, args):
        try:
            prog.eval()
        except Exception as e:
            return f"eval() refused {type(e).__name__}: {_first(e)[:70]}"
        eager, _ = make()
        return _describe(eager.eval()(*args), prog(*args)) or "= (eval honoured)"
    return _run(lib, strict, make, check)


# ------------------------------------------------------------------------ flags

class Scatter(nn.Module):
    def forward(self, x, idx):
        out = torch.zeros(5, 4)
        return out.index_add(0, idx, x), out.index_put((idx,), x, accumulate=True)


@probe
def deterministic_algorithms(lib: str, strict: bool) -> str:
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return _run(lib, strict, lambda: (Scatter(), (torch.randn(3, 4), torch.tensor([0, 2, 2]))), value_check)
    finally:
        torch.use_deterministic_algorithms(old)


class Sdpa(nn.Module):
    def forward(self, q):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)


@probe
def sdpa_kernel_context_in_forward(lib: str, strict: bool) -> str:
    return _run(lib, strict, lambda: (Sdpa(), (torch.randn(1, 2, 4, 8),)), value_check)


class PlainSdpa(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


@probe
def cuda_sdp_flags_at_export(lib: str, strict: bool) -> str:
    old = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    try:
        return _run(lib, strict, lambda: (PlainSdpa(), (torch.randn(1, 2, 4, 8),)), value_check)
    finally:
        torch.backends.cuda.enable_flash_sdp(old[0])
        torch.backends.cuda.enable_mem_efficient_sdp(old[1])


# ------------------------------------------------------------------------ python state

SCALE = 2.0
GLOBAL_T = torch.ones(3)


class ReadsGlobals(nn.Module):
    def forward(self, x):
        return x * SCALE + GLOBAL_T


@probe
def globals_changed_after_export(lib: str, strict: bool) -> str:
    global SCALE, GLOBAL_T
    SCALE, GLOBAL_T = 2.0, torch.ones(3)

    def check(prog, make, args):
        global SCALE, GLOBAL_T
        before = prog(*args)
        SCALE = 5.0
        GLOBAL_T.add_(1)  # in place: the same tensor object
        try:
            after = prog(*args)
            eager_after = ReadsGlobals()(*args)
        finally:
            SCALE = 2.0
            GLOBAL_T.sub_(1)
        held = ("holds the export-time values" if _same(before, after)
                else "follows the in-place change" if not _same(after, eager_after)
                else "follows both (as eager)")
        return held
    return _run(lib, strict, lambda: (ReadsGlobals(), (torch.randn(2, 3),)), check)


class ReadsAttrs(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.const = torch.ones(3)

    def forward(self, x):
        return x * self.scale + self.const


@probe
def attributes_changed_after_export(lib: str, strict: bool) -> str:
    model = ReadsAttrs()

    def check(prog, make, args):
        before = prog(*args)
        model.scale = 5.0
        model.const.add_(1)
        try:
            after = prog(*args)
            eager_after = model(*args)
        finally:
            model.scale = 2.0
            model.const.sub_(1)
        if _same(before, after):
            return "holds the export-time values"
        return "follows both (as eager)" if _same(after, eager_after) else "follows the in-place tensor change"
    return _run(lib, strict, lambda: (model, (torch.randn(2, 3),)), check)


# ------------------------------------------------------------------------ failing exports

def _switches() -> dict:
    return {
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "autocast": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
        "default_dtype": torch.get_default_dtype(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "flash": torch.backends.cuda.flash_sdp_enabled(),
    }


def _fail_probe(name: str, forward: Callable, export_ctx: Callable[[], Any] = contextlib.nullcontext):
    class Fails(nn.Module):
        def forward(self, x):
            return forward(x)

    def run(lib: str, strict: bool) -> str:
        with export_ctx():
            before = _switches()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    _export(lib, strict, Fails(), (torch.randn(3, 4),))
                    outcome = "EXPORTED"
                except Exception as e:
                    outcome = f"fails {type(e).__name__}"
            after = _switches()
        # what eager leaves: the probe's forward raises the same way only under tracing,
        # so 'as before' is the expectation for a context-managed switch
        changed = [f"{k} {before[k]}->{after[k]}" for k in before if before[k] != after[k]]
        return f"{outcome}; " + ("state as before" if not changed else "LEAKED " + ", ".join(changed))
    run.__name__ = name
    probe(run)


def _data_dependent(x):
    if x.sum() > 0:  # a data-dependent branch: refused by both libraries
        return x + 1
    return x - 1


def _in_no_grad(x):
    with torch.no_grad():
        return _data_dependent(x)


def _in_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return _data_dependent(x)


def _in_inference(x):
    with torch.inference_mode():
        return _data_dependent(x)


def _in_enable_grad(x):
    with torch.enable_grad():
        return _data_dependent(x)


def _in_default_dtype(x):
    with default_dtype(torch.float64):
        return _data_dependent(x)


def _in_sdpa_kernel(x):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.MATH]):
        return _data_dependent(x)


def _deterministic_then_fail(x):
    torch.use_deterministic_algorithms(True)  # eager leaves this set too: a plain call
    try:
        return _data_dependent(x)
    finally:
        torch.use_deterministic_algorithms(False)


def _raises_value_error(x):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        raise ValueError("user error inside forward")


_fail_probe("fail_inside_no_grad", _in_no_grad)
_fail_probe("fail_inside_autocast", _in_autocast)
_fail_probe("fail_inside_inference_mode", _in_inference)
_fail_probe("fail_inside_enable_grad_under_no_grad", _in_enable_grad, export_ctx=torch.no_grad)
_fail_probe("fail_inside_default_dtype", _in_default_dtype)
_fail_probe("fail_inside_sdpa_kernel", _in_sdpa_kernel)
_fail_probe("fail_with_deterministic_finally", _deterministic_then_fail)
_fail_probe("user_error_inside_no_grad_autocast", _raises_value_error)
_fail_probe("fail_under_ambient_autocast", _in_no_grad, export_ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
_fail_probe("fail_under_ambient_inference_mode", _in_autocast, export_ctx=torch.inference_mode)


def main(argv: list[str]) -> None:
    for name, run in PROBES:
        if argv and not any(a in name for a in argv):
            continue
        for lib in ("graphcap", "torch"):
            for strict in (False, True):
                before = _switches()
                try:
                    verdict = run(lib, strict)
                except Exception as e:
                    verdict = f"PROBE CRASHED {type(e).__name__}: {_first(e)}"
                after = _switches()
                if before != after:
                    verdict += f" [process state changed: {[k for k in before if before[k] != after[k]]}]"
                    torch.set_grad_enabled(before["grad"])
                print(f"{name} | {lib}/{'strict' if strict else 'nonstrict'} | {verdict}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
