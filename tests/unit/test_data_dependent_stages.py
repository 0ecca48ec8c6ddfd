"""Data-dependent programs (``nonzero``, ``.item()``, unbacked sizes) survive every stage.

Each program is taken through export, run_decompositions, save/load (of both) and
``module()``; at every stage it keeps a range for each unbacked symbol, keeps its
runtime asserts, gives eager's result on data eager accepts, and refuses data that
breaks a ``torch._check`` before returning a result.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import graphcap
from conftest import assert_same_outputs, save_load
from graphcap import ir_checks

ASSERTS = {torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_async.msg}


class ItemSized(torch.nn.Module):
    """``.item()`` sizes a tensor; checks bound it."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 2)
        torch._check(k <= 10)
        return torch.ones(k, 3) * x.sum(), x.sum() + k


class NonzeroRows(torch.nn.Module):
    """``nonzero`` makes an unbacked row count used by later operators."""

    def forward(self, x):
        idx = torch.nonzero(x > 0)
        rows = idx.shape[0]
        torch._check(rows <= 8)
        return idx.float().sum(0) + rows, torch.zeros(rows, 2)


class ItemInBranch(torch.nn.Module):
    """An unbacked value decides a torch.cond and sizes its result."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= 6)
        y = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
        return y.sum() * torch.ones(k)


CASES = {
    "item": (ItemSized(), (torch.randn(4, 3), torch.tensor(5)),
             [(torch.randn(4, 3), torch.tensor(v)) for v in (2, 7, 10)],
             [(torch.randn(4, 3), torch.tensor(v)) for v in (1, 11)]),
    "nonzero": (NonzeroRows(), (torch.tensor([1.0, -1.0, 2.0, 3.0] + [-1.0] * 6),),
                [(torch.tensor(v),) for v in ([1.0, -1.0, 2.0, 3.0] + [-1.0] * 6, [-1.0] * 10,
                                              [1.0] * 8 + [-1.0] * 2)],
                [(torch.ones(10),)]),
    "item-and-cond": (ItemInBranch(), (torch.randn(3), torch.tensor(3)),
                      [(torch.randn(3).abs(), torch.tensor(1)), (-torch.randn(3).abs(), torch.tensor(6))],
                      [(torch.randn(3), torch.tensor(0)), (torch.randn(3), torch.tensor(7))]),
}


def _stages(ep):
    decomposed = ep.run_decompositions()
    return {"exported": ep, "decomposed": decomposed, "loaded": save_load(ep),
            "decomposed then loaded": save_load(decomposed)}


def _unbacked_symbols(ep) -> set[str]:
    found = set()
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            values = val if isinstance(val, (tuple, list)) else [val]
            for v in values:
                sizes = list(v.shape) if isinstance(v, torch.Tensor) else [v]
                for s in sizes:
                    if isinstance(s, torch.SymInt):
                        found |= {str(sym) for sym in s.node.expr.free_symbols if str(sym).startswith("u")}
    return found


def _asserts(ep) -> int:
    return sum(1 for gm in ep.graph_module.modules() if isinstance(gm, torch.fx.GraphModule)
               for n in gm.graph.nodes if n.op == "call_function" and n.target in ASSERTS)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model, example, good, bad = CASES[request.param]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, example)
    return model, ep, good, bad


def test_every_stage_keeps_ranges_of_its_unbacked_symbols(case):
    _, ep, _, _ = case
    for stage, program in _stages(ep).items():
        assert ir_checks.violations(program) == [], stage
        symbols = _unbacked_symbols(program)
        assert symbols, f"{stage}: no unbacked symbol left"
        ranged = {str(s) for s in program.range_constraints}
        assert symbols <= ranged, f"{stage}: {symbols - ranged} have no range"
        for sym, vr in program.range_constraints.items():
            if str(sym) in symbols:
                assert vr.lower >= 0, f"{stage}: {sym} range {vr}"


def test_every_stage_keeps_its_runtime_asserts(case):
    _, ep, _, _ = case
    expected = _asserts(ep)
    assert expected > 0
    for stage, program in _stages(ep).items():
        assert _asserts(program) >= 1, stage


def test_every_stage_matches_eager_on_good_data(case):
    model, ep, good, _ = case
    for stage, program in _stages(ep).items():
        runnable = program.module()
        for args in good:
            with torch.no_grad():
                assert_same_outputs(model(*args), runnable(*args)), stage


def test_every_stage_refuses_data_that_breaks_a_check(case):
    _, ep, _, bad = case
    for program in _stages(ep).values():
        runnable = program.module()
        for args in bad:
            with pytest.raises((RuntimeError, AssertionError)):
                runnable(*args)


def test_symbol_ranges_are_the_checked_bounds():
    model, example, _, _ = CASES["item"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(model, example)
    for stage, program in _stages(ep).items():
        bounds = {(int(vr.lower), int(vr.upper)) for sym, vr in program.range_constraints.items()
                  if str(sym).startswith("u")}
        assert (2, 10) in bounds, f"{stage}: {program.range_constraints}"
