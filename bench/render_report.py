"""Write a zoo model's HTML report and screenshot it with headless Chromium.

    python bench/render_report.py tv_resnet18 [--out /tmp/graphcap_report] [--static] [--view KEY]

Writes OUT/<model>.html and OUT/<model>.png (Debian's ``chromium`` package;
``apt-get install chromium``), to look at the report as a user sees it; the
tests check the markup.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import harness  # noqa: F401  (puts ../shared/zoo on the path)
import zoo

import graphcap


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--out", default="/tmp/graphcap_report")
    ap.add_argument("--static", action="store_true", help="export without the zoo's dynamic_shapes")
    ap.add_argument("--height", type=int, default=1600)
    ap.add_argument("--view", default="", help="the nn_module_stack key of the module view to show first")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    built = zoo.REGISTRY[args.model].builder()
    start = time.perf_counter()
    ep = graphcap.export(built.model, built.args, built.kwargs,
                         dynamic_shapes=None if args.static else built.dynamic_shapes)
    html = graphcap.report(ep, out / f"{args.model}.html", title=f"{args.model}")
    print(f"exported and wrote {html} in {time.perf_counter() - start:.1f}s ({html.stat().st_size // 1024} KiB)")
    browser = shutil.which("chromium") or shutil.which("chromium-headless-shell") or shutil.which("google-chrome")
    if browser is None:
        print("no chromium found: apt-get install chromium", file=sys.stderr)
        return 1
    png = out / f"{args.model}.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1400,{args.height}", f"--screenshot={png}",
                    html.resolve().as_uri() + (f"#view={args.view}" if args.view else "")],
                   check=True, capture_output=True, timeout=120)
    print(f"screenshot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
