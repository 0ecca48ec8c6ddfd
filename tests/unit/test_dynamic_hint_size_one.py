"""Dim.AUTO / Dim.DYNAMIC dims whose range user code cut by sizes 0/1 only (``if b > 1``,
``if b != pos.shape[0]: expand``): the program keeps those sizes when it matches eager there
(torch.export's program accepts them too), and refuses them where it would differ (where
torch.export's program gives other numbers than eager)."""
from __future__ import annotations

import pytest
import torch
from size_one_models import CountsBigBatches, DiffersAtOne, FlattenUnlessOne
from torch.export import Dim

import graphcap


class ExpandUnlessSame(torch.nn.Module):
    def forward(self, x, pos):
        if x.shape[0] != pos.shape[0]:
            pos = pos.expand(x.shape[0], -1)
        return x + pos


HINTS = {"auto": Dim.AUTO, "dynamic": Dim.DYNAMIC, "dynamic 1..8": Dim.DYNAMIC(min=1, max=8)}


@pytest.mark.parametrize("hint", sorted(HINTS))
def test_size_one_kept_where_the_program_matches_eager(hint):
    m = FlattenUnlessOne()
    ep = graphcap.export(m, (torch.randn(3, 2, 2),), dynamic_shapes=({0: HINTS[hint]},))
    for n in (1, 3, 8):
        x = torch.randn(n, 2, 2)
        torch.testing.assert_close(ep.module()(x), m(x))


@pytest.mark.parametrize("hint", sorted(HINTS))
def test_expand_of_a_size_one_dim_kept_at_one(hint):
    m = ExpandUnlessSame()
    ep = graphcap.export(m, (torch.randn(3, 4), torch.randn(1, 4)), dynamic_shapes=({0: HINTS[hint]}, None))
    for n in (1, 2, 8):
        args = (torch.randn(n, 4), torch.randn(1, 4))
        torch.testing.assert_close(ep.module()(*args), m(*args))


@pytest.mark.parametrize("model", [DiffersAtOne, CountsBigBatches])
@pytest.mark.parametrize("hint", sorted(HINTS))
def test_size_one_refused_where_the_program_differs(model, hint):
    m = model()
    ep = graphcap.export(m, (torch.randn(3, 2),), dynamic_shapes=({0: HINTS[hint]},))
    assert all(int(v.lower) >= 2 for v in ep.range_constraints.values())
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(1, 2))
    x = torch.randn(5, 2)
    torch.testing.assert_close(ep.module()(x), model()(x))


def test_size_zero_checked_apart_from_one():
    """At 0 eager's general branch raises (view of 0 elements with -1): 0 is cut, 1 is kept."""
    m = FlattenUnlessOne()
    ep = graphcap.export(m, (torch.randn(3, 2, 2),), dynamic_shapes=({0: Dim.DYNAMIC(min=0, max=8)},))
    assert sorted((int(v.lower), int(v.upper)) for v in ep.range_constraints.values()) == [(1, 8)]
    torch.testing.assert_close(ep.module()(torch.randn(1, 2, 2)).shape, torch.Size([1]))


def test_gpt2_with_automatic_batch_runs_at_batch_one():
    """transformers' masking code expands position ids unless the batch is 1 (``Ne(batch, 1)``):
    with Dim.AUTO the program used to refuse batch 1, the batch of most generation calls."""
    from transformers_factories import gpt2

    model, _ = gpt2()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).logits

    m = Logits()
    ep = graphcap.export(m, (torch.randint(0, 64, (2, 8)),), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},))
    for b, s in ((1, 2), (1, 8), (3, 5)):
        ids = torch.randint(0, 64, (b, s))
        torch.testing.assert_close(ep.module()(ids), m(ids))
