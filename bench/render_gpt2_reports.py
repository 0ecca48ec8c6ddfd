"""Write the HTML report of a GPT-2 at 2, 12 and 48 layers and screenshot each with headless Chromium.

    python bench/render_gpt2_reports.py [--out /tmp/graphcap_gpt2_reports] [--layers 2 12 48]
                                        [--docs docs/images]

A transformers ``GPT2LMHeadModel`` with tiny widths (n_embd 64, n_head 2, tied
``lm_head``), exported with ``Dim("batch")`` and ``Dim("seq")``. For each depth
it writes OUT/gpt2_<L>.html and screenshots (1600x1000, as a user opens it):

- ``gpt2_<L>.png``: the page as it opens (the first view that shows structure);
- ``gpt2_<L>_expanded.png``: the repeated blocks expanded;
- ``gpt2_<L>_search.png``: a search for one layer's attention operator, revealed.

Look at them: every block must be visible and readable at every depth.
``--docs DIR`` also writes small copies (``report_gpt2_<L>.png``, under 200 KB) for
the documentation. Needs Debian's ``chromium`` (``apt-get install chromium``).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

import graphcap
from graphcap import Dim


def gpt2_program(layers: int):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=256, n_embd=64, n_layer=layers, n_head=2, n_positions=128, use_cache=False)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 256, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    batch, seq = Dim("batch", max=64), Dim("seq", min=2, max=128)
    spec = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return graphcap.export(model, (), {"input_ids": ids, "attention_mask": mask}, dynamic_shapes=spec)


def screenshot(browser: str, html: Path, png: Path, fragment: str = "", height: int = 1000) -> None:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--virtual-time-budget=3000", f"--window-size=1600,{height}", f"--screenshot={png}",
                    html.resolve().as_uri() + fragment], check=True, capture_output=True, timeout=120)


def small_copy(png: Path, dest: Path, limit: int = 200_000) -> None:
    """A copy for the docs: scaled down and palette-quantised until it is under ``limit`` bytes."""
    from PIL import Image
    image = Image.open(png).convert("RGB")
    for width in (1200, 1000, 800):
        small = image.resize((width, round(image.height * width / image.width)), Image.LANCZOS)
        small.quantize(colors=64).save(dest, optimize=True)
        if dest.stat().st_size < limit:
            return
    print(f"{dest} is {dest.stat().st_size // 1024} KiB (over {limit // 1000} KB)", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/graphcap_gpt2_reports")
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 12, 48])
    ap.add_argument("--docs", default="", help="also write small PNG copies here (docs/images)")
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-headless-shell") or \
        shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("no chromium found: apt-get install chromium", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for layers in args.layers:
        start = time.perf_counter()
        ep = gpt2_program(layers)
        exported = time.perf_counter() - start
        html = graphcap.report(ep, out / f"gpt2_{layers}.html", title=f"GPT-2, {layers} layers")
        written = time.perf_counter() - start - exported
        print(f"{layers} layers: {len(ep.graph.nodes)} nodes, exported in {exported:.1f}s, report in "
              f"{written:.1f}s ({html.stat().st_size // 1024} KiB)")
        shots = {"": "", "_expanded": "#expand=1",
                 "_search": f"#find=h.{layers - 1}.attn%20scaled_dot&go=1"}
        for suffix, fragment in shots.items():
            png = out / f"gpt2_{layers}{suffix}.png"
            screenshot(browser, html, png, fragment)
            print(f"  {png}")
        if args.docs:
            docs = Path(args.docs)
            docs.mkdir(parents=True, exist_ok=True)
            small_copy(out / f"gpt2_{layers}.png", docs / f"report_gpt2_{layers}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
