"""Global state and randomness: what a program keeps of torch's process-wide switches.

The global state and randomness audit (docs/torch-suite.md): a forward that switches torch's
default dtype for a stretch (``torch.set_default_dtype``) made a program whose factory calls
(``torch.ones(3)``, ``torch.arange(0., n)``, ``torch.rand(...)``) followed the caller's default
when run, so it returned float32 where eager returns float64 (torch.export does the same); the
program now writes the traced dtype into those calls, casts the integer operands of an operator
whose float result the default decided (``arange(3) * 0.5``), and tells what it cannot cast.
A ``torch.Generator`` that is an input or a module attribute is refused naming it (the message
said forward made it).
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn as nn

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import UnsupportedError


def _programs(ep):
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    return {"module": ep, "decomposed": ep.run_decompositions(), "loaded": graphcap.load(buf)}


def _export(model, args, *, strict):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ep = graphcap.export(model, args, strict=strict)
    return ep, [str(w.message) for w in caught if "default dtype" in str(w.message)]


class SwitchesDefault(nn.Module):
    """Makes tensors of every factory kind while the default dtype is float64, then switches back."""

    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        made = (torch.ones(3), torch.zeros(3), torch.full((3,), 2.5), torch.arange(0.0, 3.0),
                torch.linspace(0, 1, 3), torch.empty(3).fill_(1.0), torch.eye(3)[0],
                torch.scalar_tensor(0.5), torch.rand(3) * 0, torch.randn(3) * 0,
                torch.full((3,), 1 + 2j))
        torch.set_default_dtype(torch.float32)
        after = torch.ones(3)  # made under the caller's default again
        return tuple(x + t for t in made) + (x + after, after)


@pytest.mark.parametrize("strict", [False, True])
def test_tensors_made_while_forward_switched_the_default_dtype_keep_it(strict):
    x = torch.randn(3)
    want = SwitchesDefault()(x)
    assert torch.get_default_dtype() == torch.float32
    ep, told = _export(SwitchesDefault(), (x,), strict=strict)
    assert told == []  # every call could be pinned: nothing to tell
    for stage, program in _programs(ep).items():
        got = program.module()(x)
        assert [t.dtype for t in got] == [t.dtype for t in want], stage
        for a, b in zip(want, got):
            torch.testing.assert_close(a, b, msg=stage)
    # the calls made after the switch back keep following the caller's default, as torch's do
    unpinned = [n for n in ep.graph.nodes if n.op == "call_function" and "dtype" not in n.kwargs
                and n.target in (torch.ops.aten.ones.default,)]
    assert len(unpinned) == 1


class MakesOnes(nn.Module):
    def forward(self, x):
        return x + torch.ones(x.shape[0]) + torch.arange(x.shape[0]) * 0.5


def test_a_program_exported_under_another_default_is_left_as_recorded():
    """No switch in forward: the program reads as torch's (no dtype written), and nothing is told."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ep, told = _export(MakesOnes(), (torch.randn(3, dtype=torch.float64),), strict=False)
    finally:
        torch.set_default_dtype(old)
    assert told == []
    calls = [n for n in ep.graph.nodes if n.op == "call_function"
             and n.target in (torch.ops.aten.ones.default, torch.ops.aten.arange.default)]
    assert calls and all("dtype" not in n.kwargs for n in calls)


class Promotes(nn.Module):
    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        try:
            ints, flags = torch.arange(3), x > 0
            made = (ints * 0.1, ints.sqrt(), ints / 3, flags * 0.5, torch.where(flags, ints, 0.5),
                    torch.arange(3).to(torch.float64) * 0.1)  # float64 from int64 or bool tensors
        finally:
            torch.set_default_dtype(torch.float32)
        return tuple(x + t for t in made)


