"""``ep.module().train()`` and ``.eval()`` are refused, as torch.export's module() refuses them: the
graph fixed dropout, batch norm and ``if self.training`` branches when it was exported, so
switching the flag would silently change nothing. Code that needs the switch for dropout and
batch norm replaces the methods on the instance (torchao's ``allow_exported_model_train_eval``),
which keeps working."""
from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

import graphcap


class _Regularized(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.norm(x))
        return y * 2 if self.training else y


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_train_and_eval_refused_with_torchs_phrase(mode):
    model = _Regularized().eval() if mode == "eval" else _Regularized()
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    m = graphcap.export(model, (x,)).module()
    with pytest.raises(NotImplementedError, match=r"Calling train\(\) is not supported yet") as info:
        m.train()
    assert "graphcap.export(model, args)" in str(info.value)
    with pytest.raises(NotImplementedError, match=r"Calling eval\(\) is not supported yet"):
        m.eval()
    with pytest.raises(NotImplementedError, match=r"Calling eval\(\)"):
        m.train(False)
    # torch.export's module() refuses the same calls
    theirs = torch.export.export(model, (x,)).module()
    for call in (theirs.train, theirs.eval):
        with pytest.raises(NotImplementedError):
            call()


def test_refusal_holds_for_copies_and_parents_and_can_be_overridden():
    model = _Regularized().eval()
    x = torch.randn(8, 4)
    m = graphcap.export(model, (x,)).module()
    with pytest.raises(NotImplementedError):
        copy.deepcopy(m).eval()
    parent = nn.Sequential(m)
    with pytest.raises(NotImplementedError):
        parent.eval()  # nn.Module.train reaches every child
    # an instance's own methods win, as torchao's allow_exported_model_train_eval sets them
    calls = []
    m.eval = types.MethodType(lambda self: calls.append("eval") or self, m)
    assert m.eval() is m and calls == ["eval"]
    assert torch.allclose(m(x), model(x))
