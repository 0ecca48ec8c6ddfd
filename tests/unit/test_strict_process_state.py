"""strict=True leaves the process as it found it (extends test_process_state to strict mode).

Besides the state every export must keep (pytree registry, modes, flags,
config, dynamo's counters), a strict export runs dynamo: it must leave no
cache entry on the user's code, no dim marks on the example tensors, dynamo's
bookkeeping (code trackers, compile metrics, frame counters, cached backends)
as it was, and a function compiled by the user must not recompile.
"""
from __future__ import annotations

import pytest
import torch
from test_process_state import Branchy, ShapeEnvCacheProbe, _compile_counter, assert_unchanged, snapshot

import graphcap


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))


def dynamo_snapshot(*codes) -> dict:
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.eval_frame as eval_frame
    from torch._dynamo import utils
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    return {
        "cache_entries": [len(_debug_get_cache_entry_list(c)) for c in codes],
        "input_codes": len(convert_frame.input_codes.seen),
        "output_codes": len(convert_frame.output_codes.seen),
        "metrics": {k: len(v) for k, v in utils.compilation_time_metrics.items()},
        "frame_counter": convert_frame.FRAME_COUNTER,
        "cached_backends": set(eval_frame.cached_backends),
    }


def _strict_calls(model, args, dynamic_shapes=None):
    box = {}

    def export():
        box["ep"] = graphcap.export(model, args, dynamic_shapes=dynamic_shapes, strict=True)

    def module_and_call():
        with torch.no_grad():
            box["ep"].module()(*args)

    def decompose():
        box["ep"].run_decompositions().module()(*args)

    return [("strict export", export), ("module()", module_and_call), ("run_decompositions", decompose)]


@pytest.mark.parametrize("case", ["static", "dynamic", "cond"])
def test_strict_export_leaves_nothing_behind(case):
    if case == "cond":
        model, args, spec = Branchy(), (torch.randn(6, 3),), ({0: graphcap.Dim("n", min=2, max=32)},)
        code = Branchy.forward.__code__
    else:
        model, args = Net().eval(), (torch.randn(2, 3, 8, 8),)
        spec = ({0: graphcap.Dim("batch", min=2, max=16)},) if case == "dynamic" else None
        code = Net.forward.__code__
    for name, call in _strict_calls(model, args, spec):
        probe = ShapeEnvCacheProbe()
        before, dyn_before = snapshot(), dynamo_snapshot(code)
        call()
        assert_unchanged(before, snapshot(), name)
        assert_unchanged(dyn_before, dynamo_snapshot(code), name)
        assert probe.still_cached(), f"{name} emptied ShapeEnv's class-level caches"
    assert not hasattr(args[0], "_dynamo_weak_dynamic_indices")


def test_a_users_own_dim_marks_stay():
    x = torch.randn(4, 3, 8, 8)
    torch._dynamo.mark_dynamic(x, 2)
    marks = set(x._dynamo_dynamic_indices)
    graphcap.export(Net().eval(), (x,), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=8)},), strict=True)
    assert x._dynamo_dynamic_indices == marks
    assert not hasattr(x, "_dynamo_weak_dynamic_indices")


def test_compiled_function_is_not_recompiled_after_a_strict_export():
    import torch._dynamo

    counts, backend = _compile_counter()

    @torch.compile(backend=backend)
    def f(x):
        return x * 2 + 1

    x = torch.randn(3)
    f(x)
    graphcap.export(Net().eval(), (torch.randn(2, 3, 8, 8),), strict=True)
    f(x)
    assert counts["compiles"] == 1
    torch._dynamo.reset()


def test_strict_export_of_a_compiled_module_code_keeps_its_cache_entry():
    """The user compiled the very forward graphcap then exports: its cache entry stays, unused by export."""
    import torch._dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    counts, backend = _compile_counter()
    model = Net().eval()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 3, 8, 8)
    compiled(x)
    entries = len(_debug_get_cache_entry_list(Net.forward.__code__))
    graphcap.export(model, (x,), strict=True)
    assert len(_debug_get_cache_entry_list(Net.forward.__code__)) == entries
    compiled(x)
    assert counts["compiles"] == 1
    torch._dynamo.reset()
