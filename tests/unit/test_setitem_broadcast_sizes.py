"""A copy into a slice sized by another dynamic dim accepts every size eager accepts.

``mask[..., :n] = v`` on dims M (of ``mask``) and N (of ``v``): the slice has size
``Min(M, N)``, and eager accepts exactly the sizes where ``v`` broadcasts to it (``N == 1`` or
``N <= M``), including M = 0 with N = 1 (a size-1 value broadcast into an empty slice). The
program must give eager's result at each of those sizes and refuse the others before computing.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch.export import Dim

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import RuntimeInputError

# Strict capture: before torch 2.13 dynamo's own run of setitem on its fake tensors asks whether
# the slice and the value have equal sizes with a guard (``SymInt ==``), which dynamo keeps
# (N <= M here); non-strict records the copy itself on every line (docs/torch-versions.md).
_STRICT_SETITEM_NEEDS_2_13 = pytest.mark.skipif(
    TORCH_LINE < (2, 13), reason="strict needs torch 2.13: before it, dynamo's setitem guards the sizes being equal")


class PrefixSetitem4d(torch.nn.Module):
    def forward(self, mask, value):
        mask = mask.clone()
        mask[:, :, :, :value.shape[-1]] = value
        return mask


class PrefixSetitem1d(torch.nn.Module):
    def forward(self, x, y):
        x = x * 2
        x[:y.shape[0]] = y
        return x


class SuffixSetitem(torch.nn.Module):
    def forward(self, x, y):
        x = x + 1
        x[-y.shape[0]:] = y
        return x


class MiddleDimSetitem(torch.nn.Module):
    def forward(self, x, y):
        x = x.clone()
        x[:, :y.shape[1]] = y * 3
        return x


class PrefixCopy(torch.nn.Module):
    def forward(self, x, y):
        x = x.clone()
        x[:y.shape[0]].copy_(y)
        return x


def _shapes(model, m, n):
    if model is PrefixSetitem4d:
        return (2, 2, 3, m), (2, 2, 3, n)
    if model is MiddleDimSetitem:
        return (3, m), (3, n)
    return (m,), (n,)


def _spec(model):
    dim = 3 if model is PrefixSetitem4d else 1 if model is MiddleDimSetitem else 0
    return ({dim: Dim("M")}, {dim: Dim("N")})


def _eager(model, x, y):
    try:
        return model()(x, y)
    except RuntimeError:
        return None


MODELS = [PrefixSetitem4d, PrefixSetitem1d, SuffixSetitem, MiddleDimSetitem, PrefixCopy]


@pytest.mark.parametrize("model,strict", [(m, False) for m in MODELS]
                         + [pytest.param(PrefixSetitem4d, True, marks=_STRICT_SETITEM_NEEDS_2_13),
                            pytest.param(MiddleDimSetitem, True, marks=_STRICT_SETITEM_NEEDS_2_13),
                            (PrefixCopy, True)],
                         ids=lambda v: v.__name__ if isinstance(v, type) else "strict" if v else "nonstrict")
def test_program_matches_eager_at_every_size(model, strict):
    x, y = (torch.randn(s) for s in _shapes(model, 4, 3))
    ep = graphcap.export(model(), (x, y), dynamic_shapes=_spec(model), strict=strict)
    run = ep.module()
    accepted = refused = 0
    for m, n in itertools.product(range(5), range(5)):
        if model is SuffixSetitem and n == 0:
            continue  # x[-0:] is all of x, where the slice's size reads 0 (a slice-bound question, not this one)
        x, y = (torch.randn(s) for s in _shapes(model, m, n))
        expected = _eager(model, x, y)
        if expected is None:
            # refused before computing, by the program's own check on the input sizes
            with pytest.raises(RuntimeInputError, match="shape"):
                run(x, y)
            refused += 1
        else:
            torch.testing.assert_close(run(x, y), expected, rtol=0, atol=0)
            accepted += 1
    assert accepted and refused  # both sides of eager's condition were exercised


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_size_one_value_into_empty_slice(model):
    """M = 0, N = 1: the broadcast case the non-broadcast assumption used to refuse."""
    x, y = (torch.randn(s) for s in _shapes(model, 4, 3))
    ep = graphcap.export(model(), (x, y), dynamic_shapes=_spec(model))
    x, y = (torch.randn(s) for s in _shapes(model, 0, 1))
    torch.testing.assert_close(ep.module()(x, y), model()(x, y))


@pytest.mark.parametrize("strict", [False, pytest.param(True, marks=_STRICT_SETITEM_NEEDS_2_13)],
                         ids=["nonstrict", "strict"])
def test_setitem_program_copies_the_value_directly(strict):
    """No view/expand of the value and one check in the program: eager's broadcast condition."""
    x, y = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 3)
    ep = graphcap.export(PrefixSetitem4d(), (x, y), dynamic_shapes=_spec(PrefixSetitem4d), strict=strict)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.expand.default not in targets
    assert torch.ops.aten.copy_.default in targets
    asserts = [n for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert len(asserts) == 1


@pytest.mark.parametrize("example", [(4, 3), (3, 3), (5, 1)])
def test_example_sizes_do_not_narrow_the_program(example):
    """Exported at equal, unequal or size-1 examples, the program accepts the same sizes."""
    m, n = example
    x, y = torch.randn(2, 2, 3, m), torch.randn(2, 2, 3, n)
    ep = graphcap.export(PrefixSetitem4d(), (x, y), dynamic_shapes=_spec(PrefixSetitem4d))
    for m, n in [(0, 1), (0, 0), (3, 3), (1, 1), (6, 2), (7, 1)]:
        x, y = torch.randn(2, 2, 3, m), torch.randn(2, 2, 3, n)
        torch.testing.assert_close(ep.module()(x, y), PrefixSetitem4d()(x, y), rtol=0, atol=0)


def test_decomposed_and_reloaded_programs_keep_the_sizes(tmp_path):
    x, y = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 3)
    ep = graphcap.export(PrefixSetitem4d(), (x, y), dynamic_shapes=_spec(PrefixSetitem4d))
    graphcap.save(ep, tmp_path / "p.pt2")
    for program in (ep.run_decompositions(), graphcap.load(tmp_path / "p.pt2")):
        for m, n in [(0, 1), (3, 3), (5, 2)]:
            x, y = torch.randn(2, 2, 3, m), torch.randn(2, 2, 3, n)
            torch.testing.assert_close(program.module()(x, y), PrefixSetitem4d()(x, y), rtol=0, atol=0)
        with pytest.raises(RuntimeInputError):
            program.module()(torch.randn(2, 2, 3, 2), torch.randn(2, 2, 3, 3))


