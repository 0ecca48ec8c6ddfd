"""The program remembers what its export measured and assumed: stage timings and the
specializations/relations/ranges/guards with the user's source line (for graphcap.report)."""
import torch

import graphcap
from graphcap import Dim


class Branchy(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[1] == 3:  # specializes dim 1
            x = x * 2
        if x.shape[0] > 4:  # a guard on dim 0
            x = x + 1
        return x[:, :2] + y  # ties x's dim 0 to y's


def test_timings_name_every_stage_of_the_pipeline():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)))
    assert list(ep.export_timings) == ["inputs", "fakify", "capture", "lift", "guards", "metadata", "verify"]
    assert all(s >= 0 for s in ep.export_timings.values())


def test_static_export_records_no_assumptions():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)))
    assert ep.export_assumptions == []


def test_auto_dims_record_specialization_relation_and_guard_with_user_lines():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                         dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    by_kind = {}
    for a in ep.export_assumptions:
        by_kind.setdefault(a.kind, []).append(a)
    spec = by_kind["specialization"][0]
    assert spec.text.endswith("= 3") and "if x.shape[1] == 3" in spec.where
    assert "test_export_record.py" in spec.where
    assert by_kind["relation"][0].text == "*args[0].shape[0] = *args[1].shape[0]"
    guard = by_kind["guard"][0]
    assert "> 4" in guard.text and "if x.shape[0] > 4" in guard.where
    assert all(isinstance(a.to_dict(), dict) for a in ep.export_assumptions)


def test_declared_dim_range_narrowed_by_a_branch_is_not_recorded_when_spec_matches():
    class M(torch.nn.Module):
        def forward(self, x):
            return x[:2] * 2

    ep = graphcap.export(M(), (torch.randn(5),), dynamic_shapes={"x": {0: Dim("n", min=2, max=10)}})
    assert all(a.kind != "specialization" for a in ep.export_assumptions)


def test_rebuilt_programs_keep_the_record():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                         dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    new = ep._update(ep.graph_module, ep.graph_signature)
    assert new.export_assumptions == ep.export_assumptions
    assert new.export_timings == ep.export_timings


def test_decomposed_programs_keep_the_record():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                         dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    new = ep.run_decompositions()
    assert new.export_assumptions == ep.export_assumptions and new.export_timings == ep.export_timings
