"""graphcap.infer_dynamic_shapes and export(dynamic_shapes="infer"): specs inferred from sample inputs."""

import pytest
import torch

import graphcap
from graphcap import Dim, ExportInputError
from graphcap.dynamic.dims import DerivedDim


def _zoo_case(name):
    from conftest import build_zoo  # the public zoo, or the repository's own small models without it
    return build_zoo(name)


class LinearMask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, mask):
        return self.lin(x) * mask.unsqueeze(-1)


def test_varying_dims_share_named_dims_and_static_dims_stay_static():
    samples = [(torch.randn(2, 5, 8), torch.ones(2, 5)), (torch.randn(3, 7, 8), torch.ones(3, 7))]
    model = LinearMask()
    shapes = graphcap.infer_dynamic_shapes(model, samples)
    batch, seq = shapes.spec["x"][0], shapes.spec["x"][1]
    assert isinstance(batch, Dim) and batch.__name__ == "batch"
    assert isinstance(seq, Dim) and seq.__name__ == "seq"
    assert shapes.spec["mask"] == {0: batch, 1: seq}
    assert 2 not in shapes.spec["x"]
    assert ("x", 2, "size 8 in every sample") in shapes.static
    assert shapes.verified == [0, 1]
    # the spec is a real dynamic_shapes: a third size exports and runs
    ep = graphcap.export(model, (torch.randn(4, 9, 8), torch.ones(4, 9)), dynamic_shapes=shapes.spec)
    x, m = torch.randn(6, 11, 8), torch.ones(6, 11)
    torch.testing.assert_close(ep.module()(x, m), model(x, m))


def test_printed_code_is_pasteable_and_builds_the_same_spec():
    samples = [(torch.randn(2, 5, 8), torch.ones(2, 5)), (torch.randn(3, 7, 8), torch.ones(3, 7))]
    shapes = graphcap.infer_dynamic_shapes(LinearMask(), samples)
    code = str(shapes)
    assert code == shapes.code
    assert 'batch = Dim("batch"' in code and "dynamic_shapes = {'x': {0: batch, 1: seq}" in code
    scope = {}
    exec(code, scope)
    ep = graphcap.export(LinearMask(), samples[0], dynamic_shapes=scope["dynamic_shapes"])
    assert len(ep.range_constraints) == 2


class Bounded(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[0] <= 64)
        return x * 2


def test_ranges_come_from_the_program_not_the_samples():
    shapes = graphcap.infer_dynamic_shapes(Bounded(), [(torch.randn(2, 5),), (torch.randn(3, 5),)])
    batch = shapes.spec["x"][0]
    assert batch.max == 64            # the program's bound, not the samples' 3
    assert batch.min <= 2
    assert "max=64" in shapes.code


class Concat(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, x], 1) + y


def test_relation_the_program_needs_is_found_by_refinement():
    samples = [(torch.randn(2, 3), torch.randn(2, 6)), (torch.randn(2, 4), torch.randn(2, 8))]
    shapes = graphcap.infer_dynamic_shapes(Concat(), samples)
    y1 = shapes.spec["y"][1]
    assert isinstance(y1, DerivedDim) and y1.root is shapes.spec["x"][1]
    assert "'y': {1: 2*x_dim1}" in shapes.code
    assert len(shapes.refinements) == 1


class Independent(torch.nn.Module):
    def forward(self, x, y):
        return x.sum() + y.sum()


def test_affine_relation_from_three_samples_and_none_from_two():
    three = [(torch.randn(2), torch.randn(5)), (torch.randn(3), torch.randn(7)), (torch.randn(6), torch.randn(13))]
    shapes = graphcap.infer_dynamic_shapes(Independent(), three)
    assert isinstance(shapes.spec["y"][0], DerivedDim)
    y0 = shapes.spec["y"][0]
    assert y0.root is shapes.spec["x"][0] and y0.fn(10) == 21
    scope = {}
    exec(shapes.code, scope)           # the printed derived dim is Python that builds the same relation
    assert scope["dynamic_shapes"]["y"][0].fn(10) == 21
    two = three[:2]
    shapes = graphcap.infer_dynamic_shapes(Independent(), two)
    assert not isinstance(shapes.spec["y"][0], DerivedDim)
    assert shapes.spec["y"][0] is not shapes.spec["x"][0]


class Kwargs(torch.nn.Module):
    def forward(self, x, **kwargs):
        return x * kwargs["scale"] + kwargs["bias"]