@pytest.mark.parametrize("strict", [False, True])
def test_a_result_promoted_by_the_switched_default_keeps_its_dtype(strict):
    x = torch.randn(3)
    want = Promotes()(x)
    ep, told = _export(Promotes(), (x,), strict=strict)
    assert told == []
    for stage, program in _programs(ep).items():
        got = program.module()(x)
        assert [t.dtype for t in got] == [torch.float64] * 6, stage
        for a, b in zip(want, got):
            assert torch.equal(a, b), stage


class SelectsOnly(nn.Module):
    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        try:
            picked = torch.where(x > 0, 1, 0.5)  # float64 from a condition and two numbers
        finally:
            torch.set_default_dtype(torch.float32)
        return picked


@pytest.mark.parametrize("strict", [False, True])
def test_a_promoted_result_that_cannot_be_cast_is_told_with_the_line(strict):
    _ep, told = _export(SelectsOnly(), (torch.randn(3),), strict=strict)
    assert len(told) == 1
    assert "picked = torch.where(x > 0, 1, 0.5)" in told[0] and "aten.where" in told[0]
    assert "torch.float64" in told[0] and ".to(torch.float64)" in told[0]


class SwitchAroundCond(nn.Module):
    def forward(self, x):
        def grow(x):
            return x + torch.ones(3)

        def shrink(x):
            return x - torch.full((3,), 0.5)
        torch.set_default_dtype(torch.float64)
        try:
            with torch.no_grad():
                y = x + torch.zeros(3)
            return torch.cond(x.sum() > 0, grow, shrink, (y,))
        finally:
            torch.set_default_dtype(torch.float32)


def test_calls_in_cond_branches_and_grad_regions_are_pinned_too():
    x = torch.randn(3, dtype=torch.float16)
    ep, _ = _export(SwitchAroundCond(), (x,), strict=False)
    for arg in (x, -x.abs() - 1, x.abs() + 1):
        want = SwitchAroundCond()(arg)
        got = ep.module()(arg)
        assert got.dtype == want.dtype == torch.float64
        torch.testing.assert_close(got, want)


class LeavesDefaultSwitched(nn.Module):
    """Switches the default dtype and never switches it back (``to`` is the dtype it switches to)."""

    def __init__(self, to):
        super().__init__()
        self.to_dtype = to

    def forward(self, x):
        torch.set_default_dtype(self.to_dtype)
        return x + torch.ones(3)


class FailsAfterSwitching(nn.Module):
    """Switches the default dtype, then fails before its switch back: at a data-dependent branch
    (eager takes it and switches back), or raising itself."""

    def __init__(self, raises):
        super().__init__()
        self.raises = raises

    def forward(self, x):
        torch.set_default_dtype(torch.float64)
        if self.raises:
            raise ValueError("forward stops here")
        y = x + 1 if x.sum() > 0 else x - 1
        torch.set_default_dtype(torch.float32)
        return y


