"""Mistakes in what is handed to export are refused before tracing, with
graphcap's message and the exception types torch.export raises for them."""
from __future__ import annotations

import pytest
import torch

import graphcap


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


def test_args_not_a_tuple_is_also_torchs_user_error():
    from torch._dynamo.exc import UserError, UserErrorType
    with pytest.raises(UserError, match="to be a tuple") as info:
        graphcap.export(AddOne(), torch.rand(2, 2))
    err = info.value
    assert isinstance(err, graphcap.ExportInputError) and isinstance(err, ValueError)
    assert err.error_type is UserErrorType.INVALID_INPUT
    assert "export(mod, (x,))" in str(err)  # the fix is in the message


def test_kwargs_not_a_dict_is_refused():
    from torch._dynamo.exc import UserError
    with pytest.raises(UserError, match="`kwargs` to be a dict"):
        graphcap.export(AddOne(), (torch.rand(2),), [torch.rand(2)])


def test_script_module_is_refused_with_a_value_error():
    scripted = torch.jit.script(AddOne())
    with pytest.raises(ValueError, match="Exporting a ScriptModule is not supported") as info:
        graphcap.export(scripted, (torch.rand(2),))
    assert isinstance(info.value, graphcap.ExportInputError)
    assert "before torch.jit.script" in str(info.value)


def test_a_scripted_submodule_called_from_python_still_exports():
    class Mod(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.jit.script(AddOne())._c

        def forward(self, x):
            return self.inner.forward(x) * 2

    x = torch.rand(3)
    ep = graphcap.export(Mod(), (x,))
    torch.testing.assert_close(ep.module()(x), (x + 1) * 2)
