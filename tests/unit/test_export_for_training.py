"""``graphcap.export_for_training``: torch 2.10's deprecated name for export, kept so code
written for torch 2.10 (``torch.export.export_for_training``) runs after the import switch."""
from __future__ import annotations

import pytest
import torch

import graphcap


class TrainingBits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.lin(x))).relu()


def test_same_program_as_export_with_torch_2_10s_warning():
    model, x = TrainingBits().train(), torch.randn(3, 4)
    spec = {"x": {0: graphcap.Dim("b", min=2, max=32)}}
    with pytest.warns(FutureWarning, match="graphcap.export"):
        ep = graphcap.export_for_training(model, (x,), dynamic_shapes=spec)
    reference = graphcap.export(model, (x,), dynamic_shapes=spec)
    assert [str(n.target) for n in ep.graph.nodes] == [str(n.target) for n in reference.graph.nodes]
    assert str(ep.graph_signature) == str(reference.graph_signature)
    assert {str(k): str(v) for k, v in ep.range_constraints.items()} == \
        {str(k): str(v) for k, v in reference.range_constraints.items()}


def test_offered_wherever_torch_export_offers_it():
    assert "export_for_training" in graphcap.__all__
    torch_names = set(torch.export.__all__)
    assert torch_names <= set(dir(graphcap))
