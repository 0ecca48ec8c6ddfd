"""The heavy vision models of the zoo, shrunk: same library classes and forward code, tiny widths.

``test_zoo_static`` runs the full-size DenseNet-121, EfficientNet-B0, ConvNeXt-T,
R3D-18, DeepLabV3, DeiT and EfficientFormer only with ``-m slow`` (each takes
longer than the whole budget of the default run allows). Their fast equivalent
is here: the same torchvision/timm model classes built with a few narrow
layers, so every construct of their forward (dense concatenation, squeeze-
excitation with stochastic depth, permuted LayerNorm with layer scale, 3-D
convolutions, atrous pyramid pooling with a dict output and bilinear
upsampling, distillation tokens, pooling token mixers with attention biases)
is exported and checked with the same assertions as the zoo test.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from conftest import assert_same_outputs, quiet_warnings, run_eager_and_exported


class _TinyBackbone(torch.nn.Module):
    """What DeepLabV3 expects of a backbone: a dict with an ``"out"`` feature map."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4, padding=1), torch.nn.BatchNorm2d(8),
                                            torch.nn.Hardswish())

    def forward(self, x):
        return {"out": self.features(x)}


def _densenet():
    from torchvision.models import DenseNet
    return DenseNet(growth_rate=4, block_config=(2, 2), num_init_features=8, bn_size=2, num_classes=5), (3, 32, 32)


def _efficientnet():
    from torchvision.models import EfficientNet
    from torchvision.models.efficientnet import MBConvConfig
    settings = [MBConvConfig(1, 3, 1, 8, 8, 1), MBConvConfig(4, 5, 2, 8, 16, 1)]
    return EfficientNet(settings, dropout=0.2, stochastic_depth_prob=0.2, num_classes=5), (3, 32, 32)


def _convnext():
    from torchvision.models import ConvNeXt
    from torchvision.models.convnext import CNBlockConfig
    return ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], stochastic_depth_prob=0.1,
                    num_classes=5), (3, 32, 32)


def _r3d():
    from torchvision.models.video.resnet import BasicBlock, BasicStem, Conv3DSimple, VideoResNet
    return VideoResNet(BasicBlock, [Conv3DSimple] * 4, [1, 1, 1, 1], BasicStem, num_classes=5), (3, 4, 16, 16)


def _deeplabv3():
    from torchvision.models.segmentation.deeplabv3 import DeepLabHead, DeepLabV3
    return DeepLabV3(_TinyBackbone(), DeepLabHead(8, 3, atrous_rates=(2, 4, 6))), (3, 32, 32)


def _deit():
    from timm.models.deit import VisionTransformerDistilled
    return VisionTransformerDistilled(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2,
                                      num_classes=5), (3, 32, 32)


def _efficientformer():
    from timm.models.efficientformer import EfficientFormer
    # its attention biases are sized for a 7x7 grid: 224x224 images, narrow channels
    return EfficientFormer(depths=(1, 1, 1, 1), embed_dims=(8, 8, 16, 16), num_vit=1, num_classes=5), (3, 224, 224)


BLOCKS = {"tv_densenet121": _densenet, "tv_efficientnet_b0": _efficientnet, "tv_convnext_tiny": _convnext,
          "tv_r3d_18": _r3d, "tv_deeplabv3_mbv3_large": _deeplabv3, "timm_deit_tiny_patch16_224": _deit,
          "timm_efficientformer_l1": _efficientformer}


@pytest.mark.parametrize("zoo_name", list(BLOCKS))
def test_shrunk_zoo_model_exports_and_matches_eager(zoo_name):
    model, shape = BLOCKS[zoo_name]()
    model = model.eval()
    args = (torch.randn(2, *shape),)
    with quiet_warnings():
        ep = graphcap.export(model, args)
    ep.validate()
    expected, got = run_eager_and_exported(model, ep, args, {})
    assert_same_outputs(expected, got)
    fresh = (torch.randn(2, *shape),)  # fresh values of the same shapes
    expected, got = run_eager_and_exported(model, ep, fresh, {})
    assert_same_outputs(expected, got)
    with pytest.raises(graphcap.RuntimeInputError, match=r"Expected input at \S+\.shape\[\d\]"):
        ep.module()(torch.randn(3, *shape))  # other sizes refused before computing, naming the input