def test_kwargs_forward_gets_spec_by_the_names_passed_and_export_infer():
    samples = [((torch.randn(2, 5),), {"scale": torch.randn(2, 1), "bias": torch.randn(5)}),
               ((torch.randn(4, 7),), {"scale": torch.randn(4, 1), "bias": torch.randn(7)})]
    ep = graphcap.export(Kwargs(), dynamic_shapes="infer", samples=samples)
    spec = ep.inferred_shapes.spec
    assert set(spec["kwargs"]) == {"scale", "bias"}
    assert spec["kwargs"]["scale"][0] is spec["x"][0]
    assert spec["kwargs"]["bias"][0] is spec["x"][1]
    x, s, b = torch.randn(6, 3), torch.randn(6, 1), torch.randn(3)
    torch.testing.assert_close(ep.module()(x, scale=s, bias=b), Kwargs()(x, scale=s, bias=b))
    # with explicit example args the samples are extra ones; the result object passes as dynamic_shapes
    ep2 = graphcap.export(Kwargs(), (torch.randn(3, 3),), {"scale": torch.randn(3, 1), "bias": torch.randn(3)},
                          dynamic_shapes="infer", samples=samples)
    assert len(ep2.range_constraints) == 2
    ep3 = graphcap.export(Kwargs(), (torch.randn(3, 3),), {"scale": torch.randn(3, 1), "bias": torch.randn(3)},
                          dynamic_shapes=ep.inferred_shapes)
    assert len(ep3.range_constraints) == 2


def test_samples_differing_in_structure_name_the_input_path():
    samples = [((torch.randn(2, 5),), {"scale": torch.randn(2, 1), "bias": torch.randn(5)}),
               ((torch.randn(4, 7),), {"scale": torch.randn(4, 1)})]
    with pytest.raises(ExportInputError) as e:
        graphcap.infer_dynamic_shapes(Kwargs(), samples)
    assert "kwargs['bias']" in str(e.value) and "samples[0] only" in str(e.value)


def test_samples_differing_in_dtype_or_rank_name_the_input_path():
    with pytest.raises(ExportInputError) as e:
        graphcap.infer_dynamic_shapes(LinearMask(), [(torch.randn(2, 5, 8), torch.ones(2, 5)),
                                                     (torch.randn(3, 7, 8), torch.ones(3, 7, dtype=torch.int64))])
    assert "mask" in e.value.where and "torch.int64" in str(e.value)
    with pytest.raises(ExportInputError) as e:
        graphcap.infer_dynamic_shapes(LinearMask(), [(torch.randn(2, 5, 8), torch.ones(2, 5)),
                                                     (torch.randn(3, 7, 8), torch.ones(3, 7, 1))])
    assert e.value.where == "mask" and "rank" in str(e.value)


def test_too_few_samples_and_samples_without_infer_are_errors():
    with pytest.raises(ExportInputError):
        graphcap.infer_dynamic_shapes(Bounded(), [(torch.randn(2, 5),)])
    with pytest.raises(ExportInputError):
        graphcap.export(Bounded(), (torch.randn(2, 5),), samples=[(torch.randn(3, 5),)])


def _zoo_samples(built):
    return [(tuple(built.args), dict(built.kwargs or {})), (tuple(built.args2), dict(built.kwargs2 or {}))]


def _symbols_kept(built, shapes):
    """Every leaf dim the zoo's hand-written spec marks dynamic is dynamic in the inferred one."""
    from graphcap.dynamic.named_inputs import combined_inputs
    from graphcap.torch_private import pytree
    is_leaf = lambda x: x is None or (isinstance(x, dict) and all(isinstance(k, int) for k in x))  # noqa: E731
    hand = built.dynamic_shapes
    if not isinstance(hand, dict):
        hand = dict(zip(combined_inputs(built.model, tuple(built.args), dict(built.kwargs or {})), hand))
    for name, sub in hand.items():
        want = pytree.tree_flatten(sub, is_leaf=is_leaf)[0]
        got = pytree.tree_flatten(shapes.spec[name], is_leaf=is_leaf)[0]
        for w, g in zip(want, got):
            for d in (w or {}):
                assert isinstance(g, dict) and d in g, (name, d)


@pytest.mark.parametrize("case", ["hf_gpt2", "hf_gpt2_cache", "hf_bert", "tv_resnet18", "custom_dict_list_io"])
def test_zoo_models_infer_from_two_samples_and_match_eager(case):
    built = _zoo_case(case)
    assert built.dynamic_shapes is not None, f"{case} has a hand-written spec to compare with"
    shapes = graphcap.infer_dynamic_shapes(built.model, _zoo_samples(built))
    assert shapes.verified == [0, 1]      # the program matched eager on both samples
    _symbols_kept(built, shapes)


class Branchy(torch.nn.Module):
    def forward(self, x, mask):
        torch._check(x.shape[0] <= 64)
        if x.shape[1] > 4:
            return x.sum(2) * mask
        return x.mean(2) * mask


