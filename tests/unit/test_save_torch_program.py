"""graphcap.save takes a torch.export program too (a drop-in save for code whose programs
come from torch's own export or from torch.export's private entry points): it is saved as
the graphcap program from_torch converts it to, and load gives that program back."""
import io

import torch

import graphcap


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: t - 1, (x,))


def test_save_accepts_a_torch_program_and_load_runs_it():
    x = torch.randn(2, 3)
    tep = torch.export.export(Branchy(), (x,)).run_decompositions()
    buffer = io.BytesIO()
    graphcap.save(tep, buffer)
    buffer.seek(0)
    loaded = graphcap.load(buffer)
    assert isinstance(loaded, graphcap.ExportedProgram)
    for sample in (x, -x.abs() - 1, x.abs() + 1):
        torch.testing.assert_close(loaded.module()(sample), tep.module()(sample))


def test_save_still_refuses_what_is_no_program():
    import pytest
    with pytest.raises(graphcap.errors.SerializationError, match="Expected an exported program, got the module Linear"):
        graphcap.save(torch.nn.Linear(2, 2), io.BytesIO())