def _exported_under(default, model, x, strict):
    """``graphcap.export`` called under the caller's default ``default``; the default after it, and
    the program (or the error)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = graphcap.export(model, (x,), strict=strict)
        except Exception as e:  # the error is the result the test looks at
            result = e
        return torch.get_default_dtype(), result
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("caller, to", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_a_default_dtype_forward_leaves_switched_stays_out_of_the_process(strict, caller, to):
    """torch.export leaves the process with forward's default (non-strict and strict); the program
    does not switch the default, so graphcap's export keeps the caller's, and the program still
    makes what eager made."""
    x = torch.randn(3, dtype=caller)
    after, ep = _exported_under(caller, LeavesDefaultSwitched(to), x, strict)
    assert after == caller
    assert isinstance(ep, graphcap.ExportedProgram)
    want = LeavesDefaultSwitched(to)(x)
    torch.set_default_dtype(torch.float32)  # eager left `to` as the default: back to the suite's
    got = ep.module()(x)
    assert got.dtype == want.dtype == torch.promote_types(caller, to)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("raises", [False, True], ids=["data-dependent branch", "forward raises"])
def test_a_default_dtype_switch_a_failed_export_cut_short_stays_out_of_the_process(strict, raises):
    """Non-strict torch.export leaves the process with the switched default after the failure, where
    eager (which takes the branch) would have switched back."""
    after, error = _exported_under(torch.float32, FailsAfterSwitching(raises), torch.randn(3), strict)
    assert isinstance(error, Exception)
    assert after == torch.float32
    if not raises:
        assert isinstance(error, UnsupportedError)


class NoiseFrom(nn.Module):
    def forward(self, x, gen):
        return x + torch.rand(x.shape, generator=gen)


class HoldsGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.noise = nn.Module()
        self.noise.gen = torch.Generator().manual_seed(4)

    def forward(self, x):
        return x + torch.rand(x.shape, generator=self.noise.gen)


@pytest.mark.skipif(TORCH_LINE < (2, 13), reason="torch 2.10 to 2.12: the random operator's fake kernel "
                    "refuses the Generator argument itself, before graphcap sees where it came from")
@pytest.mark.parametrize("model, args, named", [
    (NoiseFrom(), (torch.randn(2), torch.Generator().manual_seed(1)), "the input gen"),
    (HoldsGenerator(), (torch.randn(2),), "the attribute self.noise.gen"),
])
def test_a_generator_passed_in_or_held_is_refused_by_its_name(model, args, named):
    with pytest.raises(UnsupportedError) as info:
        graphcap.export(model, args, strict=False)
    text = str(info.value)
    assert named in text and "it made" not in text
    assert "torch.rand(x.shape, generator=" in text  # the user's line
    assert "torch.manual_seed" in info.value.fix


class ForkedNoise(nn.Module):
    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            fixed = torch.rand(x.shape)  # eager: the same values each call, the caller's stream untouched
        return x + fixed


class ReplaysDraw(nn.Module):
    def forward(self, x):
        state = torch.get_rng_state()
        a = torch.rand(x.shape)
        torch.set_rng_state(state)
        return x + a - torch.rand(x.shape)  # eager: exactly x


class SameSeed(nn.Module):
    def forward(self, x):
        torch.manual_seed(torch.initial_seed())  # the seed the generator already had
        return x + torch.rand(x.shape)


class ReadsState(nn.Module):
    def forward(self, x):
        self.saved = torch.get_rng_state()  # only read: nothing the program misses
        return x + torch.rand(x.shape)


def _rng_told(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphcap.export(model, (torch.randn(2, 3),), strict=False)
    return [str(w.message) for w in caught if "random number generator" in str(w.message)]


@pytest.mark.parametrize("model, said", [
    (ForkedNoise(), "torch.set_rng_state (torch.random.fork_rng"),
    (ReplaysDraw(), "torch.set_rng_state"),
    (SameSeed(), "torch.manual_seed"),
])
def test_forward_setting_the_generator_state_is_told(model, said):
    told = _rng_told(model)
    assert len(told) == 1 and said in told[0] and "aten.rand" in told[0]
    assert "Seed before calling the program" in told[0]


def test_forward_reading_the_generator_state_is_not_told():
    assert _rng_told(ReadsState()) == []


def test_the_watched_rng_functions_are_torchs_own_after_export_and_after_a_failure():
    before = (torch.manual_seed, torch.set_rng_state, torch.random.manual_seed, torch.random.set_rng_state)
    _rng_told(ForkedNoise())

    class Fails(nn.Module):
        def forward(self, x):
            torch.manual_seed(3)
            raise ValueError("stop")
    with pytest.raises(ValueError):
        graphcap.export(Fails(), (torch.randn(2),), strict=False)
    after = (torch.manual_seed, torch.set_rng_state, torch.random.manual_seed, torch.random.set_rng_state)
    assert all(a is b for a, b in zip(before, after))
    torch.manual_seed(5)  # still torch's: seeds as before
    assert torch.initial_seed() == 5


class DrawsBetween(nn.Module):
    def forward(self, x):
        ints = torch.empty(2, 3, dtype=torch.int8).t().random_(-100, 100)  # a range wider than int8's 127
        floats = torch.empty_like(x).random_(-5, 5)
        flags = torch.empty(4, dtype=torch.bool).random_(0, 2)
        wide = torch.empty(3, dtype=torch.int64).random_(3, 2 ** 40)  # 64-bit draws
        return x + floats, ints, flags, wide


def test_random_between_two_bounds_exports_and_draws_eagers_values():
    """``t.random_(low, high)`` recorded ``aten.random_.from``, which no generated code can name
    (a SyntaxError at export; torch.export fails the same way)."""
    x = torch.randn(3, 2)
    ep = graphcap.export(DrawsBetween(), (x,), strict=False)
    for stage, program in _programs(ep).items():
        torch.manual_seed(7)
        want = DrawsBetween()(x)
        torch.manual_seed(7)
        got = program.module()(x)
        assert [t.dtype for t in got] == [t.dtype for t in want], stage
        for a, b in zip(want, got):
            assert torch.equal(a, b), stage
        assert not torch.equal(program.module()(x)[0], program.module()(x)[0])  # still random per call


class SwitchesGradOff(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        torch.set_grad_enabled(False)  # never switched back
        return self.lin(x)


@pytest.mark.parametrize("strict", [False, True])
def test_a_grad_switch_forward_leaves_behind_stays_out_of_the_process(strict):
    """strict=True left the process with grad off (dynamo runs what it captured); non-strict and
    torch.export keep the caller's grad mode. The program keeps the switch: no grad when it runs."""
    assert torch.is_grad_enabled()
    try:
        ep = graphcap.export(SwitchesGradOff(), (torch.randn(3, 2),), strict=strict)
        assert torch.is_grad_enabled()
        out = ep.module()(torch.randn(3, 2))
    finally:
        torch.set_grad_enabled(True)
    assert not out.requires_grad  # as eager's output


