"""Static and dynamic export of the Llama bench model at N layers (CPU), then a cProfile of the dynamic one.

Usage: PYTHONPATH=src .venv/bin/python bench/probes/dynamic_profile.py 32
"""

import cProfile
import io
import pstats
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import torch

torch.set_num_threads(1)
from repeated_blocks_bench import llama  # noqa: E402

import graphcap  # noqa: E402
from graphcap.trace import block_reuse as br  # noqa: E402

n = int(sys.argv[1])
model = llama(n)
ids = torch.randint(0, 1000, (1, 32))
spec = ({1: graphcap.Dim("seq", min=2, max=512)},)
with torch.no_grad():
    graphcap.export(model, (ids,), dynamic_shapes=spec)
    graphcap.export(model, (ids,))
    for dyn in (False, True):
        t = time.process_time()
        ep = graphcap.export(model, (ids,), dynamic_shapes=spec if dyn else None)
        dt = time.process_time() - t
        print(
            "dynamic" if dyn else "static",
            f"{dt:.2f} s cpu",
            dict(br.LAST_STATS),
            {k: round(v, 3) for k, v in ep.export_timings.items()},
        )
    pr = cProfile.Profile()
    pr.enable()
    graphcap.export(model, (ids,), dynamic_shapes=spec)
    pr.disable()
st = pstats.Stats(pr)
tot = st.total_tt
print(f"profiled total {tot:.2f} s")
want = [
    "_record",
    "_replay",
    "_copy",
    "_call_module",
    "run_node",
    "proxy_call",
    "dispatch",
    "_dispatch_impl",
    "evaluate_expr",
    "_maybe_evaluate_static",
    "simplify",
    "create_symbolic_sizes_strides_storage_offset",
    "lift",
    "recompile",
    "_cached_dispatch_impl",
    "guard_bool",
    "expect_true",
    "_evaluate_expr",
    "binary_magic_impl",
    "sym_sum",
    "make_fx",
    "dispatch_trace",
    "record",
    "fakify",
    "from_tensor",
    "_produce_dyn_sizes_record",
    "insert_conversion_asserts",
    "_finish_recording",
    "_prepare",
    "run_decompositions",
]
rows = {}
for (f, _l, name), (_cc, _nc, _tt, ct, _callers) in st.stats.items():
    if name in want:
        key = (f.split("/")[-1], name)
        rows[key] = max(rows.get(key, 0), ct)
for (f, name), ct in sorted(rows.items(), key=lambda kv: -kv[1])[:30]:
    print(f"{100 * ct / tot:5.1f}%  {ct:6.2f} s  {f}:{name}")
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print("\n".join(s.getvalue().splitlines()[6:34]))
ps = pstats.Stats(pr)
for func, (_cc, _nc, _tt, _ct, callers) in ps.stats.items():
    for caller, v in callers.items():
        if caller[2] == "_copy" and v[3] > 0.05 * tot / 10:
            print(f"  _copy -> {func[2]:40s} {v[1]} calls {v[3]:.2f} s cum ({100 * v[3] / tot:.1f}%)")
    if func[2] in ("binary_magic_impl",):
        agg = {}
        for caller, v in callers.items():
            agg[caller[2]] = agg.get(caller[2], 0) + v[3]
        print("  binary_magic_impl callers:", sorted(((round(b, 2), a) for a, b in agg.items()), reverse=True)[:6])
