"""One ``graphcap.export_methods`` call against two ``torch.export`` calls through wrappers.

The model: a transformers Llama (a small config, random weights) in
transformers' static-cache export recipe with ``prefill`` and ``decode``
methods. torch.export exports one ``forward``, so each method goes through a
wrapper module whose forward calls it (how ExecuTorch's and optimum's recipes
do it), and each program is saved on its own with ``torch.export.save``.
graphcap exports both methods in one call over one state and saves them in one
file. Reported: export time (median of 3 timed rounds after a warm-up, the
contenders interleaved) and file size.

    .venv/bin/python bench/multi_method_bench.py [--layers 4 --hidden 256]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings
from pathlib import Path

import torch
from harness import wall_seconds

import graphcap


def build(layers: int, hidden: int):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    class PrefillDecode(TorchExportableModuleWithStaticCache):
        def prefill(self, input_ids, cache_position):
            return self.forward(input_ids=input_ids, cache_position=cache_position)[:, -1:]

        def decode(self, input_ids, cache_position):
            return self.forward(input_ids=input_ids, cache_position=cache_position)

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    lm = LlamaForCausalLM(cfg).eval()
    lm.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                            cache_config={"batch_size": 1, "max_cache_len": 128})
    return PrefillDecode(lm, batch_size=1, max_cache_len=128)


class _Method(torch.nn.Module):
    """forward = one method of the wrapped model (the recipe torch.export users follow)."""

    def __init__(self, model, name):
        super().__init__()
        self.model, self.name = model, name

    def forward(self, input_ids, cache_position):
        return getattr(self.model, self.name)(input_ids, cache_position)


INPUTS = {"prefill": (torch.arange(8).view(1, 8), torch.arange(8)),
          "decode": (torch.tensor([[7]]), torch.tensor([8]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    opts = ap.parse_args()
    model = build(opts.layers, opts.hidden)
    state_bytes = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                       for t in [*model.parameters(), *model.buffers()]}.values())

    def graphcap_export():
        return graphcap.export_methods(model, INPUTS)

    def torch_export():
        return {n: torch.export.export(_Method(model, n), args, strict=False) for n, args in INPUTS.items()}

    times: dict[str, list[float]] = {"graphcap": [], "torch": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphcap_export(), torch_export()  # warm-up
        for _ in range(3):
            times["graphcap"].append(wall_seconds(graphcap_export))
            times["torch"].append(wall_seconds(torch_export))
        with tempfile.TemporaryDirectory() as tmp:
            graphcap.save(graphcap_export(), Path(tmp) / "methods.pt2")
            gc_size = (Path(tmp) / "methods.pt2").stat().st_size
            torch_size = 0
            for n, ep in torch_export().items():
                torch.export.save(ep, Path(tmp) / f"{n}.pt2")
                torch_size += (Path(tmp) / f"{n}.pt2").stat().st_size
    g, t = statistics.median(times["graphcap"]), statistics.median(times["torch"])
    mib = 1 << 20
    print(f"Llama {opts.layers} layers, hidden {opts.hidden}: state {state_bytes / mib:.1f} MiB")
    print(f"export  graphcap.export_methods {g:.2f} s   torch.export x2 {t:.2f} s   ratio {g / t:.2f}x")
    print(f"file    graphcap one file {gc_size / mib:.1f} MiB   torch two files {torch_size / mib:.1f} MiB   "
          f"ratio {gc_size / torch_size:.2f}x")


if __name__ == "__main__":
    main()
