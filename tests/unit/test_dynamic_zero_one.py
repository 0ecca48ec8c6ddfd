"""Sizes 0 and 1 stay in a declared range even when an operator's fake kernel compares a size
with 1 (a conv picking strides/memory format: Ne(s, 1)); only the user's own checks count."""
import torch

import graphcap
from graphcap import Dim


class PatchEmbed(torch.nn.Module):
    """torchvision's ViT input stem: a strided conv, then flatten and a class token per sample."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, 8))

    def forward(self, x):
        n = x.shape[0]
        y = self.proj(x).reshape(n, 8, -1).permute(0, 2, 1)
        return torch.cat([self.cls.expand(n, -1, -1), y], dim=1)


def _accepts_batch_of_one(model, image):
    ep = graphcap.export(model, (torch.randn(3, *image),), dynamic_shapes=({0: Dim("batch", min=1, max=8)},))
    asserts = [n for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert not asserts, [n.args for n in asserts]
    for batch in (1, 2, 8):
        x = torch.randn(batch, *image)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_batch_of_one_is_accepted_when_the_spec_allows_it():
    _accepts_batch_of_one(PatchEmbed().eval(), (3, 16, 16))


def test_vision_transformer_batch_of_one():
    """torchvision's ViT: an operator guard Ne(batch, 1) once became a runtime assert here."""
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2,
                              hidden_dim=16, mlp_dim=32).eval()
    _accepts_batch_of_one(model, (3, 32, 32))


def test_the_users_own_check_against_one_is_still_reported():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] != 1:
                return x * 2
            return x

    try:
        graphcap.export(Branchy(), (torch.randn(3, 4),), dynamic_shapes=({0: Dim("batch", min=1, max=8)},))
    except graphcap.ConstraintViolationError as e:
        assert "batch" in str(e)
    else:
        raise AssertionError("a user branch on batch != 1 must be reported against Dim(min=1)")
