"""draft_export's report read as torch's code reads ``ep._report``: each failure's ``data`` under
torch's keys (``op`` as the overload torch names, ``expr``/``result``/``occurrences``, the user's
frame in ``user_stack``, ``new_dynamic_shapes`` for a refined spec), ``str_to_filename`` for those
frames, and ``apply_suggested_fixes()`` refusing with NotImplementedError as torch's does. Each
case is compared with torch.export.draft_export on the same program."""
from __future__ import annotations

import inspect

import pytest
import torch
from torch.export import Dim

import graphcap


class _Threshold(torch.nn.Module):
    def forward(self, x, limit):
        for _ in range(3):
            n = (limit * 1).item()  # a new value each time: the same question, met three times
            if n > 2:
                x = x * 2
        return x


def _line_of(cls, text):
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _both(mod, args, **kw):
    return graphcap.draft_export(mod, args, **kw)._report, torch.export.draft_export(mod, args, **kw)._report


def test_data_dependent_failure_carries_torchs_keys():
    ours, theirs = _both(_Threshold(), (torch.ones(2), torch.tensor(4)))
    (f,), (t,) = ours.failures, theirs.failures
    assert f.failure_type == t.failure_type
    assert f.data["expr"] == t.data["expr"] == "u0 > 2"
    assert f.data["result"] == t.data["result"] == "True"
    assert f.data["occurrences"] == t.data["occurrences"] == 3
    frame = f.data["user_stack"][-1]
    assert set(frame) == set(t.data["user_stack"][-1])
    assert frame["line"] == _line_of(_Threshold, "if n > 2") and frame["loc"] == "if n > 2:"
    assert ours.str_to_filename[frame["filename"]] == __file__
    assert isinstance(f.data["stack"], list)


def test_custom_operator_failures_name_the_overload_as_torch_does():
    with torch.library._scoped_library("graphcap_h23k_draft", "FRAGMENT"):
        @torch.library.custom_op("graphcap_h23k_draft::twice", mutates_args=())
        def twice(a: torch.Tensor) -> torch.Tensor:
            return torch.cat([a, a])

        @torch.library.custom_op("graphcap_h23k_draft::halve", mutates_args=())
        def halve(a: torch.Tensor) -> torch.Tensor:
            return a[: a.shape[0] // 2].clone()

        @torch.library.register_fake("graphcap_h23k_draft::halve")
        def _(a):
            return torch.empty_like(a)  # wrong: the real output has half the rows

        class M(torch.nn.Module):
            def forward(self, a):
                return torch.ops.graphcap_h23k_draft.twice(a).sum() + torch.ops.graphcap_h23k_draft.halve(a).sum()

        ours, theirs = _both(M(), (torch.randn(4, 2),))
        ops = sorted(f.data["op"] for f in ours.failures)
        assert ops == sorted(f.data["op"] for f in theirs.failures) \
            == ["graphcap_h23k_draft.halve.default", "graphcap_h23k_draft.twice.default"]
        # the key of op_profiles, which torch's unsafe_generate_fake_kernels reads
        assert set(ops) == set(ours.op_profiles)


def test_refined_spec_is_new_dynamic_shapes():
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    ep = graphcap.draft_export(Add(), (torch.ones(3), torch.ones(3)),
                               dynamic_shapes={"a": {0: Dim("n")}, "b": {0: Dim("m")}})
    (f,) = ep._report.failures
    assert f.failure_type.name == "GUARD_ADDED"
    assert f.data["new_dynamic_shapes"] is ep._report.refined_dynamic_shapes
    # the refined spec exports for real, and the program runs at another size
    again = graphcap.export(Add(), (torch.ones(3), torch.ones(3)), dynamic_shapes=f.data["new_dynamic_shapes"])
    assert torch.equal(again.module()(torch.ones(6), torch.ones(6)), torch.full((6,), 2.0))
    assert isinstance(f.data["expr"], str) and f.data["expr"]
    # the report's plain data stays JSON-ready: the spec object is given as its code
    assert "dynamic_shapes = " in ep._report.as_data()[0]["details"]["refined_dynamic_shapes"]
    assert "refined_spec" not in ep._report.as_data()[0]["details"]


def test_apply_suggested_fixes_refuses_and_lists_the_fixes():
    ep = graphcap.draft_export(_Threshold(), (torch.ones(2), torch.tensor(4)))
    with pytest.raises(NotImplementedError, match=r"torch\._check\(") as info:
        ep._report.apply_suggested_fixes()
    assert f"line {_line_of(_Threshold, 'if n > 2')}" in str(info.value)
    clean = graphcap.draft_export(torch.nn.ReLU(), (torch.randn(3),))._report
    assert clean.successful() and clean.str_to_filename == {}
    with pytest.raises(NotImplementedError, match="nothing to fix"):
        clean.apply_suggested_fixes()
