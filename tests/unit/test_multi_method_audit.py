"""Multi-method programs audit (2026-11-27 late morning): ``export_methods`` on real use.

The probe is ``bench/probes/multi_method_audit.py``; these are the defects it found, tested from the
behaviour with cases beyond the probe.
"""
from __future__ import annotations

import importlib.util
import io

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from conftest import NEEDS_TORCHAO
from graphcap.errors import DynamicSpecError


def _round_trip(progs):
    buf = io.BytesIO()
    graphcap.save(progs, buf)
    buf.seek(0)
    return graphcap.load(buf)


class PairWeights(torch.nn.Module):
    """Two methods over a weight that is a tensor subclass wrapping inner tensors (as torchao's
    quantized weights are), one of them writing a buffer the other reads."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)), requires_grad=False)
        self.register_buffer("acc", torch.zeros(4))
        self.register_buffer("pair_buf", TwoTensor(torch.ones(4), torch.full((4,), 2.0)))

    def encode(self, x):
        y = x @ self.w
        self.acc.add_(y.sum(0).a if isinstance(y.sum(0), TwoTensor) else y.sum(0))
        return y

    def project(self, x):
        return x @ self.w + self.pair_buf + self.acc


def test_subclass_weights_load_shared_by_every_method():
    """Loading checks that the methods' tensors under one FQN are one value before sharing them; a
    wrapper subclass has no storage of its own, and the check failed with "Attempted to access the
    data pointer on an invalid python storage" (torchao int8 weights: the file would not load)."""
    model = PairWeights()
    x = torch.randn(2, 4)
    progs = graphcap.export_methods(model, {"encode": (x,), "project": (x,)})
    loaded = _round_trip(progs)
    for fqn in ("w", "pair_buf"):
        held = {id(ep.state_dict[fqn]) for ep in loaded.values()}
        assert len(held) == 1, f"{fqn} is not one tensor after load"
        assert type(loaded["encode"].state_dict[fqn]) is TwoTensor
    eager = PairWeights()
    m = loaded.module()
    for method in ("encode", "project", "encode", "project"):
        torch.testing.assert_close(getattr(m, method)(x), getattr(eager, method)(x))


def test_subclass_tensors_that_differ_are_not_taken_for_one():
    """The same comparison refuses two subclass tensors whose inner values differ (a damaged file)."""
    from graphcap.multi_method import _same_value
    a = TwoTensor(torch.ones(3), torch.zeros(3))
    assert _same_value(a, TwoTensor(torch.ones(3), torch.zeros(3)))
    assert not _same_value(a, TwoTensor(torch.ones(3), torch.ones(3)))
    assert not _same_value(a, torch.ones(3))
    assert not _same_value(a, TwoTensor(torch.ones(2), torch.zeros(2)))


@NEEDS_TORCHAO
def test_torchao_int8_weight_only_model_with_two_methods_round_trips():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    class Quant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.l1 = torch.nn.Linear(16, 32)
            self.l2 = torch.nn.Linear(32, 16)
            self.register_buffer("acc", torch.zeros(16))

        def encode(self, x):
            y = self.l2(torch.relu(self.l1(x)))
            self.acc.add_(y.sum(0))
            return y

        def project(self, x):
            return self.l1(x) + self.acc.sum()

    def make():
        m = Quant()
        quantize_(m, Int8WeightOnlyConfig())
        return m

    x = torch.randn(2, 16)
    loaded = _round_trip(graphcap.export_methods(make(), {"encode": (x,), "project": (x,)}))
    assert loaded["encode"].state_dict["l1.weight"] is loaded["project"].state_dict["l1.weight"]
    eager, m = make(), loaded.module()
    with torch.no_grad():
        for method in ("project", "encode", "project"):
            torch.testing.assert_close(getattr(m, method)(x), getattr(eager, method)(x))


