"""torchvision and timm architectures: graphcap against torch.export and eager.

Each probe builds one architecture with random weights (``weights=None`` / ``pretrained=False``,
nothing downloaded) in eval mode, with a small image where the model allows, and exports it with a
dynamic batch (``Dim("batch", min=1, max=8)``) and, where the architecture allows, a dynamic height
and width (``m * Dim(name, min=, max=)``).  Each program's ``module()`` runs at the example and at
other sizes in range, refuses a batch past the max, then the same after ``run_decompositions()``
and after a save/load round trip (each library's own); every output is compared with eager's.
One line per probe and library:

    name | graphcap: <verdict> | torch: <verdict>

Run (one probe per process keeps memory modest):
    PYTHONPATH=src python bench/probes/vision_models_audit.py NAME [--strict] [--no-torch] [--no-gc] [-v]
    PYTHONPATH=src python bench/probes/vision_models_audit.py --list
"""
from __future__ import annotations

import dataclasses
import sys
import time
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import error_line, roundtrip, same
from torch import nn

import graphcap


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], nn.Module]
    hw: tuple[int, int]                 # the example's height, width
    hw_dyn: tuple[int, int, int] | None = None   # (multiple, min, max) of a dynamic h and w
    batch: tuple[int, int] = (1, 8)
    example_batch: int = 2
    frames: int | None = None           # video: (b, 3, t, h, w)
    two_images: bool = False            # optical flow: (img1, img2)
    tol: float = 1e-4
    batch_sizes: tuple[int, ...] = (1, 3)


