"""Inferred dynamic shapes audit (2026-11-27 late morning): what the samples give on models that need more.

A need no spec can say (a reshape to a fixed size: ``batch*seq == 24``) keeps the dims dynamic and is
checked by the program when it runs, as torch.export's ``AdditionalInputs`` program does; a sample the
model fails on, or one on another side of a shape branch, is refused naming the sample and the line.
"""

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import InputGuardError, VerificationError


class ToFixedSize(torch.nn.Module):
    def forward(self, x):
        return x.reshape(4, 6) * 2


class FlattenTo(torch.nn.Module):
    """A need over two inputs: the product of x's dims equals y's length."""
    def forward(self, x, y):
        return x.reshape(-1) + y.view(y.shape[0])[: x.numel()]


def _samples_24():
    return [(torch.randn(2, 12),), (torch.randn(3, 8),), (torch.randn(6, 4),)]


def test_a_need_no_spec_can_say_keeps_the_dims_dynamic_and_is_checked_when_run():
    shapes = graphcap.infer_dynamic_shapes(ToFixedSize(), _samples_24())
    assert shapes.checked_when_run and shapes.verified == [0, 1, 2]
    assert isinstance(shapes.spec["x"][0], Dim) and isinstance(shapes.spec["x"][1], Dim)
    m = shapes.program.module()
    for x in (torch.randn(1, 24), torch.randn(24, 1), torch.randn(12, 2)):   # sizes no sample had
        torch.testing.assert_close(m(x), ToFixedSize()(x))
    with pytest.raises(InputGuardError) as e:
        m(torch.randn(5, 5))
    assert "*args[0].shape[0] * *args[0].shape[1]" in str(e.value)  # a product, not a power
    assert "What the program checks when it runs" in shapes.report()
    assert "prefer_deferred_runtime_asserts_over_guards=True" in shapes.code


def test_the_printed_code_pasted_with_its_option_exports_the_same_program():
    shapes = graphcap.infer_dynamic_shapes(ToFixedSize(), _samples_24()[:2])
    scope: dict = {}
    exec(shapes.code, scope)
    ep = graphcap.export(ToFixedSize(), (torch.randn(8, 3),), dynamic_shapes=scope["dynamic_shapes"],
                         prefer_deferred_runtime_asserts_over_guards=True)
    torch.testing.assert_close(ep.module()(torch.randn(2, 12)).shape, torch.Size([4, 6]))


def test_export_and_capture_with_infer_keep_the_runtime_check():
    ep = graphcap.export(ToFixedSize(), (torch.randn(4, 6),), dynamic_shapes="infer", samples=_samples_24()[:2])
    assert len(ep.range_constraints) == 2
    x = torch.randn(3, 8)
    torch.testing.assert_close(ep.module()(x), ToFixedSize()(x))
    program, _ = graphcap.capture(ToFixedSize(), dynamic_shapes="infer", samples=_samples_24()[:2],
                                  strategies=("non_strict",))
    x = torch.randn(12, 2)                       # a size no sample had
    torch.testing.assert_close(program.module()(x), ToFixedSize()(x))
    with pytest.raises(InputGuardError):
        program.module()(torch.randn(5, 5))


def test_a_need_across_two_inputs_is_checked_when_run():
    samples = [(torch.randn(2, 3), torch.randn(6)), (torch.randn(4, 2), torch.randn(9))]
    shapes = graphcap.infer_dynamic_shapes(FlattenTo(), samples)
    m = shapes.program.module()
    x, y = torch.randn(5, 2), torch.randn(12)
    torch.testing.assert_close(m(x, y), FlattenTo()(x, y))
    assert shapes.verified == [0, 1]


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1


def test_samples_on_two_sides_of_a_shape_branch_are_refused_naming_the_line():
    with pytest.raises(VerificationError) as e:
        graphcap.infer_dynamic_shapes(Branch(), [(torch.randn(2, 3),), (torch.randn(6, 3),)])
    text = str(e.value)
    assert e.value.where == "samples[1]"
    assert "if x.shape[0] > 4:" in text and "different paths" in text and "torch.cond" in text


class SizeTest(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 12:
            return x.view(x.shape[0], 3, 4).sum(-1)
        return x[:, :3] * 2


def test_a_size_the_code_fixes_by_equality_is_refused_naming_the_line():
    with pytest.raises(VerificationError) as e:
        graphcap.infer_dynamic_shapes(SizeTest(), [(torch.randn(3, 8),), (torch.randn(2, 12),)])
    assert "x.shape[1] == 12" in str(e.value) and "samples[" in e.value.where


class ViewTo(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], 3, 4).sum(-1)


def test_a_sample_the_model_itself_fails_on_is_named():
    with pytest.raises(VerificationError) as e:
        graphcap.infer_dynamic_shapes(ViewTo(), [(torch.randn(2, 12),), (torch.randn(4, 12),), (torch.randn(3, 8),)])
    assert e.value.where == "samples[2]" and "model itself fails" in str(e.value)
    assert "RuntimeError" in str(e.value)


class ListSum(torch.nn.Module):
    def forward(self, xs):
        return sum(x.sum(0) for x in xs)