class SetState(torch.nn.Module):
    """Methods whose arguments are named like the buffers they write: ``set_state(self, h)``."""

    def __init__(self):
        super().__init__()
        self.register_buffer("h", torch.zeros(1, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.scale = torch.nn.Parameter(torch.ones(4))

    def set_state(self, h):
        self.h.copy_(h)
        return h.sum()

    def advance(self, steps, scale):
        self.steps.add_(steps)
        self.h.mul_(scale)
        return self.h * self.scale

    def peek(self):
        return self.h + self.steps


def _names(ep):
    return [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]


@pytest.mark.parametrize("strict", [False, True])
def test_a_user_input_is_never_named_like_a_state_fqn(strict):
    """A user input named ``h`` beside a buffer ``h`` (and ``steps``/``scale``) gets another
    placeholder name: ExecuTorch's write-back pass looks buffers and user inputs up by those names
    in one table, so the buffer's new value went into the input (a shared cache left unset)."""
    h = torch.randn(1, 4)
    progs = graphcap.export_methods(SetState(), {"set_state": (h,), "advance": (torch.tensor(2), torch.tensor(3.0)),
                                                 "peek": ()}, strict=strict)
    assert _names(progs["set_state"]) == ["h_1"]
    assert _names(progs["advance"]) == ["steps_1", "scale_1"]
    for name, ep in progs.items():
        targets = {s.target for s in ep.graph_signature.input_specs if s.target is not None}
        assert not targets & set(_names(ep)), name
    # the program still binds by the user's argument names, and runs as eager
    eager, m = SetState(), progs.module()
    for module in (eager, m):
        module.set_state(h=h)
    for call in (lambda mod: mod.advance(torch.tensor(1), scale=torch.tensor(2.0)), lambda mod: mod.peek()):
        torch.testing.assert_close(call(m), call(eager))
    decomposed = progs.run_decompositions()
    assert _names(decomposed["set_state"]) == ["h_1"]


def test_input_names_that_do_not_collide_are_kept():
    """Inputs named like a nested FQN's last part, or like a placeholder of the state, keep the
    names they had (``b_h`` collides with the buffer's placeholder: torch's suffix rule)."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, weight, lin, x, x_1):
            return self.lin(x) + weight + lin + x_1

    ep = graphcap.export(M(), tuple(torch.randn(4) for _ in range(4)))
    assert _names(ep) == ["weight", "lin", "x", "x_1"]


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                    reason="executorch not installed (the consumers extra, torch 2.14 line)")
def test_executorch_runtime_sees_a_state_set_through_an_argument_named_like_it():
    from test_export_methods_executorch import load_methods, lower_to_pte
    h = torch.randn(1, 4)
    progs = graphcap.export_methods(SetState(), {"set_state": (h,), "advance": (torch.tensor(2), torch.tensor(3.0)),
                                                 "peek": ()})
    pte = lower_to_pte(progs, initialized=["h", "steps"])  # kept: the runtime reads the bytes in place
    methods = load_methods(pte)
    eager = SetState()
    calls = [("set_state", (h,)), ("peek", ()), ("advance", (torch.tensor(1), torch.tensor(2.0))), ("peek", ())]
    for name, args in calls:
        want = getattr(eager, name)(*args)
        torch.testing.assert_close(methods[name].execute(list(args))[0], want.detach())


def test_module_writes_the_programs_state_as_ep_module_does():
    """docs/multi-method.md said running ``progs.module()`` left ``progs`` and the model as they
    were; since ``ep.module()`` holds the program's own state (torch's behaviour) the writes reach
    both, and a save after a run stores them. The page now says so; this holds the behaviour."""
    model = SetState()
    progs = graphcap.export_methods(model, {"set_state": (torch.randn(1, 4),), "peek": ()})
    h = torch.randn(1, 4)
    m = progs.module()
    m.set_state(h)
    torch.testing.assert_close(progs["peek"].state_dict["h"], h)
    torch.testing.assert_close(model.h, h)
    torch.testing.assert_close(_round_trip(progs).module().peek(), h)
    torch.testing.assert_close(progs.module().peek(), h)  # a second module reads the same state


class Grow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hist", torch.zeros(1, 4))

    def push(self, x):
        self.hist = torch.cat([self.hist, x])
        return self.hist.sum()

    def peek(self):
        return self.hist.sum()

    def forward(self, x):
        return self.push(x)


@pytest.mark.parametrize("strict", [False, True])
def test_a_buffer_resized_by_a_method_is_refused_naming_the_method(strict):
    """The refusal said "forward gives buffer 'hist' ..." for a method ``push``; it names what was
    traced: the method, or the module's forward."""
    with pytest.raises(graphcap.UnsupportedError, match=r"Grow\.push gives buffer 'hist'") as info:
        graphcap.export_methods(Grow(), {"push": (torch.randn(1, 4),), "peek": ()}, strict=strict)
    assert "returned from push" in str(info.value)
    with pytest.raises(graphcap.UnsupportedError, match=r"Grow\.forward gives buffer 'hist'"):
        graphcap.export(Grow(), (torch.randn(1, 4),), strict=strict)


class Hooked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def encode(self, x):
        return self.lin(x)

    def forward(self, x):
        self.calls.add_(1)
        return self.lin(x) + self.calls


def _hooked():
    model = Hooked()
    model.register_forward_pre_hook(lambda mod, args: (args[0] * 10,))
    model.register_forward_hook(lambda mod, args, out: out - 1)
    model.lin.register_forward_hook(lambda mod, args, out: out * 2)
    return model


@pytest.mark.parametrize("strict", [False, True])
def test_forward_exported_by_export_methods_keeps_the_models_hooks(strict):
    """``forward`` of a multi-method program is the model's call, as ``export(model)`` exports it:
    the root's pre-hook and hook were lost (the bound method ``model.forward`` was exported), so
    ``progs.module()(x)`` differed from ``model(x)``. Other methods stay hookless, as in eager."""
    x = torch.randn(2, 4)
    progs = graphcap.export_methods(_hooked(), {"encode": (x,), "forward": (x,)}, strict=strict)
    eager, m = _hooked(), progs.module()
    for _ in range(2):
        torch.testing.assert_close(m(x), eager(x))
        torch.testing.assert_close(m.encode(x), eager.encode(x))
    single = graphcap.export(_hooked(), (x,), strict=strict)
    assert str(single.graph) == str(progs["forward"].graph)
    fresh = graphcap.export_methods(_hooked(), {"encode": (x,), "forward": (x,)}, strict=strict)
    result = graphcap.verify(fresh, _hooked(), method="forward", samples=2)
    assert result.passed, result.summary()


class KwStep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def step(self, x, mask=None, alpha=1.0):
        return self.lin(x) * mask * alpha


def test_a_spec_dict_missing_an_input_pastes_the_dict_with_it_static():
    """A spec keyed by names that leaves an input out was refused with advice in words only; the
    fix now pastes the dict with the missing input as None, and under export_methods the note says
    the message's dynamic_shapes is that method's entry."""
    b = graphcap.Dim("b", min=2, max=8)
    x, mask = torch.randn(3, 4), torch.randn(3, 4)
    spec = {"x": {0: b}, "mask": {0: b}}
    with pytest.raises(DynamicSpecError) as info:
        graphcap.export(KwStep().step, (x,), {"mask": mask, "alpha": 0.5}, dynamic_shapes=spec)
    fix = str(info.value).split("How to fix:")[1]
    pasted = fix.split("dynamic_shapes = ")[1].rstrip(".\n ")
    assert "'alpha': None" in pasted
    dynamic_shapes = spec  # the pasted code works
    ep = graphcap.export(KwStep().step, (x,), {"mask": mask, "alpha": 0.5}, dynamic_shapes=eval(pasted))
    torch.testing.assert_close(ep.module()(torch.randn(6, 4), mask=torch.ones(6, 4), alpha=0.5).shape,
                               torch.Size([6, 4]))
    assert dynamic_shapes is spec
    with pytest.raises(DynamicSpecError) as info:
        graphcap.export_methods(KwStep(), {"step": ((x,), {"mask": mask, "alpha": 0.5})},
                                dynamic_shapes={"step": spec})
    assert any("dynamic_shapes['step']" in n and "method 'step'" in n for n in info.value.__notes__)
