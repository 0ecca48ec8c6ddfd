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