def test_report_lists_dynamic_and_static_dims_and_the_lines_that_narrowed_them():
    shapes = graphcap.infer_dynamic_shapes(Branchy(), [(torch.randn(2, 5, 8), torch.ones(2, 5)),
                                                       (torch.randn(3, 7, 8), torch.ones(3, 7))])
    assert shapes.spec["x"][1].min == 5 and shapes.spec["x"][0].max == 64
    text = shapes.report()
    assert "x.shape[0]  sizes 2, 3 in the samples -> batch in [0, 64]" in text
    assert "x.shape[2]  size 8 in every sample" in text
    assert "if x.shape[1] > 4:" in text and "torch._check(x.shape[0] <= 64)" in text


class Scaled(torch.nn.Module):
    def forward(self, x, n, mode="sum"):
        return x * n


def test_varying_int_becomes_a_dynamic_int_and_other_values_must_agree():
    shapes = graphcap.infer_dynamic_shapes(Scaled(), [(torch.randn(2, 3), 2), (torch.randn(2, 3), 5)])
    assert isinstance(shapes.spec["n"], Dim) and shapes.spec["x"] is None
    assert shapes.verified == [0, 1]
    with pytest.raises(ExportInputError) as e:
        graphcap.infer_dynamic_shapes(Scaled(), [((torch.randn(2, 3), 2), {"mode": "sum"}),
                                                 ((torch.randn(3, 3), 2), {"mode": "mean"})])
    assert e.value.where == "mode"


def test_export_runs_on_a_sample_whose_dynamic_sizes_avoid_one():
    model = LinearMask()
    samples = [(torch.randn(1, 5, 8), torch.ones(1, 5)), (torch.randn(3, 7, 8), torch.ones(3, 7))]
    shapes = graphcap.infer_dynamic_shapes(model, samples)
    assert shapes.example[0][0].shape[0] == 3
    assert isinstance(shapes.spec["x"][0], Dim) and shapes.verified == [0, 1]


@pytest.mark.parametrize("make", [LinearMask, Branchy])
def test_graphcap_verify_passes_across_the_inferred_ranges(make):
    model = make()
    shapes = graphcap.infer_dynamic_shapes(model, [(torch.randn(2, 5, 8), torch.ones(2, 5)),
                                                   (torch.randn(3, 7, 8), torch.ones(3, 7))])
    result = graphcap.verify(shapes.program, model, samples=3)
    assert result.passed, result


def test_capture_infers_the_spec_from_samples():
    model = LinearMask()
    samples = [(torch.randn(2, 5, 8), torch.ones(2, 5)), (torch.randn(3, 7, 8), torch.ones(3, 7))]
    program, attempts = graphcap.capture(model, dynamic_shapes="infer", samples=samples, strategies=("non_strict",))
    assert len(program.range_constraints) == 2
    x, m = torch.randn(5, 4, 8), torch.ones(5, 4)
    torch.testing.assert_close(program.module()(x, m), model(x, m))


def test_kwargs_in_another_order_are_the_same_inputs():
    samples = [((torch.randn(2, 5),), {"scale": torch.randn(2, 1), "bias": torch.randn(5)}),
               ((torch.randn(4, 7),), {"bias": torch.randn(7), "scale": torch.randn(4, 1)})]
    shapes = graphcap.infer_dynamic_shapes(Kwargs(), samples)
    assert shapes.spec["kwargs"]["scale"][0] is shapes.spec["x"][0] and shapes.verified == [0, 1]


def test_an_argument_passed_by_position_or_by_keyword_is_the_same_input():
    x, m = torch.randn(2, 8), torch.ones(2)
    samples = [((x,), {"mask": m}),                                   # x by position
               ((), {"x": torch.randn(5, 8), "mask": torch.ones(5)}),  # x by keyword
               (torch.randn(3, 8), torch.ones(3))]                     # both by position
    shapes = graphcap.infer_dynamic_shapes(LinearMask(), samples)
    assert shapes.spec["x"][0] is shapes.spec["mask"][0] and shapes.verified == [0, 1, 2]
    ep = graphcap.export(LinearMask(), (x,), {"mask": m}, dynamic_shapes="infer", samples=samples[1:])
    out = ep.module()(torch.randn(7, 8), mask=torch.ones(7))  # called the way its example was
    assert out.shape == (7, 4)


def test_samples_with_a_missing_argument_still_name_it():
    samples = [(torch.randn(2, 8), torch.ones(2)), ((), {"x": torch.randn(5, 8)})]
    with pytest.raises(ExportInputError, match="signature"):
        graphcap.infer_dynamic_shapes(LinearMask(), samples)
