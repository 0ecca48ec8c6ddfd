"""copy_'s self-overlap check asks size questions that are no requirement of the program.

``causal_mask[..., :n] = fill_value`` (the causal-mask update of decoder
models) ends in ``copy_`` into a slice; the fake kernel asks whether the
destination overlaps itself, which inspects its sizes (is one 1, is it
contiguous). Kept as asserts, those answers refused sizes eager accepts
(``n == 1``, the decode step; ``n`` equal to the mask length). The program now
accepts every size eager accepts, except a mask of length 0 filled with a
length-1 value, and refuses the others before computing.
"""
import pytest
import torch

import graphcap
from graphcap.errors import InputGuardError


class MaskUpdate(torch.nn.Module):
    def forward(self, causal_mask, fill_value):
        causal_mask = causal_mask.clone()
        causal_mask[:, :, :, :fill_value.shape[-1]] = fill_value
        return causal_mask


def _export():
    dims = {"causal_mask": {3: graphcap.Dim("M")}, "fill_value": {3: graphcap.Dim("N")}}
    return graphcap.export(MaskUpdate(), (torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 3)),
                           dynamic_shapes=dims)


@pytest.mark.parametrize("m, n", [(4, 3), (4, 4), (4, 1), (5, 2), (3, 1), (4, 0), (0, 0), (2, 2), (1, 1)])
def test_every_size_eager_accepts_gives_eager_result(m, n):
    ep = _export()
    args = (torch.randn(2, 2, 3, m), torch.randn(2, 2, 3, n))
    expected = MaskUpdate()(*args)
    torch.testing.assert_close(ep.module()(*args), expected)
    torch.testing.assert_close(ep.run_decompositions().module()(*args), expected)


@pytest.mark.parametrize("m, n", [(3, 5), (1, 3), (0, 3)])
def test_sizes_eager_rejects_are_refused_before_computing(m, n):
    ep = _export()
    args = (torch.randn(2, 2, 3, m), torch.randn(2, 2, 3, n))
    with pytest.raises(RuntimeError):
        MaskUpdate()(*args)
    with pytest.raises(InputGuardError):
        ep.module()(*args)


def test_no_assert_mentions_the_overlap_checks_sizes():
    ep = _export()
    messages = [n.args[1] for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert messages and not any(">= 2" in m or "Ne(" in m for m in messages)
