"""The recorder's profile table in bench/RESULTS.md ("2026-11-26 afternoon (h28r)"), from cProfile files.

Each column is one profile (``bench/recorder_ab.py --profile DIR`` writes CPU-timed ones,
``bench/export_bench.py --profile-dir`` wall-timed ones); each row the share of the profile's
total spent (cumulative) in one piece of the recorder: placeholder tracking, the fake-tensor
dispatch, make_fx's per-operator handling and its parts, graphcap's stack recording, torch's
stack-trace formatting, and the four torch-function modes' own time.

    python bench/probes/recorder_profile_table.py DIR/tv_resnet18_off.prof DIR/tv_resnet18_on.prof
"""
from __future__ import annotations

import pstats
import sys
from typing import Any

# (label, what to sum): a list of (file suffix, function name) takes the largest cumulative time
# among them; a string names a rule of _share
ROWS: list[tuple[str, Any]] = [
    ("make_fx trace", [("proxy_tensor.py", "trace")]),
    ("  placeholders tracked (`wrap_key`'s `track_tensor_tree`)", "placeholders"),
    ("  fake-tensor dispatch (`FakeTensorMode.dispatch`)", [("fake_tensor.py", "dispatch")]),
    ("    cache keys (`_cache_key`)", [("fake_tensor.py", "_cache_key")]),
    ("  per-operator handling (`proxy_call`)", [("proxy_tensor.py", "proxy_call")]),
    ("    output tracking (`track_tensor_tree` from `proxy_call`)", "outputs"),
    ("    `snapshot_fake` (all)", [("proxy_tensor.py", "snapshot_fake")]),
    ("    node creation (`create_proxy`, all)", [("fx/proxy.py", "create_proxy")]),
    ("      graphcap's `create_node` wrapper (torch's node creation inside)",
     [("graphcap/trace/recorder.py", "create_node")]),
    ("      graphcap's frame walks (`frame_keys*`)", "frame_walks"),
    ("  torch's stack-trace formatting (`_extract_symbolized_tb`)", [("_traceback.py", "_extract_symbolized_tb")]),
    ("  torch-function handlers, own time (4 modes)", "function_modes"),
]


def _share(stats: pstats.Stats, spec: Any) -> float:
    table = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt  # type: ignore[attr-defined]
    if spec in ("placeholders", "outputs"):
        caller = "wrapped" if spec == "placeholders" else "proxy_call"
        for (file, _, name), (_, _, _, _, callers) in table.items():
            if file.endswith("proxy_tensor.py") and name == "track_tensor_tree":
                return sum(v[3] for c, v in callers.items() if c[2] == caller) / total
        return 0.0
    if spec == "frame_walks":
        walked = 0.0
        for (file, _, name), (_, _, _, cum, callers) in table.items():
            if "graphcap/trace/recorder.py" not in file:
                continue
            if name in ("frame_keys", "frame_keys_bounded"):
                walked += cum
            elif name == "frame_keys_walking_all":
                walked += sum(v[3] for c, v in callers.items() if c[2] != "frame_keys_bounded")
        return walked / total
    if spec == "function_modes":
        own = sum(tt for (file, _, name), (_, _, tt, _, _) in table.items()
                  if name == "__torch_function__" and any(k in file for k in ("proxy_tensor", "python_overrides",
                                                                               "hop_capture")))
        return own / total
    best = 0.0
    for (file, _, name), (_, _, _, cum, _) in table.items():
        if any(file.endswith(suffix) and name == function for suffix, function in spec):
            best = max(best, cum)
    return best / total


def main(paths: list[str]) -> None:
    stats = [pstats.Stats(p) for p in paths]
    print("| | " + " | ".join(p.rsplit("/", 1)[-1].removesuffix(".prof") for p in paths) + " |")
    print("|---|" + "---|" * len(paths))
    for label, spec in ROWS:
        print(f"| {label} | " + " | ".join(f"{100 * _share(s, spec):.0f}%" for s in stats) + " |")
    print("| profile total, s | " + " | ".join(f"{s.total_tt:.3f}" for s in stats) + " |")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
