"""Decomposition audit 2: every operator that asks a size question is checked where it matters.

``run_decompositions`` checks an operator whose decomposition took a path on a size question (a
guard) at a size the guard leaves out, beside the operator itself (test_decomp_size_paths.py). The
shape engine records a question once: a second operator asking what a first one's guard already
answered left no guard, so only the first was checked. Two interpolations over one dynamic dim,
bilinear first (right where its output is 1 pixel) and bicubic second (dividing by zero there),
gave a program failing at the sizes the guard left out; so did bicubic in a ``torch.cond`` branch
after a bilinear outside it. Now every operator asking is checked at those sizes, and each call
once per size however many guards lead to it.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import UnsupportedError
from graphcap.passes import decomposition_checks


class _BilinearThenBicubic(torch.nn.Module):
    def forward(self, x):
        smooth = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)
        sharp = F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True)
        return smooth, sharp


def _program(model, h_min=2):
    h = graphcap.Dim("h", min=h_min, max=9)
    return graphcap.export(model, (torch.randn(1, 2, 6, 6),), dynamic_shapes=({2: h},))


def test_the_second_operator_asking_the_same_question_is_checked_and_named():
    with pytest.raises(UnsupportedError) as caught:
        _program(_BilinearThenBicubic()).run_decompositions()
    text = str(caught.value)
    assert "torch.ops.aten.upsample_bicubic2d.vec" in text and "h = 2" in text
    assert "del table[torch.ops.aten.upsample_bicubic2d.vec]" in text and "Dim('h', min=4, max=9)" in text


def test_bicubic_asking_first_is_refused_as_before():
    class BicubicThenBilinear(torch.nn.Module):
        def forward(self, x):
            sharp = F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True)
            return sharp, F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)
    with pytest.raises(UnsupportedError, match=r"upsample_bicubic2d\.vec.*h = 2"):
        _program(BicubicThenBilinear()).run_decompositions()


def test_the_fixes_give_a_program_right_at_every_size():
    table = graphcap.default_decompositions()
    del table[torch.ops.aten.upsample_bicubic2d.vec]
    kept_whole = _program(_BilinearThenBicubic()).run_decompositions(table)
    narrower = _program(_BilinearThenBicubic(), 4).run_decompositions()
    for decomposed, sizes in ((kept_whole, range(2, 10)), (narrower, range(4, 10))):
        for h in sizes:
            x = torch.randn(1, 2, h, 6)
            torch.testing.assert_close(decomposed.module()(x), _BilinearThenBicubic()(x))


class _BilinearThenBicubicInABranch(torch.nn.Module):
    def forward(self, x, flag):
        smooth = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)

        def sharp(x):
            return F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True)

        def plain(x):
            return F.interpolate(x, scale_factor=0.5, mode="nearest")

        return smooth, torch.cond(flag.sum() > 0, sharp, plain, (x,))


_COND_MAX_STRIDES = pytest.mark.skipif(TORCH_LINE < (2, 14), reason=(
    "torch 2.10-2.13: torch.cond refuses branch outputs whose strides hold Max(1, ...) (its check that "
    "the outputs are dense; bicubic of h // 2 rows), so this model may not export there"))


@_COND_MAX_STRIDES
def test_an_operator_in_a_cond_branch_asking_what_an_operator_outside_asked_is_checked():
    h = graphcap.Dim("h", min=2, max=9)
    ep = graphcap.export(_BilinearThenBicubicInABranch(), (torch.randn(1, 2, 6, 6), torch.ones(1)),
                         dynamic_shapes={"x": {2: h}, "flag": None})
    with pytest.raises(UnsupportedError, match=r"upsample_bicubic2d\.vec.*h = 2"):
        ep.run_decompositions()
    table = graphcap.default_decompositions()
    del table[torch.ops.aten.upsample_bicubic2d.vec]
    decomposed = ep.run_decompositions(table)
    for h in (2, 3, 9):
        for flag in (torch.ones(1), -torch.ones(1)):
            x = torch.randn(1, 2, h, 6)
            torch.testing.assert_close(decomposed.module()(x, flag), _BilinearThenBicubicInABranch()(x, flag))


# two operators of the user's whose table entries ask about the rows; the path the first one's entry
# takes for several rows is right at 1 row too
@torch.library.custom_op("graphcap_test_audit2::first", mutates_args=())
def _first(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


@torch.library.custom_op("graphcap_test_audit2::second", mutates_args=())
def _second(x: torch.Tensor) -> torch.Tensor:
    return x.var(0) if x.shape[0] > 1 else torch.zeros_like(x[0])


for _op in (_first, _second):
    _op.register_fake(lambda x: x.new_empty(x.shape[1:]))


def _right_entry(x):
    if x.shape[0] > 1:
        return torch.ops.aten.sum.dim_IntList(x, [0])
    return x[0].clone()


def _wrong_entry_same_question(x):
    if x.shape[0] > 1:
        return torch.ops.aten.var.correction(x, [0], correction=1)  # NaN at one row
    return torch.zeros_like(x[0])


def _wrong_entry_other_words(x):
    if x.shape[0] >= 2:  # the same question put otherwise: answered by the first entry's guard
        return torch.ops.aten.var.correction(x, [0], correction=1)
    return torch.zeros_like(x[0])


def _wrong_entry_settled_without_a_guard(x):
    if statically_known_true(x.shape[0] > 1):  # known only from the first entry's guard
        return torch.ops.aten.var.correction(x, [0], correction=1)
    return torch.zeros_like(x[0])


def _wrong_entry_guarding_or_false(x):
    if guard_or_false(x.shape[0] > 1):  # settled without a guard under size-oblivious rules
        return torch.ops.aten.var.correction(x, [0], correction=1)
    return torch.zeros_like(x[0])


class _Both(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_test_audit2.first(x) + torch.ops.graphcap_test_audit2.second(x)


@pytest.mark.parametrize("second", [_wrong_entry_same_question, _wrong_entry_other_words,
                                    _wrong_entry_settled_without_a_guard, _wrong_entry_guarding_or_false],
                         ids=["same-question", "other-words", "statically-known", "guard-or-false"])
def test_a_users_second_entry_answered_by_the_first_ones_guard_is_checked(second):
    rows = graphcap.Dim("rows", min=1, max=16)
    ep = graphcap.export(_Both(), (torch.randn(4, 3),), dynamic_shapes=({0: rows},))
    table = {torch.ops.graphcap_test_audit2.first.default: _right_entry,
             torch.ops.graphcap_test_audit2.second.default: second}
    with pytest.raises(UnsupportedError, match=r"graphcap_test_audit2\.second\.default.*rows = 1.*other values"):
        ep.run_decompositions(table)


class _ThreeConds(torch.nn.Module):
    """Each branch asks two questions about ``h`` (bilinear at two scales), both right at the sizes
    they leave out; the three conds share their branches' calls."""

    def forward(self, x, flag):
        out = []
        for k in range(3):
            def grow(x):
                a = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True).sum()
                b = F.interpolate(x, scale_factor=0.75, mode="bilinear", align_corners=True).sum()
                return a + b + x.transpose(0, 2).reshape(-1, 5).sum(0)

            def keep(x):
                return x.amax() + x.transpose(0, 2).reshape(-1, 5).sum(0)

            out.append(torch.cond(flag.sum() > k, grow, keep, (x,)))
        return torch.stack(out)


def test_each_call_is_checked_once_per_size_however_many_guards_lead_to_it(monkeypatch):
    h = graphcap.Dim("h", min=2, max=12)
    ep = graphcap.export(_ThreeConds(), (torch.randn(1, 2, 6, 5), torch.ones(1)),
                         dynamic_shapes={"x": {2: h}, "flag": None})
    checked = []
    wrong_at = decomposition_checks._wrong_at

    def counted(node, sizes, trace_one):
        checked.append((decomposition_checks._call_key(node), tuple(sorted(map(str, sizes.items())))))
        return wrong_at(node, sizes, trace_one)

    monkeypatch.setattr(decomposition_checks, "_wrong_at", counted)
    decomposed = ep.run_decompositions()
    assert checked and len(checked) == len(set(checked))
    assert any("upsample_bilinear2d" in str(key[0]) for key, _ in checked)
    for size in (2, 3, 7, 12):
        for flag in (0.5, 2.5):
            args = (torch.randn(1, 2, size, 5), torch.full((1,), flag))
            torch.testing.assert_close(decomposed.module()(*args), _ThreeConds()(*args))
