"""A user branch that only special-cases size 1 (``if b != 1``) of a Dim whose range includes 1:
kept when the general branch gives eager's result at 1 too (checked on the program), refused
where the program would really differ."""
from __future__ import annotations

import pytest
import torch

import graphcap
from graphcap import Dim


class ExpandIfNeeded(torch.nn.Module):
    """transformers' masking code: a (1, n) tensor expanded to the batch unless already that size."""

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        if x.shape[0] != pos.shape[0]:
            pos = pos.expand(x.shape[0], -1)
        return x + pos


class DiffersAtOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] != 1:
            return x * 2
        return x + 100


class SqueezesAtOne(torch.nn.Module):
    """At size 1 the special branch keeps the batch dim; the general one reduces it away."""

    def forward(self, x):
        if x.shape[0] == 1:
            return x
        return x.sum(0)


class SameAtOne(torch.nn.Module):
    """``x[0]`` at size 1 is what ``x.sum(0)`` gives there: the special case changes nothing."""

    def forward(self, x):
        if x.shape[0] == 1:
            return x[0]
        return x.sum(0)


def _check(ep, m, shapes):
    for shape in shapes:
        x = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(x), m(x))


def test_general_branch_valid_at_one_keeps_one_in_range():
    m = ExpandIfNeeded()
    ep = graphcap.export(m, (torch.randn(3, 5),), dynamic_shapes=({0: Dim("b", min=1, max=8), 1: Dim("n")},))
    ranges = sorted((int(v.lower), int(v.upper)) for v in ep.range_constraints.values() if v.upper < 100)
    assert (1, 8) in ranges
    _check(ep, m, [(1, 5), (1, 2), (2, 3), (8, 7)])


def test_special_case_equal_to_the_general_one_is_kept():
    m = SameAtOne()
    ep = graphcap.export(m, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    _check(ep, m, [(1, 3), (2, 3), (8, 3)])


def test_general_branch_valid_at_zero_keeps_zero():
    class NonEmpty(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] != 0:
                return x.cumsum(0)
            return x

    m = NonEmpty()
    ep = graphcap.export(m, (torch.randn(4),), dynamic_shapes=({0: Dim("n", min=0, max=10)},))
    _check(ep, m, [(0,), (1,), (10,)])


@pytest.mark.parametrize("model", [DiffersAtOne(), SqueezesAtOne()])
def test_general_branch_that_differs_at_one_is_refused(model):
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(model, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    text = str(info.value)
    assert "b = 1" in text and "not the same" in text
    assert "b = Dim('b', min=2, max=8)" in text  # the fix leaves 1 out


def test_refused_fix_applies_and_exports():
    spec = ({0: Dim("b", min=1, max=8)},)
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(DiffersAtOne(), (torch.randn(4, 3),), dynamic_shapes=spec)
    fixed = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    ep = graphcap.export(DiffersAtOne(), (torch.randn(4, 3),), dynamic_shapes=fixed)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(1, 3))


def test_size_one_check_leaves_buffers_and_inputs_as_they_were():
    class Counts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            if x.shape[0] != 1:
                return x.mean(0, keepdim=True).expand(x.shape[0], -1) + x
            return x.mean(0, keepdim=True) + x

    m = Counts()
    x = torch.randn(3, 2)
    before = x.clone()
    graphcap.export(m, (x,), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    assert float(m.calls) == 0.0
    assert torch.equal(x, before)


def test_gpt2_input_ids_only_exports_at_batch_one_and_above():
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=64, use_cache=False,
                                  bos_token_id=0, eos_token_id=0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 64, (2, 8))
    ep = graphcap.export(m, (), {"input_ids": ids},
                         dynamic_shapes={"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=64)}})
    for b, s in ((1, 5), (3, 7), (1, 64)):
        i = torch.randint(0, 64, (b, s))
        torch.testing.assert_close(ep.module()(input_ids=i).logits, m(input_ids=i).logits)
