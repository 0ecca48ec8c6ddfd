"""graphcap.verify: the program against eager across its dynamic range, and wrong inputs refused."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from cli_factories import Counter

import graphcap
from conftest import build_zoo
from graphcap import Dim
from graphcap.demo import example
from graphcap.verification.compare import compare_tensors
from graphcap.verification.generate import make_inputs, size_plans
from graphcap.verification.signature_inputs import ProgramInputs


class Pair(nn.Module):
    """x [b, 8], idx [b, 5] into an embedding, y [2*b, 2]: derived and equal dims, indices."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lin = nn.Linear(8, 4)

    def forward(self, x, idx, y):
        return self.emb(idx).sum(1) + self.lin(x), torch.cat([y, y], 0) * 2


def _pair_export():
    b = Dim("b", min=2, max=16)
    model = Pair()
    args = (torch.randn(3, 8), torch.randint(0, 10, (3, 5)), torch.randn(6, 2))
    return model, graphcap.export(model, args, dynamic_shapes=({0: b}, {0: b}, {0: 2 * b}))


def test_static_builtin_example_matches_and_result_is_data():
    model, args, kwargs = example()
    ep = graphcap.export(model, args, kwargs)
    result = graphcap.verify(ep, model, samples=2)
    assert result.passed, str(result)
    data = json.loads(json.dumps(result.as_dict()))
    assert data["passed"] is True and len(data["input_sets"]) == 3  # static sizes + 2 random
    first = data["input_sets"][0]
    assert first["shapes"] == {"image": [2, 3, 16, 16]}
    assert {o["name"] for o in first["outputs"]} == {"output['logits']", "output['probs']"}
    assert all(o["max_abs_error"] is not None for o in first["outputs"])
    # wrong inputs: a static size, dtype, rank, the baked-in float, the structure
    labels = [r["label"] for r in data["refusals"]]
    assert any("temperature = 3.0" in lab for lab in labels) and any("dtype" in lab for lab in labels)
    assert all(r["refused"] for r in data["refusals"])
    text = str(result)
    assert "Program vs eager" in text and "match" in text and "refused" in text


def test_dynamic_sizes_cover_range_ends_and_honour_derived_and_equal_dims():
    model, ep = _pair_export()
    result = graphcap.verify(ep, model, samples=4)
    assert result.passed, str(result)
    shapes = [s.shapes for s in result.input_sets]
    for sh in shapes:
        assert sh["x"][0] == sh["idx"][0] and sh["y"][0] == 2 * sh["x"][0]
    batches = {sh["x"][0] for sh in shapes}
    assert {2, 16, 3} <= batches  # both ends and the example
    labels = [r.label for r in result.refusals]
    assert any("below its range" in lab for lab in labels) and any("above its range" in lab for lab in labels)
    assert any("not of the form 2*" in lab for lab in labels)
    assert any("while x.shape[0]" in lab for lab in labels)
    assert all(r.refused for r in result.refusals), str(result)


def test_zero_and_one_are_tried_where_the_range_allows_them():
    class RowSum(nn.Module):
        def forward(self, x):
            return x.sum(0) + 1

    n = Dim("n", min=0, max=10)
    ep = graphcap.export(RowSum(), (torch.randn(4, 3),), dynamic_shapes=({0: n},))
    result = graphcap.verify(ep, RowSum(), samples=1)
    batches = [s.shapes["x"][0] for s in result.input_sets]
    assert 0 in batches and 1 in batches and 10 in batches
    assert result.passed, str(result)


def test_counter_baked_in_at_export_is_reported_with_the_first_failing_input():
    model = Counter()
    ep = graphcap.export(model, (torch.randn(2, 3),))
    result = graphcap.verify(ep, model, samples=3)
    assert not result.passed
    first = result.first_failure
    assert first is result.input_sets[1]  # the program computes x * 1 forever; eager's second call x * 2
    assert "differs from eager" in first.describe()
    assert "First failure" in result.summary()
    assert result.input_sets[1].outputs[0].max_abs > 0


