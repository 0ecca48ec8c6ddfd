"""save refuses, saying why and what to do, a program that constructs a tensor subclass in its graph.

``TwoTensor(x, y)`` called inside ``forward`` is captured as a ``flat_apply`` call whose
attributes hold the subclass's class and a pytree spec (Python objects). The file stores
subclass values as weights and constants, not a call of their constructor, so save refuses
it with a SerializationError naming the node and the user's line, and points at the
inference IR (``run_decompositions``), where the subclass is flattened into its inner
tensors and which saves and loads with eager's results.
"""
from __future__ import annotations

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import graphcap
from graphcap.errors import SerializationError


class BuildsNested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.buffer = torch.nn.Buffer(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))

    def forward(self, x):
        wrapped = TwoTensor(x, TwoTensor(x * 2, x)) + self.buffer
        return (x + wrapped).b.a


class BuildsFromBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Buffer(TwoTensor(torch.randn(3), torch.randn(3)))

    def forward(self, x):
        pair = TwoTensor(x.sin(), x) * self.w
        return pair.a - pair.b


@pytest.mark.parametrize("model, shape", [(BuildsNested, (4, 4)), (BuildsFromBuffer, (3,))])
def test_save_refuses_a_constructor_call_with_the_users_line_and_a_fix(tmp_path, model, shape):
    ep = graphcap.export(model(), (torch.randn(*shape),))
    with pytest.raises(SerializationError) as info:
        graphcap.save(ep, tmp_path / "p.pt2")
    text = str(info.value)
    assert "TwoTensor" in text
    assert "flat_apply" in text
    assert "TwoTensor(" in text  # the user's line that built it
    assert "run_decompositions()" in text
    assert "graphcap bug" not in text
    assert not (tmp_path / "p.pt2").exists()


@pytest.mark.parametrize("model, shape", [(BuildsNested, (4, 4)), (BuildsFromBuffer, (3,))])
def test_the_inference_ir_of_the_same_program_saves_and_loads(tmp_path, model, shape):
    mod = model()
    ep = graphcap.export(mod, (torch.randn(*shape),))
    graphcap.save(ep.run_decompositions(), tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    for _ in range(2):
        x = torch.randn(*shape)
        torch.testing.assert_close(loaded.module()(x), mod(x))
