"""graphcap's strict capture (``strict=True``) on the public zoo, beside its non-strict capture and
torch.export's two modes.

For each zoo model, each library (graphcap, torch) and each mode (strict, non-strict), static and with
the zoo's dynamic spec (batch, and seq for text models): does it export (else the error's first
line), does ``module()`` match eager at the example and at the zoo's second inputs (other in-range
sizes), is a batch past the declared max refused, do ``run_decompositions()`` and a save/load round
trip (each library's own) still match, and is the graph signature (input/output kinds and names) the
same as torch's in the same mode.  One line per model, library, mode and spec:

    name | lib mode spec | verdict [| signature differs: ...]

Run (a vision model at 224x224 takes ~20-40 s a line; the default is a quick set, --all every model):
    PYTHONPATH=src python bench/probes/strict_zoo_audit.py [NAME ... | --all] [--no-torch] [--only-strict] [-v]
    PYTHONPATH=src python bench/probes/strict_zoo_audit.py --preserve   # preserve_module_call_signature
    PYTHONPATH=src python bench/probes/strict_zoo_audit.py --static-cache   # transformers' ExecuTorch recipe
"""
from __future__ import annotations

import copy
import io
import os
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any

import torch
import torch.export as te

import graphcap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "zoo"))

DEFAULT = ["custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only", "tv_resnet18",
           "tv_mobilenet_v3_small", "tv_vit_small", "tv_deeplabv3_mbv3_large", "timm_vit_tiny_patch16_224",
           "timm_efficientformer_l1", "hf_bert", "hf_distilbert", "hf_gpt2", "hf_gpt2_cache", "hf_llama",
           "hf_t5", "hf_vit", "hf_wav2vec2"]


