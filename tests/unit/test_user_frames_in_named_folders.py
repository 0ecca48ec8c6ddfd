"""A user's code in a folder named "graphcap" or "torch" is still the user's code.

Messages name the user's line by skipping torch's and graphcap's own frames. Those are
told by the directories the two packages were imported from, so a project kept in a
folder that happens to share a name with them (a clone of graphcap's repository, a
checkout under ``~/torch/``) still gets its own lines in errors and guard messages.
"""
from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch

import graphcap
from graphcap import Dim

SOURCE = textwrap.dedent('''
    import torch

    class Raises(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom in user code")

    class DataBranch(torch.nn.Module):
        def forward(self, x):
            if x.sum().item() > 0:
                return x + 1
            return x - 1

    class ShapeBranch(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 4:
                return x + 1
            return x - 1

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y
''')


@pytest.fixture(params=["graphcap", "torch"])
def user_module(request, tmp_path):
    folder = tmp_path / request.param / "project"
    folder.mkdir(parents=True)
    path = folder / "user_models.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(f"user_models_in_{request.param}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, str(path)


def test_an_exception_in_forward_names_the_users_file(user_module):
    module, path = user_module
    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(module.Raises(), (torch.ones(1),))
    assert path in str(info.value) and 'raise ValueError("boom in user code")' in str(info.value)


def test_an_undecidable_data_branch_names_the_users_line(user_module):
    module, _ = user_module
    with pytest.raises(graphcap.UnsupportedError) as info:
        graphcap.export(module.DataBranch(), (torch.tensor([0, 1, 2]),))
    assert "if x.sum().item() > 0" in str(info.value)


def test_a_shape_guard_names_the_users_line(user_module):
    module, _ = user_module
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(module.ShapeBranch(), (torch.randn(6, 4),),
                        dynamic_shapes=({0: Dim("x", min=2, max=16)},))
    assert "if x.shape[0] > 4" in str(info.value)


def test_a_guard_raised_inside_an_operator_names_the_users_call(user_module):
    module, _ = user_module
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(module.Add(), (torch.randn(4, 3), torch.randn(4, 3)),
                        dynamic_shapes=({0: Dim("dx", max=20)}, {0: Dim("dy", max=20)}))
    assert "in forward: return x + y" in str(info.value)
