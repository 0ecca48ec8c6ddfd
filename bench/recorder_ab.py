"""The recorder's shortcuts on against off, in one process, on the same model and inputs.

For each selected zoo model: warm exports alternate shortcuts off / on (``--repeats`` pairs), and
the table shows the median CPU time of each and the median of the per-pair ratios (adjacent
exports share the machine's load, which makes the paired ratio the steadiest figure on a
shared machine). ``--meta`` also times the same forward pass on the meta device (as
``speed_bench.py`` does) and prints warm export / meta forward. ``--profile DIR`` writes a
CPU-timed cProfile of five warm exports with each setting (``DIR/<model>_on.prof``, ``_off``).

    PYTHONPATH=src .venv/bin/python bench/recorder_ab.py --models tv_resnet18,hf_gpt2 --repeats 25 --meta

The shortcuts cover ``graphcap.trace.recorder_shortcuts`` and the property-read pass-through of
``graphcap.trace.python_overrides`` (turned off here by making its type test fail).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import gc
import statistics
import time
from pathlib import Path
from typing import Any, Iterator

import harness  # also puts ../shared/zoo on the path
import torch

import graphcap
from graphcap.torch_private.dynamo import exporting_flags_set
from graphcap.trace import python_overrides
from graphcap.trace.recorder_shortcuts import recorder_shortcuts

_PROPERTY_READ = python_overrides._PROPERTY_READ


@contextlib.contextmanager
def _shortcuts(on: bool) -> Iterator[None]:
    python_overrides._PROPERTY_READ = _PROPERTY_READ if on else type("NeverAFunction", (), {})
    try:
        with recorder_shortcuts(on):
            yield
    finally:
        python_overrides._PROPERTY_READ = _PROPERTY_READ


def _cpu(fn: Any) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def run_model(name: str, builder: Any, repeats: int, meta: bool, profile: Path | None) -> str:
    built = builder()
    model, args, kwargs = built.model, built.args, built.kwargs

    def export() -> Any:
        return graphcap.export(model, args, kwargs)

    times: dict[bool, list[float]] = {True: [], False: []}
    for on in (False, True):
        with _shortcuts(on):
            export()
    meta_times: list[float] = []
    if meta:
        meta_model = copy.deepcopy(model).to("meta")
        meta_args, meta_kwargs = harness.to_meta(args), harness.to_meta(kwargs)

        def forward() -> Any:
            with exporting_flags_set():
                return meta_model(*meta_args, **meta_kwargs)
        forward()
    for _ in range(repeats):
        for on in (False, True):
            with _shortcuts(on):
                times[on].append(_cpu(export))
        if meta:
            meta_times.append(_cpu(forward))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    paired = statistics.median(b / a for a, b in zip(times[False], times[True]))
    line = f"| {name} | {off * 1000:.1f} | {on * 1000:.1f} | {paired:.3f} |"
    if meta:
        m = statistics.median(meta_times)
        line += f" {m * 1000:.1f} | {off / m:.2f}x | {on / m:.2f}x |"
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        for setting in (False, True):
            prof = cProfile.Profile(time.process_time)
            with _shortcuts(setting):
                for _ in range(5):
                    gc.collect()
                    prof.enable()
                    export()
                    prof.disable()
            prof.dump_stats(profile / f"{name}_{'on' if setting else 'off'}.prof")
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_resnet18,hf_gpt2")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--meta", action="store_true", help="also time the forward pass on the meta device")
    parser.add_argument("--profile", type=Path, default=None, help="write CPU-timed profiles to this folder")
    opts = parser.parse_args()
    import zoo  # lives in ../shared/zoo
    torch.set_num_threads(1)
    header = "| model | off ms (CPU) | on ms (CPU) | paired on/off |"
    if opts.meta:
        header += " meta forward ms | off / meta | on / meta |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for case in zoo.select(opts.models):
        print(run_model(case.name, case.builder, opts.repeats, opts.meta, opts.profile), flush=True)


if __name__ == "__main__":
    main()
