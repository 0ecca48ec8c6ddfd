"""Vision architectures exported with dynamic dims (docs/torch-suite.md, "torchvision and timm
architectures audit").

A spec refused because the program specializes the image size (swin's ``if window_size >= pad_H``)
names in its headline the dims the problems are about, not every dim the spec declares: the
dynamic batch beside them is fine and stays out of ``Constraints violated (...)``.
"""
import pytest
import torch

import graphcap


class _AreaBranch(torch.nn.Module):
    """A branch on the image area: a relation of h and w no Dim can state."""

    def forward(self, x):
        if x.shape[2] * x.shape[3] <= 4096:
            return x * 2
        return x + 1


class _WindowPad(torch.nn.Module):
    """A windowed block's padding test, as swin's ``shifted_window_attention`` has it: one dim's
    guard that is neither a range nor one size."""

    def forward(self, x):
        pad_h = x.shape[2] + (7 - x.shape[2] % 7) % 7
        if 7 >= pad_h:
            return x.mean((2, 3))
        return x.amax((2, 3))


def _spec(*, h_max=4):
    b = graphcap.Dim("batch", min=1, max=8)
    h, w = graphcap.Dim("h", min=1, max=h_max), graphcap.Dim("w", min=1, max=4)
    return {0: b, 2: 4 * h, 3: 4 * w}


def _refusal(model, x, spec):
    with pytest.raises(graphcap.errors.ConstraintViolationError) as info:
        graphcap.export(model, (x,), dynamic_shapes=(spec,))
    return str(info.value)


def test_headline_names_the_dims_of_a_relation_without_a_fix():
    msg = _refusal(_AreaBranch(), torch.randn(2, 3, 64, 64),
                   {0: graphcap.Dim("batch", min=1, max=8),
                    2: 32 * graphcap.Dim("h", min=2, max=4), 3: 32 * graphcap.Dim("w", min=2, max=4)})
    assert msg.startswith("Constraints violated (h, w)!"), msg
    assert "batch" not in msg


def test_headline_names_one_dim_a_window_pad_fixes():
    msg = _refusal(_WindowPad(), torch.randn(2, 3, 4, 8), _spec())
    assert msg.startswith("Constraints violated (h)!"), msg
    assert "4*h + " in msg and "if 7 >= pad_h" in msg


def test_headline_names_the_dim_to_change_when_the_fix_equates_two():
    """``K2 = K1`` fixes the problem by changing K2's spec alone: K1 stays out of the headline."""
    class MatMul(torch.nn.Module):
        def forward(self, x, y):
            return torch.matmul(x, y)

    batch, m, k1, k2, n = graphcap.dims("batch", "M", "K1", "K2", "N")
    with pytest.raises(graphcap.errors.ConstraintViolationError) as info:
        graphcap.export(MatMul(), (torch.randn(10, 2, 3), torch.randn(10, 3, 4)),
                        dynamic_shapes={"x": (batch, m, k1), "y": (batch, k2, n)})
    msg = str(info.value)
    assert msg.startswith("Constraints violated (K2)!"), msg
    assert "K2 = K1" in msg


def test_batch_only_spec_of_the_same_models_exports_and_runs():
    for model in (_AreaBranch(), _WindowPad()):
        x = torch.randn(2, 3, 4, 4)
        ep = graphcap.export(model, (x,), dynamic_shapes=({0: graphcap.Dim("batch", min=1, max=8)},))
        for n in (1, 8):
            y = torch.randn(n, 3, 4, 4)
            torch.testing.assert_close(ep.module()(y), model(y))
        with pytest.raises(graphcap.errors.InputGuardError, match="<= 8"):
            ep.module()(torch.randn(9, 3, 4, 4))


class _RelPosAdd(torch.nn.Module):
    """MViT's ``_add_rel_pos``: a bias added in place into a slice of the attention scores."""

    def forward(self, q):
        b, h, n, d = q.shape
        attn = q @ q.transpose(2, 3)
        rel = q[:, :, 1:].reshape(b, h, n - 1, d).sum(-1, keepdim=True).expand(b, h, n - 1, n - 1)
        attn[:, :, 1:, 1:] += rel
        return attn


def test_in_place_slice_add_exports_with_batch_up_to_four():
    model, q = _RelPosAdd(), torch.randn(2, 2, 5, 4)
    ep = graphcap.export(model, (q,), dynamic_shapes=({0: graphcap.Dim("batch", min=1, max=4)},))
    for n in (1, 4):
        y = torch.randn(n, 2, 5, 4)
        torch.testing.assert_close(ep.module()(y), model(y))


def test_in_place_slice_add_exports_with_batch_up_to_two():
    """copy_'s fake kernel asks whether the slice overlaps itself, which reads ``batch >= 2``; as a
    guard that narrowed [1, 2] to one value and pinned batch at 2. The question is asked again by
    the real copy_ when the program runs, so it records no guard."""
    model, q = _RelPosAdd(), torch.randn(2, 2, 5, 4)
    ep = graphcap.export(model, (q,), dynamic_shapes=({0: graphcap.Dim("batch", min=1, max=2)},))
    decomposed = ep.run_decompositions()
    for n in (1, 2):
        y = torch.randn(n, 2, 5, 4)
        torch.testing.assert_close(ep.module()(y), model(y))
        torch.testing.assert_close(decomposed.module()(y), model(y))
    with pytest.raises(graphcap.errors.InputGuardError, match="<= 2"):
        ep.module()(torch.randn(3, 2, 5, 4))