def test_copy_rule_is_scoped_to_the_export():
    """Outside an export, fake tensors keep torch's own copy_ kernel."""
    from torch._subclasses import fake_impls
    rule = fake_impls.op_implementations_dict[torch.ops.aten.copy_.default]
    x, y = torch.randn(4), torch.randn(3)
    graphcap.export(PrefixSetitem1d(), (x, y), dynamic_shapes=_spec(PrefixSetitem1d))
    assert fake_impls.op_implementations_dict[torch.ops.aten.copy_.default] is rule


def test_refusal_says_the_operator_needs_the_sizes_to_agree():
    """A size pair eager refuses too (the value does not broadcast into the slice) is not
    presented as a choice made at export only."""
    x, y = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 3)
    ep = graphcap.export(PrefixSetitem4d(), (x, y), dynamic_shapes=_spec(PrefixSetitem4d))
    with pytest.raises(RuntimeInputError) as info:
        ep.module()(torch.randn(2, 2, 3, 2), torch.randn(2, 2, 3, 5))
    message = str(info.value)
    assert "*args[1].shape[3]" in message and "broadcast" in message and "eager refuses" in message


# Basic-index setitems recorded as the view's copy_ (non-strict, every torch line): each model
# takes x (dim M) and y (dim N); the shapes give x's and y's shape at sizes m, n.
def _int_then_slice(x, y):
    x[0, :y.shape[0]] = y


def _ellipsis(x, y):
    x[..., :y.shape[-1]] = y