# Configs beyond the zoo (built here the zoo's way: random weights, nothing downloaded); each a
# ``zoo.Built``. Training mode, losses from labels, position ids, heads and pooling variants.
def _extra() -> dict[str, Any]:
    import zoo
    from torch.export import Dim

    def text(model: Any, extra: dict[str, Any] | None = None, labels: bool = False, mask: bool = True) -> Any:
        built = zoo._hf_text(model, with_mask=mask)
        if extra:
            for kw, b in ((built.kwargs, 2), (built.kwargs2, 3)):
                s = kw["input_ids"].shape[1]
                for k, make in extra.items():
                    kw[k] = make(b, s)
            built.dynamic_shapes.update({k: {0: built.dynamic_shapes["input_ids"][0],
                                             1: built.dynamic_shapes["input_ids"][1]} for k in extra})
        if labels:
            for kw in (built.kwargs, built.kwargs2):
                kw["labels"] = kw["input_ids"].clone()
            built.dynamic_shapes["labels"] = dict(built.dynamic_shapes["input_ids"])
        return built

    def bert_cls() -> Any:
        from transformers import BertConfig, BertForSequenceClassification
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=128, num_labels=3)
        built = text(BertForSequenceClassification(cfg).eval(),
                     {"token_type_ids": lambda b, s: (torch.arange(s) >= s // 2).long().expand(b, s).clone()})
        return built

    def gpt2_lm_labels() -> Any:
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128, use_cache=False)
        return text(GPT2LMHeadModel(cfg).eval(), labels=True)

    def llama_pos_ids() -> Any:
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        m = LlamaForCausalLM(zoo._decoder_cfg(LlamaConfig, hidden_size=64, intermediate_size=128)).eval()
        return text(m, {"position_ids": lambda b, s: torch.arange(s).expand(b, s).clone()})

    def resnet_train() -> Any:
        import torchvision
        torch.manual_seed(0)
        m = torchvision.models.resnet18(weights=None).train()
        x1, x2 = zoo._img(2, 3, 64, 64, 1), zoo._img(3, 3, 64, 64, 2)
        return zoo.Built(m, (x1,), {}, ({0: Dim("batch", min=2, max=16)},), (x2,), {})

    def timm_convnext() -> Any:
        return zoo._timm("convnextv2_atto", 64, 64)

    def timm_mobilevit() -> Any:
        return zoo._timm("mobilevit_xxs", 64, 64)

    def tv_swin() -> Any:
        return zoo._tv("swin_t", 64, 64)

    def tv_shufflenet() -> Any:
        return zoo._tv("shufflenet_v2_x0_5", 64, 64)

    return {"x_bert_cls_token_types": bert_cls, "x_gpt2_lm_labels": gpt2_lm_labels,
            "x_llama_causal_position_ids": llama_pos_ids, "x_resnet18_train": resnet_train,
            "x_timm_convnextv2_atto": timm_convnext, "x_timm_mobilevit_xxs": timm_mobilevit,
            "x_tv_swin_t": tv_swin, "x_tv_shufflenet_v2": tv_shufflenet}


# the default run (a few minutes on two cores); --all runs DEFAULT + EXTRA (about an hour, loaded)
QUICK = ["custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only", "hf_bert", "hf_gpt2_cache"]

EXTRA = ["x_bert_cls_token_types", "x_gpt2_lm_labels", "x_llama_causal_position_ids", "x_resnet18_train",
         "x_timm_convnextv2_atto", "x_timm_mobilevit_xxs", "x_tv_swin_t", "x_tv_shufflenet_v2"]


def build(name: str) -> Any:
    import zoo
    return _extra()[name]() if name.startswith("x_") else zoo.REGISTRY[name].builder()


def _same(a: Any, b: Any, tol: float = 1e-4) -> bool:
    from graphcap.auto_flatten import flatten  # flattens a DynamicCache by its attributes, as graphcap does
    la, sa = flatten(a)
    lb, sb = flatten(b)
    if type(a) is not type(b) or sa != sb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.is_floating_point():
                if not torch.allclose(x, y, atol=tol, rtol=tol, equal_nan=True):
                    return False
            elif not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _first(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _past_max(built: Any) -> tuple[tuple, dict] | None:
    """The zoo's example with the batch dim one past its declared max (tiled, so ids stay ids)."""
    import torch.utils._pytree as pytree
    hi = next((d.max for d in _dims(built.dynamic_shapes) if d.__name__ == "batch"), None)
    if hi is None:
        return None
    leaves, tree = pytree.tree_flatten((built.args, built.kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor) and t.dim() > 0]
    b = tensors[0].shape[0]
    out = [t.index_select(0, torch.arange(hi + 1) % b)
           if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == b else t for t in leaves]
    args, kwargs = pytree.tree_unflatten(out, tree)
    return args, kwargs


def _dims(spec: Any) -> list[Any]:
    import torch.utils._pytree as pytree
    found = []
    for leaf in pytree.tree_leaves(spec, is_leaf=lambda s: hasattr(s, "__name__") and hasattr(s, "max")):
        if hasattr(leaf, "max") and hasattr(leaf, "__name__"):
            found.append(leaf)
    return found


def _signature(ep: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    sig = ep.graph_signature
    ins = [(str(s.kind).split(".")[-1], getattr(s.arg, "name", str(s.arg))) for s in sig.input_specs]
    outs = [(str(s.kind).split(".")[-1], getattr(s.arg, "name", str(s.arg))) for s in sig.output_specs]
    return ins, outs


def _sig_diff(a: Any, b: Any) -> str:
    ia, oa = a
    ib, ob = b
    bits = []
    if [k for k, _ in ia] != [k for k, _ in ib]:
        bits.append(f"input kinds {len(ia)} vs {len(ib)}: "
                    f"{[x for x in ia if x not in ib][:3]} / {[x for x in ib if x not in ia][:3]}")
    elif ia != ib:
        bits.append(f"input names: {[(x, y) for x, y in zip(ia, ib) if x != y][:3]}")
    if [k for k, _ in oa] != [k for k, _ in ob]:
        bits.append(f"output kinds {[k for k, _ in oa]} vs {[k for k, _ in ob]}")
    elif oa != ob:
        bits.append(f"output names: {[(x, y) for x, y in zip(oa, ob) if x != y][:3]}")
    return "; ".join(bits)


def _run(ep: Any, args: tuple, kwargs: dict) -> Any:
    with torch.no_grad():
        return ep.module()(*args, **kwargs)


def _roundtrip(lib: str, ep: Any) -> Any:
    buf = io.BytesIO()
    if lib == "graphcap":
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.pt2")
            graphcap.save(ep, path)
            return graphcap.load(path)
    te.save(ep, buf)
    buf.seek(0)
    return te.load(buf)


def probe(name: str, lib: str, strict: bool, dynamic: bool, verbose: bool = False) -> tuple[str, Any]:
    built = build(name)
    model = built.model
    fresh = copy.deepcopy(model)  # eager's state before any run (buffers a forward updates)
    spec = built.dynamic_shapes if dynamic else None
    export = graphcap.export if lib == "graphcap" else te.export
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = export(model, built.args, built.kwargs, dynamic_shapes=spec, strict=strict)
    except Exception as e:
        if verbose:
            traceback.print_exc()
        return f"REFUSED {_first(e)} ({time.time() - t0:.0f}s)", None
    took = time.time() - t0
    bad = []
    stages = [("ep", lambda: ep)]
    stages.append(("decomp", lambda: ep.run_decompositions()))
    stages.append(("saved", lambda: _roundtrip(lib, ep)))
    for stage, make in stages:
        try:
            prog = copy.deepcopy(make())  # each stage starts from the exported state
        except Exception as e:
            bad.append(f"{stage}: {_first(e)}")
            if verbose:
                traceback.print_exc()
            continue
        eager = copy.deepcopy(fresh)
        mod = prog.module()
        for label, a, k in [("ex", built.args, built.kwargs), ("2", built.args2, built.kwargs2)]:
            if label == "2" and not (dynamic and built.args2 is not None):
                continue
            with torch.no_grad():
                w = eager(*a, **k)
            try:
                with torch.no_grad():
                    got = mod(*a, **k)
            except Exception as e:
                bad.append(f"{stage}@{label}: {_first(e)}")
                if verbose:
                    traceback.print_exc()
                continue
            if not _same(got, w):
                bad.append(f"{stage}@{label}: WRONG")
        if dynamic and stage == "ep":
            past = _past_max(built)
            if past is not None:
                try:
                    _run(prog, *past)
                    bad.append("past max: ran")
                except Exception as e:
                    if verbose:
                        print(f"   past max: {_first(e)}", file=sys.stderr)
    verdict = "ok" if not bad else "; ".join(bad)
    return f"{verdict} ({took:.0f}s)", _signature(ep)


def preserve_probe() -> None:
    """preserve_module_call_signature on real models with strict=True, unflatten, swap a submodule: first
    for eager's own layer (same numbers), then for a copy with changed weights (eager changed alike)."""
    for name, fqn in (("hf_bert", "encoder.layer.0"), ("hf_llama", "layers.1"), ("tv_resnet18", "layer2")):
        built = build(name)
        model = built.model
        for lib, export in (("graphcap", graphcap.export), ("torch", te.export)):
            for strict in (True, False):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ep = export(model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                                    strict=strict, preserve_module_call_signature=(fqn,))
                        unflatten = graphcap.unflatten if lib == "graphcap" else te.unflatten
                        uf = unflatten(ep)
                    with torch.no_grad():
                        want = model(*built.args2, **built.kwargs2)
                        same = _same(uf(*built.args2, **built.kwargs2), want)
                        uf.set_submodule(fqn, copy.deepcopy(model.get_submodule(fqn)))
                        same2 = _same(uf(*built.args2, **built.kwargs2), want)
                        changed = copy.deepcopy(model.get_submodule(fqn))
                        for prm in changed.parameters():
                            prm.mul_(0.5)
                        other = copy.deepcopy(model)
                        other.set_submodule(fqn, copy.deepcopy(changed))
                        uf.set_submodule(fqn, changed)
                        same3 = _same(uf(*built.args2, **built.kwargs2), other(*built.args2, **built.kwargs2))
                    print(f"preserve {name}.{fqn} | {lib} strict={strict} | unflatten={same} swapped={same2} "
                          f"changed={same3}", flush=True)
                except Exception as e:
                    print(f"preserve {name}.{fqn} | {lib} strict={strict} | {_first(e)}", flush=True)


def static_cache_probe() -> None:
    """transformers' ExecuTorch recipe (``TorchExportableModuleWithStaticCache``, cache buffers updated
    in place) around a tiny Llama, exported with a dynamic sequence, then a prefill of 4 tokens and
    3 decode steps, each through a fresh ``module()`` as the recipe's ``generate`` does."""
    import zoo
    from torch.export import Dim
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache
    torch.manual_seed(0)
    lm = LlamaForCausalLM(zoo._decoder_cfg(LlamaConfig, hidden_size=64, intermediate_size=128,
                                           use_cache=True)).eval()
    lm.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                            cache_config={"batch_size": 1, "max_cache_len": 32})
    wrapper = TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=32)
    ids = torch.randint(3, 1000, (1, 4), generator=torch.Generator().manual_seed(1))
    spec = {"input_ids": {1: Dim("seq", min=1, max=16)}, "cache_position": {0: Dim("seq", min=1, max=16)}}
    steps = [(ids, torch.arange(4))] + [(ids[:, i:i + 1], torch.tensor([4 + i])) for i in range(3)]
    for lib, export in (("graphcap", graphcap.export), ("torch", te.export)):
        for strict in (True, False):
            model = copy.deepcopy(wrapper)
            eager = copy.deepcopy(wrapper)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ep = export(model, (), {"input_ids": ids, "cache_position": torch.arange(4)},
                                dynamic_shapes=spec, strict=strict)
                bad = []
                for i, (x, pos) in enumerate(steps):
                    with torch.no_grad():
                        want = eager(input_ids=x, cache_position=pos)
                        got = ep.module()(input_ids=x, cache_position=pos)
                    if not _same(got, want):
                        bad.append(f"step {i} WRONG")
                mutated = sum(1 for s in ep.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION")
                print(f"static cache | {lib} strict={strict} | {'; '.join(bad) or 'ok'} "
                      f"({mutated} buffer mutations)", flush=True)
            except Exception as e:
                print(f"static cache | {lib} strict={strict} | {_first(e)}", flush=True)


def main(argv: list[str]) -> None:
    verbose = "-v" in argv
    if "--preserve" in argv:
        preserve_probe()
        return
    if "--static-cache" in argv:
        static_cache_probe()
        return
    names = [a for a in argv if not a.startswith("-")] or (DEFAULT + EXTRA if "--all" in argv else QUICK)
    libs = ["graphcap"] if "--no-torch" in argv else ["graphcap", "torch"]
    modes = [True] if "--only-strict" in argv else [True, False]
    for name in names:
        for dynamic in (False, True):
            for strict in modes:
                sigs = {}
                for lib in libs:
                    line, sig = probe(name, lib, strict, dynamic, verbose)
                    sigs[lib] = sig
                    print(f"{name} | {lib} {'strict' if strict else 'non-strict'} "
                          f"{'dynamic' if dynamic else 'static'} | {line}", flush=True)
                if sigs.get("graphcap") and sigs.get("torch"):
                    diff = _sig_diff(sigs["graphcap"], sigs["torch"])
                    if diff:
                        print(f"{name} | signature {'strict' if strict else 'non-strict'} "
                              f"{'dynamic' if dynamic else 'static'} | differs: {diff}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
