"""torch.nn layers with dynamic dims: graphcap against torch.export and eager.

Each probe is a small model built from one common layer or functional, inputs made from a dict of
sizes, and named dims (``Dim(name, min=, max=)``) for a dynamic batch and, where it means something,
a dynamic sequence or spatial size.  Each probe is exported twice per library: once with every
dynamic size 1 in the example and once with sizes above 1.  Each program's ``module()`` runs at the
example and at other sizes in range (each dim's min, 1 where allowed, 2, its max, mixed), then the
same after ``run_decompositions()``, after a save/load round trip (each library's own functions) and
after decomposing then saving; every output is compared with eager's.  One line per probe, example
and mode:

    name @ex | graphcap: <verdict> | torch: <verdict>

"=" means every stage matched eager at every size.  Run:
    PYTHONPATH=src python bench/probes/nn_layers_audit.py [name-substring ...] [-v] [--strict] [--no-torch]
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import sys
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
import torch.nn.functional as F
from _compare import error_line, roundtrip, same
from torch import nn

import graphcap

Sizes = dict[str, int]


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], nn.Module]
    inputs: Callable[[Sizes], tuple[Any, ...]]
    dims: dict[str, tuple[int, int]]             # name -> (min, max)
    spec: Callable[[dict[str, Any]], Any]         # dims -> dynamic_shapes
    big: Sizes | None = None                      # the example above 1 (default: 3 each, capped)
    small: Sizes | None = None                    # the example at the mins (default: 1 each)
    tol: float = 1e-5


def _sized(p: Probe, which: str) -> Sizes:
    if which == "1":
        return p.small or {k: max(1, lo) for k, (lo, hi) in p.dims.items()}
    return p.big or {k: min(hi, max(lo, 3) + 1) for k, (lo, hi) in p.dims.items()}


def _other_sizes(p: Probe) -> list[Sizes]:
    per = {}
    for k, (lo, hi) in p.dims.items():
        per[k] = sorted({lo, max(lo, 1), max(lo, 2), hi, (lo + hi) // 2})
    names = list(per)
    out: list[Sizes] = []
    # every dim at each of its values with the others at their max, then all-min, all-max, mixed
    for k in names:
        for v in per[k]:
            out.append({n: (v if n == k else p.dims[n][1]) for n in names})
    out.append({n: per[n][0] for n in names})
    for combo in itertools.islice(itertools.product(*(per[n][::2] for n in names)), 6):
        out.append(dict(zip(names, combo)))
    seen, uniq = set(), []
    for s in out:
        key = tuple(sorted(s.items()))
        if key not in seen:
            seen.add(key)
            uniq.append(s)
    return uniq


def _inputs(p: Probe, s: Sizes) -> tuple[Any, ...]:
    torch.manual_seed(sum(v * 31 ** i for i, v in enumerate(s.values())))
    return p.inputs(s)


def _check(p: Probe, eager: nn.Module, program: Any, stage: str, sizes: list[Sizes]) -> list[str]:
    try:
        mod = program.module()
    except Exception as e:
        return [f"{stage}: module() fails: {error_line(e)}"]
    notes = []
    for s in sizes:
        args = _inputs(p, s)
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        try:
            with torch.no_grad():
                got = mod(*copy.deepcopy(args))
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage}: run fails at {s}: {error_line(e)}")
            continue
        if not same(want, got, p.tol):
            notes.append(f"{stage}: WRONG at {s}")
    return notes


def run_side(gc: bool, p: Probe, which: str, strict: bool) -> str:
    Dim = graphcap.Dim if gc else te.Dim
    dims = {k: Dim(k, min=lo, max=hi) for k, (lo, hi) in p.dims.items()}
    torch.manual_seed(0)
    model = p.make().eval()
    eager = copy.deepcopy(model)
    ex = _sized(p, which)
    sizes = [ex] + _other_sizes(p)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = (graphcap.export if gc else te.export)(
                model, _inputs(p, ex), dynamic_shapes=p.spec(dims), strict=strict)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return f"export fails: {error_line(e)}"
    rc = sorted((str(r.lower), str(r.upper)) for r in ep.range_constraints.values())
    want_rc = sorted((str(lo), str(hi)) for lo, hi in p.dims.values())
    notes = [] if rc == want_rc else [f"ranges {rc}"]
    notes += _check(p, eager, ep, "ep", sizes)
    try:
        dec = ep.run_decompositions()
        notes += _check(p, eager, dec, "decomp", sizes)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        notes.append(f"decomp fails: {error_line(e)}")
        dec = None
    for stage, prog in (("saved", ep), ("decomp+saved", dec)):
        if prog is None:
            continue
        try:
            loaded = roundtrip(prog)
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage}: save/load fails: {error_line(e)}")
            continue
        notes += _check(p, eager, loaded, stage, sizes)
    return "=" if not notes else "; ".join(dict.fromkeys(notes))


# ---------------------------------------------------------------------------- models


class Fn(nn.Module):
    """A functional as a module; ``layers`` holds any submodules it uses."""

    def __init__(self, f: Callable[..., Any], **layers: nn.Module) -> None:
        super().__init__()
        self.f = f
        for k, v in layers.items():
            setattr(self, k, v)

    def forward(self, x: Any, y: Any = None, z: Any = None, w: Any = None) -> Any:
        return self.f(self, *[a for a in (x, y, z, w) if a is not None])


def rnn_probe(name: str, cls: type, batch_first: bool, with_h0: bool = False, dyn_seq: bool = False,
              **kw: Any) -> Probe:
    layers = kw.pop("num_layers", 1)
    bi = kw.get("bidirectional", False)

    def make() -> nn.Module:
        return cls(5, 6, num_layers=layers, batch_first=batch_first, **kw)

    def inputs(s: Sizes) -> tuple[Any, ...]:
        n = s.get("s", 5)
        x = torch.randn(s["b"], n, 5) if batch_first else torch.randn(n, s["b"], 5)
        if not with_h0:
            return (x,)
        h = torch.randn(layers * (2 if bi else 1), s["b"], 6)
        return (x, (h, torch.randn_like(h))) if cls is nn.LSTM else (x, h)

    def spec(d: dict[str, Any]) -> Any:
        xs = {0: d["b"], 1: d.get("s")} if batch_first else {0: d.get("s"), 1: d["b"]}
        if not with_h0:
            return (xs,)
        hs = {1: d["b"]}
        return (xs, (hs, hs)) if cls is nn.LSTM else (xs, hs)

    return Probe(name, make, inputs, {"b": (1, 6), "s": (1, 12)} if dyn_seq else {"b": (1, 6)}, spec)


def _mha(kpm: bool, attn_mask: bool, need_weights: bool, batch_first: bool = True) -> Callable[..., Any]:
    def f(m: Fn, x: torch.Tensor, pad: torch.Tensor) -> Any:
        L = x.shape[1] if batch_first else x.shape[0]
        mask = None
        if attn_mask:
            mask = torch.triu(torch.full((L, L), float("-inf")), diagonal=1)
        out, w = m.mha(x, x, x, key_padding_mask=pad if kpm else None, attn_mask=mask,
                       need_weights=need_weights)
        return out if w is None else (out, w)
    return f


def _pad_mask(s: Sizes) -> torch.Tensor:
    m = torch.zeros(s["b"], s["s"], dtype=torch.bool)
    if s["s"] > 1:
        m[:, -1] = True  # last position padded; the first never is (a fully masked row gives nan)
    return m


def mha_probe(name: str, kpm: bool, attn_mask: bool, need_weights: bool, batch_first: bool = True) -> Probe:
    def make() -> nn.Module:
        return Fn(_mha(kpm, attn_mask, need_weights, batch_first),
                  mha=nn.MultiheadAttention(8, 2, batch_first=batch_first))

    def inputs(s: Sizes) -> tuple[Any, ...]:
        x = torch.randn(s["b"], s["s"], 8) if batch_first else torch.randn(s["s"], s["b"], 8)
        return (x, _pad_mask(s))

    def spec(d: dict[str, Any]) -> Any:
        return ({0: d["b"], 1: d["s"]} if batch_first else {0: d["s"], 1: d["b"]}, {0: d["b"], 1: d["s"]})

    return Probe(name, make, inputs, {"b": (1, 6), "s": (1, 12)}, spec)


def _no_grad(f: Callable[..., Any]) -> Callable[..., Any]:
    def g(*a: Any) -> Any:
        with torch.no_grad():
            return f(*a)
    return g


def encoder_probe(name: str, norm_first: bool, fast: bool, mask: bool) -> Probe:
    def f(m: Fn, x: torch.Tensor, pad: torch.Tensor) -> Any:
        return m.layer(x, src_key_padding_mask=pad if mask else None)

    def make() -> nn.Module:
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
        return Fn(_no_grad(f) if fast else f, layer=layer)

    def inputs(s: Sizes) -> tuple[Any, ...]:
        return (torch.randn(s["b"], s["s"], 8), _pad_mask(s))

    return Probe(name, make, inputs, {"b": (1, 6), "s": (1, 12)},
                 lambda d: ({0: d["b"], 1: d["s"]}, {0: d["b"], 1: d["s"]}), tol=1e-4)


def encoder_stack_probe(name: str, fast: bool) -> Probe:
    def f(m: Fn, x: torch.Tensor, pad: torch.Tensor) -> Any:
        return m.enc(x, src_key_padding_mask=pad)

    def make() -> nn.Module:
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
        return Fn(_no_grad(f) if fast else f, enc=enc)

    def inputs(s: Sizes) -> tuple[Any, ...]:
        return (torch.randn(s["b"], s["s"], 8), _pad_mask(s))

    return Probe(name, make, inputs, {"b": (1, 6), "s": (1, 12)},
                 lambda d: ({0: d["b"], 1: d["s"]}, {0: d["b"], 1: d["s"]}), tol=1e-4)


def decoder_probe(name: str, norm_first: bool) -> Probe:
    def f(m: Fn, tgt: torch.Tensor, mem: torch.Tensor) -> Any:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return m.layer(tgt, mem, tgt_mask=causal, tgt_is_causal=True)

    def make() -> nn.Module:
        return Fn(f, layer=nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                      norm_first=norm_first))

    def inputs(s: Sizes) -> tuple[Any, ...]:
        return (torch.randn(s["b"], s["t"], 8), torch.randn(s["b"], s["s"], 8))

    return Probe(name, make, inputs, {"b": (1, 6), "t": (1, 10), "s": (1, 12)},
                 lambda d: ({0: d["b"], 1: d["t"]}, {0: d["b"], 1: d["s"]}), tol=1e-4)


def seq_fn(name: str, f: Callable[..., Any], feat: int = 4, dims: dict[str, tuple[int, int]] | None = None,
           tol: float = 1e-5, **layers: nn.Module) -> Probe:
    """A functional over x: (b, c, s); dims b and s."""
    d0 = dims or {"b": (1, 6), "s": (1, 12)}
    return Probe(name, lambda: Fn(f, **layers), lambda s: (torch.randn(s["b"], feat, s["s"]),), d0,
                 lambda d: ({0: d["b"], 2: d["s"]},), tol=tol)


def img_fn(name: str, f: Callable[..., Any], ch: int = 4, dims: dict[str, tuple[int, int]] | None = None,
           tol: float = 1e-5, **layers: nn.Module) -> Probe:
    """A functional over x: (b, c, h, w); dims b, h, w."""
    d0 = dims or {"b": (1, 4), "h": (1, 9), "w": (1, 10)}
    return Probe(name, lambda: Fn(f, **layers), lambda s: (torch.randn(s["b"], ch, s["h"], s["w"]),), d0,
                 lambda d: ({0: d["b"], 2: d["h"], 3: d["w"]},), tol=tol)


def _emb_inputs(s: Sizes) -> tuple[Any, ...]:
    return (torch.randint(0, 20, (s["b"], s["s"])),)


def _bag_inputs(s: Sizes) -> tuple[Any, ...]:
    idx = torch.randint(0, 20, (s["n"],))
    offsets = torch.clamp(torch.arange(s["b"]) * (s["n"] // max(s["b"], 1)), max=s["n"] - 1)
    return (idx, offsets)


class _Holder(nn.Module):
    def __init__(self, t: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("w", t)


PROBES: list[Probe] = [
    rnn_probe("lstm_bf_2layers", nn.LSTM, True, num_layers=2),
    rnn_probe("lstm_dynamic_seq", nn.LSTM, True, dyn_seq=True),
    rnn_probe("gru_dynamic_seq", nn.GRU, False, dyn_seq=True),
    rnn_probe("lstm_seqfirst_bidir", nn.LSTM, False, bidirectional=True),
    rnn_probe("lstm_bf_h0c0", nn.LSTM, True, with_h0=True),
    rnn_probe("gru_bf_h0", nn.GRU, True, with_h0=True),
    rnn_probe("gru_seqfirst_2layers_bidir", nn.GRU, False, num_layers=2, bidirectional=True),
    rnn_probe("rnn_tanh_bf", nn.RNN, True),
    rnn_probe("rnn_relu_seqfirst", nn.RNN, False, nonlinearity="relu"),
    mha_probe("mha_kpm_weights", True, False, True),
    mha_probe("mha_kpm_attnmask_noweights", True, True, False),
    mha_probe("mha_attnmask_weights_seqfirst", False, True, True, batch_first=False),
    encoder_probe("enc_post_norm_mask", False, False, True),
    encoder_probe("enc_pre_norm_nomask", True, False, False),
    encoder_probe("enc_fastpath_nograd_mask", False, True, True),
    encoder_probe("enc_fastpath_nograd_prenorm", True, True, False),
    encoder_stack_probe("encoder_stack_nested_nograd", True),
    encoder_stack_probe("encoder_stack_grad", False),
    decoder_probe("dec_post_norm_causal", False),
    decoder_probe("dec_pre_norm_causal", True),
    Probe("embedding_padidx", lambda: Fn(lambda m, i: m.e(i), e=nn.Embedding(20, 6, padding_idx=0)),
          _emb_inputs, {"b": (1, 6), "s": (1, 12)}, lambda d: ({0: d["b"], 1: d["s"]},)),
    Probe("embedding_bag_mean_offsets",
          lambda: Fn(lambda m, i, o: m.e(i, o), e=nn.EmbeddingBag(20, 6, mode="mean")),
          _bag_inputs, {"b": (1, 6), "n": (6, 24)}, lambda d: ({0: d["n"]}, {0: d["b"]}),
          small={"b": 1, "n": 6}),
    Probe("embedding_bag_sum_2d", lambda: Fn(lambda m, i: m.e(i), e=nn.EmbeddingBag(20, 6, mode="sum")),
          _emb_inputs, {"b": (1, 6), "s": (1, 12)}, lambda d: ({0: d["b"], 1: d["s"]},)),
    seq_fn("conv1d_same_dil2_groups2", lambda m, x: m.c(x),
           c=nn.Conv1d(4, 6, 3, padding="same", dilation=2, groups=2)),
    seq_fn("conv1d_valid_stride2", lambda m, x: m.c(x), dims={"b": (1, 6), "s": (3, 12)},
           c=nn.Conv1d(4, 6, 3, stride=2)),
    img_fn("conv2d_same_evenkernel", lambda m, x: m.c(x), c=nn.Conv2d(4, 6, (2, 4), padding="same")),
    img_fn("conv2d_stride2_pad1_groups4", lambda m, x: m.c(x), c=nn.Conv2d(4, 8, 3, 2, 1, groups=4)),
    Probe("conv3d_same_dil", lambda: Fn(lambda m, x: m.c(x), c=nn.Conv3d(2, 3, 3, padding="same", dilation=(1, 2, 1))),
          lambda s: (torch.randn(s["b"], 2, s["d"], s["h"], 5),), {"b": (1, 3), "d": (1, 6), "h": (1, 7)},
          lambda d: ({0: d["b"], 2: d["d"], 3: d["h"]},), tol=1e-4),
    img_fn("convtranspose2d_s2_outpad", lambda m, x: m.c(x), tol=1e-4,
           c=nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)),
    seq_fn("convtranspose1d_groups_dil", lambda m, x: m.c(x), tol=1e-4,
           c=nn.ConvTranspose1d(4, 4, 3, stride=3, dilation=2, groups=2)),
    img_fn("maxpool2d_ceil", lambda m, x: F.max_pool2d(x, 3, 2, ceil_mode=True),
           dims={"b": (1, 4), "h": (3, 11), "w": (3, 12)}),
    img_fn("maxpool2d_ceil_pad_dil", lambda m, x: F.max_pool2d(x, 3, 2, padding=1, dilation=2, ceil_mode=True),
           dims={"b": (1, 4), "h": (4, 11), "w": (4, 12)}),
    img_fn("avgpool2d_ceil_nopadcount", lambda m, x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True,
                                                                count_include_pad=False),
           dims={"b": (1, 4), "h": (2, 11), "w": (2, 12)}),
    seq_fn("maxpool1d_ceil_indices", lambda m, x: F.max_pool1d(x, 2, 2, ceil_mode=True, return_indices=True),
           dims={"b": (1, 6), "s": (2, 13)}),
    seq_fn("avgpool1d_ceil", lambda m, x: F.avg_pool1d(x, 3, 2, ceil_mode=True), dims={"b": (1, 6), "s": (3, 13)}),
    img_fn("adaptive_avg_3x5", lambda m, x: F.adaptive_avg_pool2d(x, (3, 5))),
    img_fn("adaptive_max_3x5_indices", lambda m, x: F.adaptive_max_pool2d(x, (3, 5), return_indices=True)),
    seq_fn("adaptive_avg1d_7", lambda m, x: F.adaptive_avg_pool1d(x, 7)),
    img_fn("adaptive_avg_none_4", lambda m, x: F.adaptive_avg_pool2d(x, (None, 4))),
    img_fn("interp_nearest_x2", lambda m, x: F.interpolate(x, scale_factor=2, mode="nearest")),
    img_fn("interp_nearest_x1_5", lambda m, x: F.interpolate(x, scale_factor=1.5, mode="nearest")),
    img_fn("interp_nearest_exact_size", lambda m, x: F.interpolate(x, size=(7, 5), mode="nearest-exact")),
    img_fn("interp_bilinear_x2", lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear")),
    img_fn("interp_bilinear_ac_size", lambda m, x: F.interpolate(x, size=(6, 11), mode="bilinear",
                                                               align_corners=True), tol=1e-4),
    img_fn("interp_bicubic_x0_5_ac", lambda m, x: F.interpolate(x, scale_factor=0.5, mode="bicubic",
                                                              align_corners=True),
           dims={"b": (1, 4), "h": (2, 9), "w": (2, 10)}, tol=1e-4),
    img_fn("interp_bilinear_recompute", lambda m, x: F.interpolate(x, scale_factor=1.7, mode="bilinear",
                                                                 recompute_scale_factor=True), tol=1e-4),
    img_fn("interp_to_other_size", lambda m, x: F.interpolate(x, size=(x.shape[3], x.shape[2]), mode="bilinear"),
           tol=1e-4),
    seq_fn("interp_linear_1d_x3", lambda m, x: F.interpolate(x, scale_factor=3, mode="linear")),
    img_fn("pad_reflect", lambda m, x: F.pad(x, (2, 1, 1, 2), mode="reflect"),
           dims={"b": (1, 4), "h": (3, 9), "w": (3, 10)}),
    img_fn("pad_replicate", lambda m, x: F.pad(x, (2, 1, 1, 2), mode="replicate")),
    img_fn("pad_circular", lambda m, x: F.pad(x, (2, 1, 1, 2), mode="circular"),
           dims={"b": (1, 4), "h": (2, 9), "w": (2, 10)}),
    seq_fn("pad_reflect_1d", lambda m, x: F.pad(x, (3, 3), mode="reflect"), dims={"b": (1, 6), "s": (4, 12)}),
    img_fn("pad_constant_negative", lambda m, x: F.pad(x, (-1, 2, 1, -1), value=0.5),
           dims={"b": (1, 4), "h": (2, 9), "w": (2, 10)}),
    img_fn("pixel_shuffle_unshuffle",
           lambda m, x: F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2), ch=8),
    Probe("pixel_unshuffle_dynamic", lambda: Fn(lambda m, x: F.pixel_unshuffle(x, 2)),
          lambda s: (torch.randn(s["b"], 3, 2 * s["h"], 2 * s["w"]),), {"b": (1, 4), "h": (1, 5), "w": (1, 6)},
          lambda d: ({0: d["b"], 2: 2 * d["h"], 3: 2 * d["w"]},)),
    img_fn("unfold_k3_s2", lambda m, x: F.unfold(x, 3, padding=1, stride=2)),
    img_fn("unfold_fold_roundtrip",
           lambda m, x: F.fold(F.unfold(x, 2, stride=2), (x.shape[2], x.shape[3]), 2, stride=2),
           dims={"b": (1, 4), "h": (2, 10), "w": (2, 10)}, small={"b": 1, "h": 2, "w": 2},
           ),
    img_fn("groupnorm", lambda m, x: m.n(x), tol=1e-4, n=nn.GroupNorm(2, 4)),
    seq_fn("layernorm_last", lambda m, x: m.n(x.transpose(1, 2)), tol=1e-4, n=nn.LayerNorm(4)),
    img_fn("layernorm_dynamic_normalized_shape", lambda m, x: F.layer_norm(x, x.shape[2:]), tol=1e-4,
           dims={"b": (1, 4), "h": (1, 9), "w": (2, 10)}),
    seq_fn("instancenorm1d_affine", lambda m, x: m.n(x), tol=1e-4, dims={"b": (1, 6), "s": (2, 12)},
           n=nn.InstanceNorm1d(4, affine=True)),
    img_fn("instancenorm2d_running_stats_eval", lambda m, x: m.n(x), tol=1e-4,
           dims={"b": (1, 4), "h": (1, 9), "w": (2, 10)}, n=nn.InstanceNorm2d(4, track_running_stats=True)),
    img_fn("batchnorm2d_eval", lambda m, x: m.n(x), tol=1e-4, n=nn.BatchNorm2d(4)),
    Probe("sdpa_causal", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
          lambda s: tuple(torch.randn(s["b"], 2, s["s"], 8) for _ in range(3)), {"b": (1, 6), "s": (1, 12)},
          lambda d: tuple({0: d["b"], 2: d["s"]} for _ in range(3)), tol=1e-4),
    Probe("sdpa_bool_mask_cross",
          lambda: Fn(lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),
          lambda s: (torch.randn(s["b"], 2, s["t"], 8), torch.randn(s["b"], 2, s["s"], 8),
                     torch.randn(s["b"], 2, s["s"], 8),
                     torch.cat([torch.ones(s["b"], 1, s["t"], 1, dtype=torch.bool),
                                torch.rand(s["b"], 1, s["t"], s["s"] - 1) > 0.3], -1)),
          {"b": (1, 6), "t": (1, 10), "s": (1, 12)},
          lambda d: ({0: d["b"], 2: d["t"]}, {0: d["b"], 2: d["s"]}, {0: d["b"], 2: d["s"]},
                     {0: d["b"], 2: d["t"], 3: d["s"]}), tol=1e-4),
    Probe("sdpa_float_mask_gqa",
          lambda: Fn(lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                             enable_gqa=True, scale=0.3)),
          lambda s: (torch.randn(s["b"], 4, s["s"], 8), torch.randn(s["b"], 2, s["s"], 8),
                     torch.randn(s["b"], 2, s["s"], 8), torch.randn(1, 1, s["s"], s["s"])),
          {"b": (1, 6), "s": (1, 12)},
          lambda d: ({0: d["b"], 2: d["s"]}, {0: d["b"], 2: d["s"]}, {0: d["b"], 2: d["s"]},
                     {2: d["s"], 3: d["s"]}), tol=1e-4),
    Probe("stft_hann", lambda: Fn(lambda m, x: torch.stft(x, 16, hop_length=4, window=m.w.w,
                                                        return_complex=True).abs(),
                                  w=_Holder(torch.hann_window(16))),
          lambda s: (torch.randn(s["b"], 4 * s["s"]),), {"b": (1, 4), "s": (3, 12)},
          lambda d: ({0: d["b"], 1: 4 * d["s"]},), tol=1e-4),
    seq_fn("cumsum_cumprod_dyn_dim", lambda m, x: (x.cumsum(2), x.cumprod(-1), torch.logcumsumexp(x, 2)),
           tol=1e-4),
    seq_fn("topk_dynamic_k", lambda m, x: x.topk(min(3, x.shape[2]), dim=2)),
    seq_fn("topk_fixed_k", lambda m, x: x.topk(2, dim=-1), dims={"b": (1, 6), "s": (2, 12)}),
    seq_fn("sort_argsort_argmax", lambda m, x: (x.sort(2, descending=True), x.argsort(2), x.argmax(2),
                                                 x.max(2), x.amin(2))),
    seq_fn("argmax_flat_kthvalue", lambda m, x: (x.argmax(), x.kthvalue(1, dim=2))),
    seq_fn("where_masked_fill", lambda m, x: (torch.where(x > 0, x, x.new_zeros(())),
                                              x.masked_fill(x < 0, float("-inf")).softmax(2).nan_to_num())),
    Probe("masked_fill_lengths", lambda: Fn(lambda m, x, n: x.masked_fill(
        (torch.arange(x.shape[1])[None, :] >= n[:, None])[..., None], 0.0).sum(1)),
          lambda s: (torch.randn(s["b"], s["s"], 3), torch.randint(0, s["s"] + 1, (s["b"],))),
          {"b": (1, 6), "s": (1, 12)}, lambda d: ({0: d["b"], 1: d["s"]}, {0: d["b"]})),
    Probe("einsum_bhqd_bhkd", lambda: Fn(lambda m, q, k: torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)),
          lambda s: (torch.randn(s["b"], 2, s["s"], 4), torch.randn(s["b"], 2, s["s"], 4)),
          {"b": (1, 6), "s": (1, 12)}, lambda d: ({0: d["b"], 2: d["s"]}, {0: d["b"], 2: d["s"]}), tol=1e-4),
    Probe("einsum_contract_dynamic", lambda: Fn(lambda m, a, b: torch.einsum("bij,bjk->bik", a, b)),
          lambda s: (torch.randn(s["b"], 3, s["s"]), torch.randn(s["b"], s["s"], 5)),
          {"b": (1, 6), "s": (1, 12)}, lambda d: ({0: d["b"], 2: d["s"]}, {0: d["b"], 1: d["s"]}), tol=1e-4),
    seq_fn("flatten_view_chunk", lambda m, x: x.flatten(1).chunk(2, 1)),
    seq_fn("softmax_logsoftmax_dropout_eval", lambda m, x: (m.d(x.softmax(2)), x.log_softmax(-1)),
           d=nn.Dropout(0.5)),
]


def main() -> None:
    picks = [a for a in sys.argv[1:] if not a.startswith("-")]
    modes = [False, True] if "--strict" in sys.argv else [False]
    for p in PROBES:
        if picks and not any(k in p.name for k in picks):
            continue
        for which in ("1", ">1"):
            for strict in modes:
                g = run_side(True, p, which, strict)
                t = "-" if "--no-torch" in sys.argv else run_side(False, p, which, strict)
                tag = " strict" if strict else ""
                print(f"{p.name} @{which}{tag} | graphcap: {g} | torch: {t}", flush=True)


if __name__ == "__main__":
    main()
