"""Dynamic export from samples alone (graphcap.infer_dynamic_shapes) vs Dim.AUTO on every input dim.

    PYTHONPATH=src python bench/infer_shapes_bench.py            # every zoo case with a hand-written spec
    PYTHONPATH=src python bench/infer_shapes_bench.py hf_gpt2 tv_resnet18

For each zoo case that has a hand-written ``dynamic_shapes`` spec, two ways to
get a dynamic program without writing one:

* ``inferred``: ``infer_dynamic_shapes(model, [sample1, sample2])`` on the
  zoo's two input sets (they differ along every dim the hand spec marks).
* ``auto``: ``graphcap.export`` on the first set with ``Dim.AUTO`` on every dim
  of every input tensor (what transformers does).

A case counts as a success when the program runs on BOTH input sets and
matches eager, and every dim the hand-written spec keeps dynamic is a symbol
in the program ("keeps"). The table is printed in Markdown.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import torch

import graphcap
from graphcap import Dim
from graphcap.capture.inferred_shapes import _same  # outputs compared by their tensors, caches included
from graphcap.dynamic.named_inputs import combined_inputs
from graphcap.dynamic.spec import match_spec
from graphcap.torch_private import pytree

ZOO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "zoo")


def _hand_dynamic(built) -> set[tuple[int, int]]:
    """(flat tensor leaf index, dim) for every dim the hand-written spec marks dynamic."""
    specs, _ = match_spec(built.model, tuple(built.args), dict(built.kwargs or {}), built.dynamic_shapes)
    return {(j, d) for j, s in enumerate(specs) if isinstance(s, dict) for d in s}


def _program_dynamic(ep) -> set[tuple[int, int]]:
    """(flat leaf index, dim) whose size is a symbol in the program's user-input placeholders."""
    users = set(ep.graph_signature.user_inputs)
    out = set()
    for j, node in enumerate(n for n in ep.graph.nodes if n.op == "placeholder" and n.name in users):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            out |= {(j, d) for d, s in enumerate(val.shape) if isinstance(s, torch.SymInt)}
    return out


def _auto_spec(built) -> Any:
    combined = combined_inputs(built.model, tuple(built.args), dict(built.kwargs or {}))
    def auto(v: Any) -> Any:
        return {d: Dim.AUTO for d in range(v.dim())} if isinstance(v, torch.Tensor) else None
    return {k: pytree.tree_map(auto, v) for k, v in combined.items()}


def _check(ep, built, hand) -> tuple[bool, bool, str]:
    runnable = ep.module()
    for a, k in ((built.args, built.kwargs), (built.args2, built.kwargs2)):
        k = dict(k or {})
        with torch.no_grad():
            want = built.model(*a, **k)
            try:
                got = runnable(*a, **k)
            except Exception as e:  # a refusal is a result here
                return False, hand <= _program_dynamic(ep), f"refuses a sample: {type(e).__name__}"
        if not _same(want, got):
            return False, hand <= _program_dynamic(ep), "differs from eager"
    return True, hand <= _program_dynamic(ep), ""


def run_case(case) -> dict[str, Any]:
    built = case.builder()
    hand = _hand_dynamic(built)
    row = {"case": case.name, "hand": len(hand)}
    samples = [(tuple(built.args), dict(built.kwargs or {})), (tuple(built.args2), dict(built.kwargs2 or {}))]
    t = time.perf_counter()
    try:
        shapes = graphcap.infer_dynamic_shapes(built.model, samples)
        ok, keeps, why = _check(shapes.program, built, hand)
        row["inferred"] = (ok, keeps, why, len(shapes.dims))
    except Exception as e:
        row["inferred"] = (False, False, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}", 0)
    row["inferred_s"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        ep = graphcap.export(built.model, tuple(built.args), dict(built.kwargs or {}), dynamic_shapes=_auto_spec(built))
        ok, keeps, why = _check(ep, built, hand)
        row["auto"] = (ok, keeps, why, len(ep.range_constraints))
    except Exception as e:
        row["auto"] = (False, False, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}", 0)
    row["auto_s"] = time.perf_counter() - t
    return row


def main(argv: list[str]) -> None:
    logging.disable(logging.WARNING)
    sys.path.insert(0, ZOO)
    import zoo
    cases = [c for c in zoo.select(None) if not argv or c.name in argv]
    rows = []
    for case in cases:
        if case.builder().dynamic_shapes is None:
            continue
        rows.append(run_case(case))
        r = rows[-1]
        print(f"{r['case']}: inferred={r['inferred']} auto={r['auto']}", file=sys.stderr, flush=True)
    print("| case | hand-written dynamic dims | inferred: matches eager / keeps (Dims) "
          "| auto: matches eager / keeps (symbols) | note |")
    print("|---|---|---|---|---|")
    for r in rows:
        fi, fa = r["inferred"], r["auto"]
        note = "; ".join(x for x in (f"inferred: {fi[2]}" if fi[2] else "", f"auto: {fa[2]}" if fa[2] else "") if x)
        print(f"| {r['case']} | {r['hand']} | {'yes' if fi[0] else 'no'} / {'yes' if fi[1] else 'no'} "
              f"({fi[3]}; {r['inferred_s']:.1f} s) | {'yes' if fa[0] else 'no'} / {'yes' if fa[1] else 'no'} "
              f"({fa[3]}; {r['auto_s']:.1f} s) | {note} |")
    n = len(rows)
    good_i = sum(r["inferred"][0] and r["inferred"][1] for r in rows)
    good_a = sum(r["auto"][0] and r["auto"][1] for r in rows)
    print(f"\nexported dynamically, matching eager on both sets and keeping the hand spec's symbols: "
          f"inferred {good_i}/{n}, Dim.AUTO {good_a}/{n}")


if __name__ == "__main__":
    main(sys.argv[1:])