def test_buffers_written_by_forward_are_compared_and_restored():
    class Tally(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen.add_(x.shape[0])
            return x + self.seen

    model = Tally()
    b = Dim("b", min=1, max=8)
    ep = graphcap.export(model, (torch.randn(3, 2),), dynamic_shapes=({0: b},))
    before = model.seen.clone()
    result = graphcap.verify(ep, model, samples=2)
    assert result.passed, str(result)
    assert torch.equal(model.seen, before)  # every call started from, and left, the same state
    names = {o.name for s in result.input_sets for o in s.outputs}
    assert "buffer seen (written)" in names


def test_integer_inputs_stay_valid_indices_without_example_values():
    model, ep = _pair_export()
    ep.example_inputs = None
    inputs = ProgramInputs(ep)
    for k, plan in enumerate(size_plans(inputs, samples=3)):
        (x, idx, y), _ = make_inputs(inputs, plan.bindings, seed=k)
        assert idx.dtype == torch.int64 and int(idx.min()) >= 0 and int(idx.max()) < 10
        assert y.shape[0] == 2 * x.shape[0]
    assert graphcap.verify(ep, model, samples=2).passed


def test_a_program_that_accepts_a_wrong_input_fails_the_refusal_check():
    from graphcap.verification import _check_refused
    accepted = _check_refused("anything", lambda *a, **k: 1, (torch.zeros(1),), {})
    assert not accepted.passed and "accepted" in accepted.message

    def computes_then_fails(*a, **k):
        raise RuntimeError("shape mismatch inside a kernel")
    late = _check_refused("late", computes_then_fails, (), {})
    assert not late.passed and "not refused by the input checks" in late.message


def test_tolerances_per_dtype_nan_and_integers():
    a = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_tensors("o", a, a.clone(), None, None).ok  # NaN matches NaN, inf the same inf
    assert not compare_tensors("o", a, a + 1e-3, None, None).ok
    half = torch.tensor([1.0], dtype=torch.float16)
    assert compare_tensors("o", half, half + 5e-4, None, None).ok  # float16: rtol 1e-3
    ints = torch.tensor([1, 2])
    check = compare_tensors("o", ints, torch.tensor([1, 3]), None, None)
    assert not check.ok and check.max_abs == 1.0
    assert not compare_tensors("o", ints, ints.to(torch.int32), None, None).ok  # dtype differs
    assert compare_tensors("o", a[:1], a[:1] + 0.5, None, 1.0).ok  # atol given


def test_zoo_model_with_list_inputs_verifies():
    built = build_zoo("custom_dict_list_io")
    ep = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes)
    result = graphcap.verify(ep, built.model, samples=2)
    assert result.passed, str(result)
    assert len({tuple(s.sizes.values()) for s in result.input_sets}) >= 3


def test_eager_error_only_on_one_side_is_a_failure():
    class Picky(nn.Module):
        def forward(self, x):
            if not torch.compiler.is_exporting() and x.shape[0] > 4:
                raise ValueError("eager refuses big batches")
            return x * 2

    b = Dim("b", min=1, max=8)
    ep = graphcap.export(Picky(), (torch.randn(3, 2),), dynamic_shapes=({0: b},))
    result = graphcap.verify(ep, Picky(), samples=0, check_refusals=False)
    failing = [s for s in result.input_sets if not s.passed]
    assert failing and all("eager raised ValueError" in s.error for s in failing)


@pytest.mark.parametrize("samples", [0, 3])
def test_samples_counts_random_sets(samples):
    model, ep = _pair_export()
    plans = size_plans(ProgramInputs(ep), samples=samples)
    assert sum(p.label.startswith("random") for p in plans) == samples


def test_a_model_with_other_weights_is_named_as_the_likely_cause():
    model, ep = _pair_export()
    other = Pair()  # fresh random weights, as a factory without a seed builds
    result = graphcap.verify(ep, other, samples=0, check_refusals=False)
    assert not result.passed
    assert result.notes and "weights differ" in result.notes[0] and "emb.weight" in result.notes[0]
    assert not graphcap.verify(ep, model, samples=0, check_refusals=False).notes


def test_asserted_relations_shape_the_sizes_and_are_checked_by_refusals():
    class Pairs(nn.Module):
        def forward(self, x):
            torch._check(x.shape[0] % 2 == 0)
            return x.reshape(-1, 2, x.shape[1]).sum(1)

    ep = graphcap.export(Pairs(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b", min=2, max=20)},),
                         prefer_deferred_runtime_asserts_over_guards=True)
    result = graphcap.verify(ep, Pairs(), samples=4)
    assert result.passed, str(result)
    assert all(s.shapes["x"][0] % 2 == 0 for s in result.input_sets)
    breaking = [r for r in result.refusals if "breaking the asserted" in r.label]
    assert len(breaking) == 1 and breaking[0].refused


def test_dynamic_int_inputs_are_generated_in_their_range():
    class Repeat(nn.Module):
        def forward(self, x, n):
            return x.repeat(n, 1)

    ep = graphcap.export(Repeat(), (torch.randn(3, 2), 4),
                         dynamic_shapes=({0: Dim("b", min=1, max=9)}, Dim("n", min=1, max=6)))
    result = graphcap.verify(ep, Repeat(), samples=2)
    assert result.passed, str(result)
    n_values = {v for s in result.input_sets for k, v in s.sizes.items() if v <= 6}
    assert {1, 6} <= n_values
    assert any("above its range [1, 6]" in r.label and r.refused for r in result.refusals)
