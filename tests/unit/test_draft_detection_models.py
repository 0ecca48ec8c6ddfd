"""draft_export on torchvision's detection models (eval mode, random weights, small images).

``export`` stops on their post-processing (boxes kept by score, per-class
non-maximum suppression: sizes read from data, then branched on);
``draft_export`` exports each: the program matches eager on the example and on
a second image, or refuses the second image with the runtime assert naming the
line the example's path was assumed at, and the report points at torchvision's
lines. Nothing downloads (``weights=None, weights_backbone=None``).
"""
from __future__ import annotations

import pytest
import torch
import torchvision  # a test dependency: pyproject's test extra

import graphcap

# (builder, constructor options): images are resized to 224 (ssdlite: its fixed 320) to stay small
MODELS = {
    "retinanet_resnet50_fpn": {"min_size": 224, "max_size": 224},
    "fcos_resnet50_fpn": {"min_size": 224, "max_size": 224},
    "ssdlite320_mobilenet_v3_large": {},
}


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    build = getattr(torchvision.models.detection, name)
    return build(weights=None, weights_backbone=None, **MODELS[name]).eval()


def _same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            torch.testing.assert_close(g[k], w[k], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_detection_model_draft_exports_and_matches_eager(name):
    model = _model(name)
    image = [torch.rand(3, 224, 224, generator=torch.Generator().manual_seed(1))]
    ep = graphcap.draft_export(model, (image,))
    with torch.no_grad():
        _same(ep.module()(image), model(image))
    problems = ep.report.problems
    assert problems and all(p.kind == "data_dependent" for p in problems)
    assert any("torchvision" in p.where.filename for p in problems if p.where is not None)
    assert all("torch._check(" in p.fix for p in problems)

    second = [torch.rand(3, 224, 224, generator=torch.Generator().manual_seed(2))]
    with torch.no_grad():
        want = model(second)
    try:
        got = ep.module()(second)
    except RuntimeError as e:  # the second image's data takes another path than the example's
        assert "draft_export assumed" in str(e) and "torchvision" in str(e)
    else:
        _same(got, want)