class InferenceDecorated(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @torch.inference_mode()
    def forward(self, x):
        return self.lin(x).relu()


class NoGradInsideInference(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        with torch.inference_mode():
            with torch.no_grad():  # restores "off" on its way out: inference mode's grad state
                inside = self.lin(x)
            also_inside = self.lin(x) * 2
        return inside, also_inside, self.lin(x)  # the last one outside: needs grad, as in eager


class InferenceNested(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        with torch.no_grad():
            with torch.inference_mode():  # grad already off
                a = self.lin(x)
            b = self.lin(x)
        with torch.inference_mode():
            with torch.inference_mode(False):  # switches grad back on inside
                c = self.lin(x)
            d = self.lin(x)
        return a, b, c, d, self.lin(x)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("model", [InferenceDecorated(), NoGradInsideInference(), InferenceNested()],
                         ids=["decorated", "no_grad_inside", "nested"])
def test_inference_mode_in_forward_is_a_grad_region_of_the_program(model, strict):
    """torch.export's program ignores inference mode: its outputs require grad where eager's do not
    (and non-strict puts the code after a no_grad block nested in it in the no_grad region)."""
    x = torch.randn(2, 4)
    want = model(x)
    want = want if isinstance(want, tuple) else (want,)
    ep = graphcap.export(model, (x,), strict=strict)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    for program in (ep, graphcap.load(buf)):
        got = program.module()(x)
        got = got if isinstance(got, tuple) else (got,)
        assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
        for a, b in zip(want, got):
            torch.testing.assert_close(a, b.detach())


def test_inference_mode_is_torchs_own_after_export():
    entry = (torch.inference_mode.__enter__, torch.inference_mode.__exit__)
    graphcap.export(InferenceDecorated(), (torch.randn(2, 4),), strict=False)
    assert (torch.inference_mode.__enter__, torch.inference_mode.__exit__) == entry
    with torch.inference_mode():
        assert torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