def test_names_of_list_entries_have_single_underscores():
    shapes = graphcap.infer_dynamic_shapes(ListSum(), [([torch.randn(2, 3), torch.randn(4, 3)],),
                                                       ([torch.randn(3, 3), torch.randn(5, 3)],)])
    assert set(shapes.dims) == {"xs_0_dim0", "xs_1_dim0"}


def test_samples_of_size_zero_and_one_give_a_program_for_every_size():
    lin = torch.nn.Linear(8, 4)
    shapes = graphcap.infer_dynamic_shapes(lin, [(torch.randn(0, 8),), (torch.randn(1, 8),)])
    m = shapes.program.module()
    for b in (0, 1, 2, 7):
        x = torch.randn(b, 8)
        torch.testing.assert_close(m(x), lin(x))


class FirstOrMean(torch.nn.Module):
    """``seq > 1`` cuts 0 and 1 off the range; the general branch matches eager at 1, eager fails at 0."""
    def forward(self, x):
        if x.shape[1] > 1:
            return x.mean(1)
        return x[:, 0]


def test_a_range_cut_failing_only_at_zero_keeps_size_one():
    shapes = graphcap.infer_dynamic_shapes(FirstOrMean(), [(torch.randn(2, 5),), (torch.randn(3, 7),)])
    assert shapes.spec["x"][1].min == 1 and 'Dim("seq", min=1)' in shapes.code
    m = shapes.program.module()
    x = torch.randn(4, 1)                         # one token: the decode step of a causal model
    torch.testing.assert_close(m(x), FirstOrMean()(x))
    with pytest.raises(InputGuardError):
        m(torch.randn(4, 0))


def test_a_declared_dim_gets_the_fix_that_keeps_size_one():
    with pytest.raises(graphcap.ConstraintViolationError) as e:
        graphcap.export(FirstOrMean(), (torch.randn(2, 5),), dynamic_shapes={"x": {1: Dim("s")}})
    assert "s = Dim('s', min=1)" in str(e.value) and "At s = 0" in str(e.value)
    spec = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(e.value), {"x": {1: Dim("s")}})
    ep = graphcap.export(FirstOrMean(), (torch.randn(2, 5),), dynamic_shapes=spec)
    x = torch.randn(2, 1)
    torch.testing.assert_close(ep.module()(x), FirstOrMean()(x))


class BothFail(torch.nn.Module):
    """At 1 the special branch differs from the general one: both 0 and 1 are cut."""
    def forward(self, x):
        if x.shape[0] > 1:
            return x * 2
        return x + 100


def test_a_range_cut_failing_at_one_still_cuts_both():
    with pytest.raises(graphcap.ConstraintViolationError) as e:
        graphcap.export(BothFail(), (torch.randn(3, 2),), dynamic_shapes={"x": {0: Dim("b")}})
    assert "b = Dim('b', min=2)" in str(e.value)


def _tokens(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, 1000, (b, s), generator=g),
            "attention_mask": torch.ones(b, s, dtype=torch.long)}


def test_llama_inferred_program_takes_one_token_and_decomposes():
    from conftest import build_zoo  # the public zoo, or the repository's own small models without it
    model = build_zoo("hf_llama").model
    shapes = graphcap.infer_dynamic_shapes(model, [((), _tokens(2, 7, 1)), ((), _tokens(3, 12, 2))])
    assert shapes.spec["input_ids"][1].min == 1          # the decode step (one token) is in range
    # the decomposition's check builds stand-ins at sizes 1 (expanded masks share memory there)
    decomposed = shapes.program.run_decompositions()
    one = _tokens(2, 1, 3)
    with torch.no_grad():
        want = model(**one).last_hidden_state
    for program in (shapes.program, decomposed):
        torch.testing.assert_close(program.module()(**one).last_hidden_state, want, atol=1e-4, rtol=1e-4)


class PositionsAndCut(torch.nn.Module):
    """A buffer of 8 positions sliced and expanded to the length (BERT's token types: length <= 8),
    and a branch ``length > 1`` that cuts 0 and 1 (the general branch is right at 1, not at 0)."""
    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.arange(8.0).unsqueeze(0))

    def forward(self, x):
        p = self.pos[:, : x.shape[1]].expand(x.shape[0], x.shape[1])
        if x.shape[1] > 1:
            return (x + p).mean(1)
        return (x + p)[:, 0]


def test_a_bound_on_a_dim_whose_range_is_cut_is_still_found():
    spec = {"x": {0: Dim("b"), 1: Dim("s", min=1)}}
    with pytest.raises(graphcap.ConstraintViolationError) as e:   # was exported over [1, inf]
        graphcap.export(PositionsAndCut(), (torch.randn(2, 5),), dynamic_shapes=spec)
    assert "s = Dim('s', min=1, max=8)" in str(e.value)
    shapes = graphcap.infer_dynamic_shapes(PositionsAndCut(), [(torch.randn(2, 5),), (torch.randn(3, 7),)])
    seq = shapes.spec["x"][1]
    assert (seq.min, seq.max) == (1, 8)
    m = shapes.program.module()
    for s in (1, 8):
        x = torch.randn(2, s)
        torch.testing.assert_close(m(x), PositionsAndCut()(x))
    with pytest.raises(InputGuardError):
        m(torch.randn(2, 9))                 # refused before computing, not inside the expand