def _tv(name: str, sub: str = "", **kw: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision
        ns = getattr(torchvision.models, sub) if sub else torchvision.models
        torch.manual_seed(0)
        return getattr(ns, name)(weights=None, **kw).eval()
    return make


def _timm(name: str, **kw: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import timm
        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False, **kw).eval()
    return make


class _Flow(nn.Module):
    """RAFT with two refinement steps (``num_flow_updates`` is a forward argument)."""

    def __init__(self, raft: nn.Module) -> None:
        super().__init__()
        self.raft = raft

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> Any:
        return self.raft(a, b, num_flow_updates=2)


PROBES = [
    # torchvision classification
    Probe("tv_swin_t", _tv("swin_t"), (64, 64), (32, 2, 4)),
    Probe("tv_maxvit_t", _tv("maxvit_t"), (224, 224)),
    Probe("tv_regnet_y_400mf", _tv("regnet_y_400mf"), (64, 64), (32, 1, 4)),
    Probe("tv_shufflenet_v2_x0_5", _tv("shufflenet_v2_x0_5"), (64, 64), (32, 1, 4)),
    Probe("tv_mnasnet0_5", _tv("mnasnet0_5"), (64, 64), (32, 1, 4)),
    Probe("tv_googlenet", _tv("googlenet", aux_logits=False, init_weights=True), (64, 64), (32, 2, 4)),
    Probe("tv_inception_v3", _tv("inception_v3", aux_logits=True, init_weights=False), (96, 96), (32, 3, 5)),
    Probe("tv_mobilenet_v2", _tv("mobilenet_v2"), (64, 64), (32, 1, 4)),
    Probe("tv_vgg11_bn", _tv("vgg11_bn"), (64, 64), (32, 1, 4)),
    Probe("tv_lraspp", _tv("lraspp_mobilenet_v3_large", "segmentation", weights_backbone=None), (64, 64),
          (32, 2, 4)),
    Probe("tv_fcn_resnet50", _tv("fcn_resnet50", "segmentation", weights_backbone=None, aux_loss=True),
          (64, 64), (32, 2, 3)),
    # detection (data-dependent shapes)
    Probe("tv_fasterrcnn_mbv3_320", _tv("fasterrcnn_mobilenet_v3_large_320_fpn", "detection",
                                         weights_backbone=None), (128, 128), batch=(1, 4)),
    Probe("tv_ssdlite320", _tv("ssdlite320_mobilenet_v3_large", "detection", weights_backbone=None),
          (128, 128), batch=(1, 4)),
    Probe("tv_retinanet_r50", _tv("retinanet_resnet50_fpn", "detection", weights_backbone=None,
                                   min_size=128, max_size=128), (128, 128), batch=(1, 4)),
    Probe("tv_maskrcnn_r50", _tv("maskrcnn_resnet50_fpn", "detection", weights_backbone=None,
                                  min_size=128, max_size=128), (128, 128), batch=(1, 4)),
    Probe("tv_raft_small", lambda: _Flow(_tv("raft_small", "optical_flow")()), (128, 128), None,
          two_images=True, batch=(1, 4), batch_sizes=(1,)),
    Probe("tv_s3d", _tv("s3d", "video"), (64, 64), frames=8, batch_sizes=(1,)),
    Probe("tv_mvit_v2_s", _tv("mvit_v2_s", "video"), (224, 224), frames=16, batch=(1, 2), example_batch=2,
          batch_sizes=(1,)),
    # timm
    Probe("timm_resnet18d", _timm("resnet18d"), (64, 64), (32, 1, 4)),
    Probe("timm_regnetx_002", _timm("regnetx_002"), (64, 64), (32, 1, 4)),
    Probe("timm_efficientnet_b0", _timm("efficientnet_b0"), (64, 64), (32, 1, 4)),
    Probe("timm_tinynet_e", _timm("tinynet_e"), (64, 64), (32, 1, 4)),
    Probe("timm_convnextv2_atto", _timm("convnextv2_atto"), (64, 64), (32, 2, 4)),
    Probe("timm_coat_lite_tiny", _timm("coat_lite_tiny", img_size=64), (64, 64)),
    Probe("timm_levit_128s", _timm("levit_128s", img_size=64), (64, 64)),
    Probe("timm_poolformer_s12", _timm("poolformer_s12"), (64, 64), (32, 1, 4)),
    Probe("timm_mobilevit_xxs", _timm("mobilevit_xxs"), (64, 64), (32, 2, 4)),
    Probe("timm_ghostnet_100", _timm("ghostnet_100"), (64, 64), (32, 1, 4)),
    Probe("timm_edgenext_xx_small", _timm("edgenext_xx_small"), (64, 64), (32, 2, 4)),
    Probe("timm_swin_tiny", _timm("swin_tiny_patch4_window7_224", img_size=112, window_size=7,
                                   dynamic_img_size=False), (112, 112)),
    Probe("timm_swin_dyn", _timm("swin_tiny_patch4_window7_224", img_size=112, window_size=7,
                                  strict_img_size=False, dynamic_img_size=True), (112, 112), (28, 3, 5)),
]


def _inputs(p: Probe, b: int, hw: tuple[int, int], seed: int = 1) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    shape = (b, 3, p.frames, *hw) if p.frames else (b, 3, *hw)
    x = torch.randn(shape, generator=g)
    if p.two_images:
        return (x, torch.randn(shape, generator=g))
    return (x,)


def _spec(p: Probe, Dim: Any) -> Any:
    batch = Dim("batch", min=p.batch[0], max=p.batch[1])
    d: dict[int, Any] = {0: batch}
    if p.hw_dyn:
        m, lo, hi = p.hw_dyn
        d[3 if p.frames else 2] = m * Dim("h", min=lo, max=hi)
        d[4 if p.frames else 3] = m * Dim("w", min=lo, max=hi)
    if p.two_images:
        return (d, dict(d))
    return (d,)


def _sizes(p: Probe) -> list[tuple[int, tuple[int, int]]]:
    out = [(p.example_batch, p.hw)]
    for b in p.batch_sizes:
        out.append((b, p.hw))
    if p.hw_dyn:
        m, lo, hi = p.hw_dyn
        out.append((1, (m * lo, m * hi)))
        out.append((p.batch[1] if p.batch[1] <= 4 else 3, (m * hi, m * lo)))
    return out


def _check(p: Probe, eager: nn.Module, program: Any, stage: str, verbose: bool) -> list[str]:
    bad = []
    mod = program.module()
    for b, hw in _sizes(p):
        args = _inputs(p, b, hw)
        with torch.no_grad():
            want = eager(*args)
            try:
                got = mod(*args)
            except Exception as e:  # a probe reports every failure
                bad.append(f"{stage}@b{b},{hw[0]}x{hw[1]}: {error_line(e, 220)}")
                if verbose:
                    traceback.print_exc()
                continue
        if not same(got, want, p.tol):
            bad.append(f"{stage}@b{b},{hw[0]}x{hw[1]}: WRONG")
    # past the batch max: refused before computing
    args = _inputs(p, p.batch[1] + 1, p.hw)
    try:
        with torch.no_grad():
            mod(*args)
        bad.append(f"{stage}: batch {p.batch[1] + 1} ran (not refused)")
    except Exception as e:
        if verbose or stage == "ep":
            print(f"   [{stage}] out of range: {error_line(e, 220)}", file=sys.stderr)
    return bad


def run_side(gc: bool, p: Probe, strict: bool, verbose: bool) -> str:
    Dim = graphcap.Dim if gc else te.Dim
    eager = p.make()
    args = _inputs(p, p.example_batch, p.hw)
    t = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = (graphcap.export if gc else te.export)(eager, args, dynamic_shapes=_spec(p, Dim), strict=strict)
    except Exception as e:
        if verbose:
            traceback.print_exc()
        return f"export refused ({time.time() - t:.0f}s): {error_line(e, 220)}"
    took = time.time() - t
    bad = []
    for stage, get in (("ep", lambda: ep), ("decomp", lambda: ep.run_decompositions()),
                       ("saved", lambda: roundtrip(ep))):
        try:
            prog = get()
        except Exception as e:
            if verbose:
                traceback.print_exc()
            bad.append(f"{stage}: {error_line(e, 220)}")
            continue
        bad += _check(p, eager, prog, stage, verbose)
    return f"({took:.0f}s) " + ("=" if not bad else "; ".join(bad))


def main() -> None:
    argv = sys.argv[1:]
    if "--list" in argv:
        print(" ".join(p.name for p in PROBES))
        return
    strict = "--strict" in argv
    verbose = "-v" in argv
    names = [a for a in argv if not a.startswith("-")]
    torch.set_num_threads(1)
    for p in PROBES:
        if names and not any(n == p.name for n in names):
            continue
        g = run_side(True, p, strict, verbose) if "--no-gc" not in argv else "-"
        t = run_side(False, p, strict, verbose) if "--no-torch" not in argv else "-"
        print(f"{p.name}{' strict' if strict else ''} | graphcap: {g} | torch: {t}", flush=True)


if __name__ == "__main__":
    main()
