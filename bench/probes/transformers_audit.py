"""transformers architectures with dynamic shapes: graphcap against torch.export and eager.

Each probe builds one Hugging Face architecture from a tiny config (random weights, 2 layers, eval
mode, nothing downloaded), exports it with a dynamic batch and, where it means something, a dynamic
sequence (or image height and width), once with graphcap and once with torch.export.  Each
program's ``module()`` runs at the example and at other sizes in range (batch 1, short and long
sequences, the maxima); an out-of-range size must be refused before computing; then the same after
``run_decompositions()`` and after a save/load round trip (each library's own).  One line per probe:

    name | graphcap: <verdict> | torch: <verdict>

"=" means every stage matched eager at every size and the out-of-range input was refused.  Run:
    PYTHONPATH=src python bench/probes/transformers_audit.py [name-substring ...] [-v] [--strict] [--no-torch]
        [--auto] [--batch1]

``--auto`` makes every dim ``Dim.AUTO`` (no out-of-range check then); ``--batch1`` puts the example at batch 1.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import time
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import error_line, roundtrip
from torch import nn

import graphcap

VOCAB = 97
Sizes = dict[str, int]


def _flat(x: Any) -> list[Any]:
    if isinstance(x, torch.Tensor):
        return [x]
    if hasattr(x, "to_tuple"):
        return _flat(x.to_tuple())
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flat(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    if x is None:
        return []
    for attr in ("layers", "key_cache"):  # a cache object
        if hasattr(x, attr):
            return _flat([[getattr(lay, "keys", None), getattr(lay, "values", None)] for lay in x.layers]
                         if attr == "layers" else [x.key_cache, x.value_cache])
    return [x]


def _same(a: Any, b: Any, tol: float) -> str | None:
    fa, fb = _flat(a), _flat(b)
    if len(fa) != len(fb):
        return f"{len(fa)} outputs vs {len(fb)}"
    for i, (x, y) in enumerate(zip(fa, fb)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape:
                return f"output {i}: shape {tuple(x.shape)} vs {getattr(y, 'shape', y)}"
            if x.is_floating_point():
                if not torch.allclose(x, y, atol=tol, rtol=tol, equal_nan=True):
                    return f"output {i}: max diff {(x - y).abs().max().item():.2e}"
            elif not torch.equal(x, y):
                return f"output {i}: differs"
        elif x != y:
            return f"output {i}: {x} vs {y}"
    return None


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], nn.Module]
    inputs: Callable[[Sizes], dict[str, Any]]      # sizes -> kwargs
    dims: dict[str, tuple[int, int]]               # name -> (min, max)
    spec: Callable[[dict[str, Any]], Any]          # dims -> dynamic_shapes (a dict by kwarg)
    example: Sizes
    others: list[Sizes]
    out_of_range: Sizes
    tol: float = 1e-4


def _inputs(p: Probe, s: Sizes) -> dict[str, Any]:
    torch.manual_seed(sum(v * 31 ** i for i, v in enumerate(s.values())))
    return p.inputs(s)


def _check(p: Probe, eager: nn.Module, program: Any, stage: str, auto: bool = False) -> list[str]:
    try:
        mod = program.module()
    except Exception as e:
        return [f"{stage}: module() fails: {error_line(e, 160)}"]
    notes = []
    for s in [p.example] + p.others:
        kw = _inputs(p, s)
        with torch.no_grad():
            want = eager(**copy.deepcopy(kw))
        try:
            with torch.no_grad():
                got = mod(**copy.deepcopy(kw))
        except Exception as e:
            if "-v" in sys.argv:
                traceback.print_exc()
            notes.append(f"{stage}: run fails at {s}: {error_line(e, 160)}")
            continue
        bad = _same(want, got, p.tol)
        if bad:
            notes.append(f"{stage}: WRONG at {s} ({bad})")
    if auto:
        return notes
    kw = _inputs(p, p.out_of_range)
    try:
        with torch.no_grad():
            mod(**kw)
        notes.append(f"{stage}: out-of-range {p.out_of_range} RAN")
    except Exception as e:
        text = str(e)
        if "-v" in sys.argv:
            print(f"   [{stage} out-of-range] {type(e).__name__}: {text[:300]}")
        if not any(w in text for w in ("range", "<=", ">=", "between", "max", "bound")):
            notes.append(f"{stage}: out-of-range refusal unclear: {error_line(e, 160)}")
    return notes


def run_side(gc: bool, p: Probe, strict: bool) -> str:
    Dim = graphcap.Dim if gc else te.Dim
    dims: dict[str, Any] = {k: Dim(k, min=lo, max=hi) for k, (lo, hi) in p.dims.items()}
    dims["AUTO"] = Dim.AUTO
    auto = "--auto" in sys.argv  # every dim Dim.AUTO: no declared range, so nothing is out of range
    if auto:
        dims = {k: Dim.AUTO for k in dims}
    torch.manual_seed(0)
    model = p.make().eval()
    eager = copy.deepcopy(model)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = (graphcap.export if gc else te.export)(
                model, (), _inputs(p, p.example), dynamic_shapes=p.spec(dims), strict=strict)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        return f"export fails: {error_line(e, 160)}"
    t_export = time.perf_counter() - t0
    rc = sorted((str(r.lower), str(r.upper)) for r in ep.range_constraints.values())
    want_rc = sorted((str(lo), str(hi)) for lo, hi in p.dims.values())
    notes = [] if auto or set(want_rc) <= set(rc) else [f"ranges {rc}"]
    notes += _check(p, eager, ep, "ep", auto)
    dec = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dec = ep.run_decompositions()
        notes += _check(p, eager, dec, "decomp", auto)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        notes.append(f"decomp fails: {error_line(e, 160)}")
    try:
        loaded = roundtrip(ep)
        notes += _check(p, eager, loaded, "saved", auto)
    except Exception as e:
        if "-v" in sys.argv:
            traceback.print_exc()
        notes.append(f"save/load fails: {error_line(e, 160)}")
    verdict = "=" if not notes else "; ".join(dict.fromkeys(notes))
    return f"{verdict} [export {t_export:.1f}s]"


# ---------------------------------------------------------------------------- models

TEXT_DIMS = {"b": (1, 8), "s": (2, 64)}
TEXT_OTHERS = [{"b": 1, "s": 8}, {"b": 2, "s": 2}, {"b": 1, "s": 2}, {"b": 3, "s": 17}, {"b": 8, "s": 64}]


def _ids(b: int, s: int, pad_last: bool = True) -> dict[str, Any]:
    ids = torch.randint(3, VOCAB, (b, s))
    mask = torch.ones(b, s, dtype=torch.long)
    if pad_last and b > 1 and s > 2:
        mask[-1, -2:] = 0  # the last row padded at its end
    return {"input_ids": ids, "attention_mask": mask}


def text_probe(name: str, make: Callable[[], nn.Module], pad_last: bool = True, tol: float = 1e-4,
               extra: Callable[[Sizes], dict[str, Any]] | None = None,
               extra_spec: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Probe:
    def inputs(s: Sizes) -> dict[str, Any]:
        kw = _ids(s["b"], s["s"], pad_last)
        if extra:
            kw.update(extra(s))
        return kw

    def spec(d: dict[str, Any]) -> Any:
        sp = {"input_ids": {0: d["b"], 1: d["s"]}, "attention_mask": {0: d["b"], 1: d["s"]}}
        if extra_spec:
            sp.update(extra_spec(d))
        return sp

    return Probe(name, make, inputs, dict(TEXT_DIMS), spec, {"b": 2, "s": 8}, list(TEXT_OTHERS),
                 {"b": 2, "s": 65}, tol)


def _small(cls_cfg: Any, **kw: Any) -> Any:
    return cls_cfg(**kw)


def _dec(cfg_name: str, model_name: str, **kw: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers
        base = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, use_cache=False)
        base.update(kw)
        cfg = getattr(transformers, cfg_name)(**base)
        return getattr(transformers, model_name)(cfg)
    return make


def _hf(cfg_name: str, model_name: str, **kw: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers
        cfg = getattr(transformers, cfg_name)(**kw)
        return getattr(transformers, model_name)(cfg)
    return make


ENC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
           max_position_embeddings=128)


def image_probe(name: str, make: Callable[[], nn.Module], hw: tuple[int, int] | None, side: int = 32,
                mult: int = 32, tol: float = 1e-4) -> Probe:
    """pixel_values (b, 3, h, w); hw = None: only the batch is dynamic; else h, w = mult*k with k in hw."""
    def inputs(s: Sizes) -> dict[str, Any]:
        h = s.get("h", side // mult) * mult
        w = s.get("w", side // mult) * mult
        return {"pixel_values": torch.randn(s["b"], 3, h, w)}

    if hw is None:
        dims = {"b": (1, 8)}
        return Probe(name, make, inputs, dims, lambda d: {"pixel_values": {0: d["b"]}}, {"b": 2},
                     [{"b": 1}, {"b": 3}, {"b": 8}], {"b": 9}, tol)
    lo, hi = hw
    dims = {"b": (1, 8), "h": (lo, hi), "w": (lo, hi)}

    def spec(d: dict[str, Any]) -> Any:
        return {"pixel_values": {0: d["b"], 2: mult * d["h"], 3: mult * d["w"]}}

    mid = (lo + hi) // 2
    ex = {"b": 2, "h": mid, "w": min(hi, mid + 1)}
    return Probe(name, make, inputs, dims, spec, ex,
                 [{"b": 1, "h": lo, "w": lo}, {"b": 3, "h": hi, "w": lo}, {"b": 8, "h": hi, "w": hi}],
                 {"b": 2, "h": hi + 1, "w": lo}, tol)


def _bart_extra(s: Sizes) -> dict[str, Any]:
    return {"decoder_input_ids": torch.randint(3, VOCAB, (s["b"], max(2, s["s"] // 2 + 1)))}


def _bart_spec(d: dict[str, Any]) -> dict[str, Any]:
    return {"decoder_input_ids": {0: d["b"], 1: d["AUTO"]}}


def probes() -> list[Probe]:
    P: list[Probe] = []
    # decoders
    P.append(text_probe("mistral", _dec("MistralConfig", "MistralForCausalLM", sliding_window=None)))
    P.append(text_probe("mistral-sliding", _dec("MistralConfig", "MistralForCausalLM", sliding_window=4)))
    P.append(text_probe("qwen2", _dec("Qwen2Config", "Qwen2ForCausalLM")))
    P.append(text_probe("qwen3", _dec("Qwen3Config", "Qwen3ForCausalLM", head_dim=8)))
    P.append(text_probe("phi3", _dec("Phi3Config", "Phi3ForCausalLM", pad_token_id=0)))
    P.append(text_probe("gemma", _dec("GemmaConfig", "GemmaForCausalLM", head_dim=8)))
    P.append(text_probe("gemma2", _dec("Gemma2Config", "Gemma2ForCausalLM", head_dim=8, sliding_window=4)))
    P.append(text_probe("opt", _hf("OPTConfig", "OPTForCausalLM", vocab_size=VOCAB, hidden_size=32, ffn_dim=64,
                                   num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128,
                                   word_embed_proj_dim=32, use_cache=False)))
    P.append(text_probe("bloom", _hf("BloomConfig", "BloomForCausalLM", vocab_size=VOCAB, hidden_size=32, n_layer=2,
                                     n_head=4, use_cache=False)))
    P.append(text_probe("gpt-neox", _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", vocab_size=VOCAB, hidden_size=32,
                                        num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                        max_position_embeddings=128, use_cache=False)))
    P.append(text_probe("falcon", _hf("FalconConfig", "FalconForCausalLM", vocab_size=VOCAB, hidden_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, use_cache=False,
                                      new_decoder_architecture=True, num_kv_heads=2, alibi=False)))
    P.append(text_probe("falcon-alibi", _hf("FalconConfig", "FalconForCausalLM", vocab_size=VOCAB, hidden_size=32,
                                            num_hidden_layers=2, num_attention_heads=4, use_cache=False,
                                            alibi=True, multi_query=True)))
    P.append(text_probe("mixtral", _dec("MixtralConfig", "MixtralForCausalLM", num_local_experts=4,
                                        num_experts_per_tok=2)))
    P.append(text_probe("qwen2-moe", _dec("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4,
                                          num_experts_per_tok=2, moe_intermediate_size=32,
                                          shared_expert_intermediate_size=32)))
    # encoders
    P.append(text_probe("roberta", _hf("RobertaConfig", "RobertaModel", pad_token_id=1, **ENC)))
    P.append(text_probe("albert", _hf("AlbertConfig", "AlbertModel", embedding_size=16, **ENC)))
    P.append(text_probe("electra", _hf("ElectraConfig", "ElectraModel", embedding_size=16, **ENC)))
    P.append(text_probe("deberta-v2", _hf("DebertaV2Config", "DebertaV2Model", relative_attention=True,
                                          position_buckets=8, max_relative_positions=16,
                                          pos_att_type=["p2c", "c2p"], **ENC)))
    P.append(text_probe("mobilebert", _hf("MobileBertConfig", "MobileBertModel", embedding_size=16,
                                          intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=1,
                                          **ENC)))
    P.append(text_probe("bart", _hf("BartConfig", "BartModel", vocab_size=VOCAB, d_model=32, encoder_layers=2,
                                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                                    use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                    decoder_start_token_id=1),
                        extra=_bart_extra, extra_spec=_bart_spec))
    P.append(text_probe("clip-text", _hf("CLIPTextConfig", "CLIPTextModel", vocab_size=VOCAB, hidden_size=32,
                                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=128, eos_token_id=2)))
    # vision / audio
    P.append(image_probe("clip-vision", _hf("CLIPVisionConfig", "CLIPVisionModel", hidden_size=32,
                                            num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                            image_size=32, patch_size=8), None))
    swin = _hf("SwinConfig", "SwinModel", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
               num_heads=[2, 2], window_size=4)
    P.append(image_probe("swin-from-1", swin, (1, 3)))  # the window shrinks below 64 pixels: 1 differs
    P.append(image_probe("swin", swin, (2, 3)))
    P.append(image_probe("segformer", _hf("SegformerConfig", "SegformerModel", num_encoder_blocks=2, depths=[1, 1],
                                          sr_ratios=[2, 1], hidden_sizes=[8, 16], num_attention_heads=[1, 2],
                                          patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), (1, 4)))
    P.append(image_probe("convnext", _hf("ConvNextConfig", "ConvNextModel", num_stages=2, hidden_sizes=[8, 16],
                                         depths=[1, 1]), (1, 4)))

    def whisper_make() -> nn.Module:
        import transformers
        cfg = transformers.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                         decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
                                         max_target_positions=64, use_cache=False,
                                         pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                         decoder_start_token_id=1)
        return transformers.WhisperModel(cfg)

    def whisper_inputs(s: Sizes) -> dict[str, Any]:
        return {"input_features": torch.randn(s["b"], 8, 32),
                "decoder_input_ids": torch.randint(3, VOCAB, (s["b"], s["s"]))}

    P.append(Probe("whisper", whisper_make, whisper_inputs, {"b": (1, 8), "s": (2, 64)},
                   lambda d: {"input_features": {0: d["b"]}, "decoder_input_ids": {0: d["b"], 1: d["s"]}},
                   {"b": 2, "s": 8}, [{"b": 1, "s": 8}, {"b": 2, "s": 2}, {"b": 8, "s": 64}], {"b": 2, "s": 65}))
    P += cache_probes()
    return P


class _CachedStep(nn.Module):
    """A decoder step whose past keys and values come in as a DynamicCache built from tensors."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_keys: list[torch.Tensor],
                past_values: list[torch.Tensor]) -> Any:
        import transformers
        cache = transformers.DynamicCache(config=self.model.config)
        for i, (k, v) in enumerate(zip(past_keys, past_values)):
            cache.update(k, v, i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        return out.logits, [lay.keys for lay in out.past_key_values.layers], \
            [lay.values for lay in out.past_key_values.layers]


def cache_probes() -> list[Probe]:
    def make() -> nn.Module:
        return _CachedStep(_dec("Qwen2Config", "Qwen2ForCausalLM")())

    def inputs(s: Sizes) -> dict[str, Any]:
        b, p, n = s["b"], s["p"], s["s"]
        return {"input_ids": torch.randint(3, VOCAB, (b, n)),
                "attention_mask": torch.ones(b, p + n, dtype=torch.long),
                "past_keys": [torch.randn(b, 2, p, 8) for _ in range(2)],
                "past_values": [torch.randn(b, 2, p, 8) for _ in range(2)]}

    def spec(d: dict[str, Any]) -> Any:
        kv = [{0: d["b"], 2: d["p"]}] * 2
        return {"input_ids": {0: d["b"], 1: d["s"]}, "attention_mask": {0: d["b"], 1: d["AUTO"]},
                "past_keys": kv, "past_values": kv}

    return [Probe("qwen2-dynamic-cache", make, inputs, {"b": (1, 8), "s": (1, 16), "p": (1, 48)}, spec,
                  {"b": 2, "s": 3, "p": 5},
                  [{"b": 1, "s": 1, "p": 5}, {"b": 2, "s": 1, "p": 1}, {"b": 3, "s": 16, "p": 48}],
                  {"b": 2, "s": 3, "p": 49})]


def static_cache_probe(strict: bool) -> str:
    """Qwen2 in transformers' own export wrapper with a StaticCache (max 32 positions, batch 1), the
    new-token count dynamic: a prefill of 5, two single-token steps and a step of 3, each program
    from a fresh state, after export, decomposition and save/load; then 17 tokens (out of range)."""
    import transformers
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache
    lm = _dec("Qwen2Config", "Qwen2ForCausalLM", use_cache=True)()
    lm.eval()
    lm.generation_config.cache_implementation = "static"
    torch.manual_seed(1)
    steps = [(torch.randint(3, VOCAB, (1, 5)), torch.arange(5)), (torch.tensor([[7]]), torch.tensor([5])),
             (torch.tensor([[8]]), torch.tensor([6])), (torch.randint(3, VOCAB, (1, 3)), torch.arange(7, 10))]

    def run(f: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return [f(input_ids=i, cache_position=c) for i, c in steps]

    want = run(TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=32))
    verdicts = []
    for gc in (True, False):
        Dim = graphcap.Dim if gc else te.Dim
        n = Dim("n", min=1, max=16)
        try:
            ep = (graphcap.export if gc else te.export)(
                TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=32), (),
                {"input_ids": steps[0][0], "cache_position": steps[0][1]},
                dynamic_shapes={"input_ids": {1: n}, "cache_position": {0: n}}, strict=strict)
        except Exception as e:
            verdicts.append(f"export fails: {error_line(e, 160)}")
            continue
        notes = []
        for stage, make in (("ep", lambda ep=ep: ep), ("decomp", ep.run_decompositions),
                            ("saved", lambda ep=ep, gc=gc: roundtrip(ep))):
            try:
                got = run(make().module())
                bad = [i for i, (a, b) in enumerate(zip(want, got)) if not torch.allclose(a, b, atol=1e-4)]
                if bad:
                    notes.append(f"{stage}: WRONG at steps {bad}")
            except Exception as e:
                notes.append(f"{stage}: fails: {error_line(e, 160)}")
        try:
            ep.module()(input_ids=torch.randint(3, VOCAB, (1, 17)), cache_position=torch.arange(17))
            notes.append("17 tokens RAN")
        except Exception:
            pass
        verdicts.append("=" if not notes else "; ".join(notes))
    del transformers
    return f"graphcap: {verdicts[0]} | torch: {verdicts[1]}"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    strict = "--strict" in sys.argv
    torch.set_num_threads(1)
    if not args or any(a in "qwen2-static-cache" for a in args):
        print(f"qwen2-static-cache{' strict' if strict else ''} | {static_cache_probe(strict)}", flush=True)
    for p in probes():
        if args and not any(a in p.name for a in args):
            continue
        if "--batch1" in sys.argv:  # the example at batch 1 (the dim's min)
            p.example = {**p.example, "b": 1}
        try:
            gc = run_side(True, p, strict)
            tc = "-" if "--no-torch" in sys.argv else run_side(False, p, strict)
        except Exception as e:  # the model itself cannot be built
            gc = tc = f"build fails: {error_line(e, 160)}"
        mode = "".join(f" {m}" for m in ("strict", "auto", "batch1") if f"--{m}" in sys.argv)
        print(f"{p.name}{mode} | graphcap: {gc} | torch: {tc}", flush=True)


if __name__ == "__main__":
    main()