def _value_with_leading_ones(x, y):
    x[:y.shape[1]] = y


def _scalar_value(x, y):
    x[:y.shape[0]] = y.sum()


def _float64_value(x, y):
    x[:y.shape[0]] = y.double() / 3


def _value_broadcast_along_another_dim(x, y):
    x[:, :y.shape[0]] = y


def _step_slice(x, y):
    x[::2] = y


def _then_in_place(x, y):
    x[:y.shape[0]] = y
    x.mul_(2)
    x[1:].add_(1)


BASIC_INDEX_CASES = {  # body: (x's shape at m, y's shape at n, x's dynamic dim, y's dynamic dim, example)
    _int_then_slice: (lambda m: (2, m), lambda n: (n,), 1, 0, (4, 3)),
    _ellipsis: (lambda m: (2, 3, m), lambda n: (2, 3, n), 2, 2, (4, 3)),
    _value_with_leading_ones: (lambda m: (m, 4), lambda n: (1, n, 4), 0, 1, (4, 3)),
    _scalar_value: (lambda m: (m,), lambda n: (n,), 0, 0, (4, 3)),
    _float64_value: (lambda m: (m,), lambda n: (n,), 0, 0, (4, 3)),
    _value_broadcast_along_another_dim: (lambda m: (3, m), lambda n: (n,), 1, 0, (4, 3)),
    _step_slice: (lambda m: (m,), lambda n: (n,), 0, 0, (4, 2)),
    _then_in_place: (lambda m: (m,), lambda n: (n,), 0, 0, (4, 3)),
}


class _CloneThenSetitem(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x, y):
        x = x.clone()
        self.body(x, y)
        return x


@pytest.mark.parametrize("body", list(BASIC_INDEX_CASES), ids=lambda f: f.__name__.strip("_"))
def test_basic_index_setitem_matches_eager_at_every_size(body):
    xs, ys, xd, yd, (m0, n0) = BASIC_INDEX_CASES[body]
    model = _CloneThenSetitem(body)
    dims = ({xd: Dim("M")}, {yd: Dim("N")})
    if body is _step_slice:  # y's size is (M + 1) // 2: export with x alone dynamic and y derived
        m_dim = Dim("M2", min=0, max=32)
        dims = ({0: 2 * m_dim}, {0: m_dim})
    smallest_m = 0
    if body is _then_in_place:  # x[1:] records the size M - 1, -1 at M = 0: M = 0 is refused
        smallest_m = 1             # (test_negative_sizes_at_zero_one.py), so the spec starts at 1
        dims = ({xd: Dim("M", min=1)}, {yd: Dim("N")})
    ep = graphcap.export(model, (torch.randn(xs(m0)), torch.randn(ys(n0))), dynamic_shapes=dims)
    run = ep.module()
    accepted = 0
    for m, n in itertools.product(range(5), range(5)):
        if body is _step_slice and m != 2 * n:
            continue
        x, y = torch.randn(xs(m)), torch.randn(ys(n))
        if m < smallest_m:
            with pytest.raises(RuntimeInputError):
                run(x, y)
            continue
        try:
            expected = model(x.clone(), y.clone())
        except RuntimeError:
            with pytest.raises(RuntimeInputError):
                run(x, y)
            continue
        torch.testing.assert_close(run(x, y), expected, rtol=0, atol=0)
        accepted += 1
    assert accepted


def test_advanced_index_setitem_keeps_torch_setitem():
    """A tensor index is not a basic index: torch's own setitem records it, as before."""
    class MaskedFill(torch.nn.Module):
        def forward(self, x, y):
            x = x.clone()
            x[x > 0] = y.sum()
            return x

    x, y = torch.randn(5), torch.randn(3)
    ep = graphcap.export(MaskedFill(), (x, y), dynamic_shapes=({0: Dim("M")}, {0: Dim("N")}))
    for m, n in [(1, 1), (4, 2), (6, 0)]:
        x, y = torch.randn(m), torch.randn(n)
        torch.testing.assert_close(ep.module()(x, y), MaskedFill()(x, y))
