"""torch.nn layers exported with dynamic dims (docs/torch-suite.md, "nn layers with dynamic shapes audit").

An operator's own question "is this derived size 1?" (``Ne(8*s, 8)`` from MultiheadAttention's head
reshape, ``Ne((h + 1)//2, 1)`` from unfold's window count) is a layout question, as the plain
``Ne(s, 1)`` is: the program must not refuse those sizes at run time. (A decomposition whose code holds
only for some of the sizes the program accepts, bicubic's ``out_size > 1``: test_decomp_size_paths.py.)
"""
import torch
import torch.nn.functional as F

import graphcap


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, pad):
        out, weights = self.mha(x, x, x, key_padding_mask=pad)
        return out, weights


def _assert_close(got, want):
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_attention_exported_at_length_four_runs_at_length_one():
    torch.manual_seed(0)
    model = _Attention().eval()
    b, s = graphcap.Dim("b", min=1, max=6), graphcap.Dim("s", min=1, max=12)
    x, pad = torch.randn(3, 4, 8), torch.zeros(3, 4, dtype=torch.bool)
    ep = graphcap.export(model, (x, pad), dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}))
    for n_b, n_s in ((2, 1), (1, 1), (6, 12), (5, 3)):
        x, pad = torch.randn(n_b, n_s, 8), torch.zeros(n_b, n_s, dtype=torch.bool)
        for program in (ep, ep.run_decompositions()):
            _assert_close(program.module()(x, pad), model(x, pad))


class _Windows(torch.nn.Module):
    def forward(self, x):
        return F.unfold(x, 3, padding=1, stride=2)


def test_unfold_with_a_stride_runs_where_it_gives_one_window():
    h, w = graphcap.Dim("h", min=1, max=9), graphcap.Dim("w", min=1, max=10)
    ep = graphcap.export(_Windows(), (torch.randn(2, 3, 6, 7),), dynamic_shapes=({2: h, 3: w},))
    for size in ((1, 10), (2, 2), (9, 1), (2, 5)):  # (h + 1)//2 == 1 at h = 1 and 2
        x = torch.randn(2, 3, *size)
        torch.testing.assert_close(ep.module()(x), F.unfold(x, 3, padding=1, stride=2))
