"""Control-flow operands nested in dicts, lists and tuples, as torch.export takes them.

The operators take flat operands; the structure is flattened before the operator
and rebuilt for the branches (``torch.cond``: graphcap at the ``torch.cond`` entry,
see graphcap.torch_private.cond_entry; ``map``, ``while_loop``, ``scan``: their
public entries). The program must give eager's result for every size, also after
save/load and run_decompositions, and leave ``torch.cond`` as it found it.
"""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch._higher_order_ops.map import map as cf_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import graphcap
from conftest import TORCH_LINE, assert_same_outputs, save_load

hop = torch.ops.higher_order


class NestedCond(torch.nn.Module):
    """Operands in a dict holding a list; a tuple output; the predicate on a dynamic size."""

    def forward(self, x, y):
        def big(d):
            return d["a"].sin() + d["b"][0], (d["b"][1] * 2,)

        def small(d):
            return d["a"].cos() - d["b"][1], (d["b"][0] + 1,)

        return torch.cond(x.shape[0] > 4, big, small, ({"a": x, "b": [y, y * 3]},))


class NestedCondOnData(torch.nn.Module):
    """A data-dependent predicate and two top-level operands, one of them a tuple."""

    def forward(self, x, y):
        def t(a, pair):
            return a * pair[0] + pair[1]

        def f(a, pair):
            return a - pair[0] * pair[1]

        return torch.cond(x.sum() > 0, t, f, (x, (y, y.exp())))


class NestedMap(torch.nn.Module):
    def forward(self, xs, y):
        def body(d, extra):
            return {"o": d["a"] * extra["k"][0] + d["b"]}

        return cf_map(body, {"a": xs, "b": xs + 1}, {"k": [y]})


class NestedWhile(torch.nn.Module):
    def forward(self, x, y):
        def go_on(i, state):
            return i < 3

        def body(i, state):
            return i + 1, {"a": state["a"] + state["b"][0], "b": (state["b"][0] * 2,)}

        return while_loop(go_on, body, (torch.tensor(0), {"a": x, "b": (y,)}))


class NestedScan(torch.nn.Module):
    def forward(self, init, xs):
        def step(carry, x):
            new = {"s": carry["s"] + x["v"][0]}
            return new, {"y": new["s"].clone()}

        return scan(step, {"s": init}, {"v": [xs]})


def _export(model, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "fake tensors still alive" either
        # torch 2.10's own torch.cond / map / while_loop / scan warn under any export (torch.export's
        # too): they compile the operator's wrapper while is_exporting() is True
        warnings.filterwarnings("ignore", message="You are calling torch.compile inside torch.export region")
        return graphcap.export(model, args, **kw)


def _stages(ep):
    return {"exported": ep, "decomposed": ep.run_decompositions(), "loaded": save_load(ep),
            "decomposed and loaded": save_load(ep.run_decompositions())}


def _check_everywhere(model, ep, inputs_list):
    for stage, program in _stages(ep).items():
        assert graphcap.ir_checks.violations(program) == [], stage
        for inputs in inputs_list:
            with torch.no_grad():
                assert_same_outputs(model(*inputs), program.module()(*inputs))


def test_cond_with_nested_operands_matches_eager_for_every_size_and_stage():
    m = NestedCond()
    n = graphcap.Dim("n", min=2, max=16)
    ep = _export(m, (torch.randn(6, 3), torch.randn(6, 3)), dynamic_shapes=({0: n}, {0: n}))
    (node,) = [nd for nd in ep.graph.nodes if nd.target is hop.cond]
    assert len(node.args[3]) == 3  # one operand per tensor: x, y, y * 3
    true_inputs = [nd for nd in ep.graph_module.true_graph_0.graph.nodes if nd.op == "placeholder"]
    assert len(true_inputs) == 3
    _check_everywhere(m, ep, [(torch.randn(s, 3), torch.randn(s, 3)) for s in (2, 4, 5, 6, 16)])


def test_cond_with_nested_operands_on_data_takes_both_branches():
    m = NestedCondOnData()
    ep = _export(m, (torch.randn(4), torch.randn(4)))
    x = torch.randn(4)
    _check_everywhere(m, ep, [(x.abs() + 1, torch.randn(4)), (-x.abs() - 1, torch.randn(4))])


@pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11 "
                    "(torch 2.10 refuses it: tests/unit/test_map_dynamic_dim_release.py)")
def test_map_with_nested_operands():
    m = NestedMap()
    k = graphcap.Dim("k", min=1, max=10)
    ep = _export(m, (torch.randn(4, 3), torch.randn(3)), dynamic_shapes=({0: k}, None))
    _check_everywhere(m, ep, [(torch.randn(s, 3), torch.randn(3)) for s in (1, 4, 7)])


def test_while_loop_with_nested_carried_values_returns_them_as_given():
    m = NestedWhile()
    n = graphcap.Dim("n", min=2, max=10)
    ep = _export(m, (torch.randn(3), torch.randn(3)), dynamic_shapes=({0: n}, {0: n}))
    out = ep.module()(torch.randn(5), torch.randn(5))
    assert isinstance(out, tuple) and isinstance(out[1], dict) and isinstance(out[1]["b"], tuple)
    _check_everywhere(m, ep, [(torch.randn(s), torch.randn(s)) for s in (2, 5, 10)])


def test_scan_with_nested_carry_and_inputs():
    m = NestedScan()
    n = graphcap.Dim("n", min=2, max=12)
    ep = _export(m, (torch.randn(3), torch.randn(5, 3)), dynamic_shapes=(None, {0: n}))
    _check_everywhere(m, ep, [(torch.randn(3), torch.randn(s, 3)) for s in (2, 5, 12)])


def test_nested_operands_inside_a_branch():
    class M(torch.nn.Module):
        def forward(self, x):
            def outer_true(a):
                return torch.cond(a.sum() > 1, lambda d: d["v"] * 2, lambda d: d["v"] - 2, ({"v": a},))

            return torch.cond(x.sum() > 0, outer_true, lambda a: a.cos(), (x,))

    m = M()
    ep = _export(m, (torch.randn(3),))
    _check_everywhere(m, ep, [(torch.full((3,), v),) for v in (-1.0, 0.2, 2.0)])


def test_torch_cond_is_torchs_own_after_export_and_after_a_failed_export():
    before = torch.cond
    _export(NestedCondOnData(), (torch.randn(4), torch.randn(4)))
    assert torch.cond is before

    class Fails(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda d: d["a"], lambda d: d["a"] + 1, ({"a": x},))

    with pytest.raises(graphcap.GraphcapError):  # a branch returning its operand
        _export(Fails(), (torch.randn(3),))
    assert torch.cond is before
    # eager torch.cond with nested operands is torch's business, unchanged
    x = torch.randn(3)
    torch.testing.assert_close(torch.cond(x.sum() > 0, lambda d: d["a"] * 2, lambda d: d["a"] * 3, ({"a": x},)),
                               x * (2 if x.sum() > 0 else 3))


def test_nested_operands_from_two_threads_at_once():
    models = [NestedCond(), NestedCondOnData()]
    inputs = [(torch.randn(6, 3), torch.randn(6, 3)), (torch.randn(4), torch.randn(4))]
    results, errors = {}, []

    def run(i):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results[i] = graphcap.export(models[i], inputs[i])
        except Exception as e:  # reported below
            errors.append(e)

    before = torch.cond
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert torch.cond is before
    for i, ep in results.items():
        assert_same_outputs(models[i](*inputs[i]), ep.module()(*inputs[i]))


def test_a_compiled_function_with_nested_cond_is_not_recompiled_after_such_an_export():
    import torch._dynamo

    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    @torch.compile(backend=backend)
    def f(x):
        return torch.cond(x.sum() > 0, lambda d: d["a"] * 2, lambda d: d["a"] - 1, ({"a": x},))

    x = torch.randn(3)
    try:
        f(x)
        before = len(compiles)
        _export(NestedCondOnData(), (torch.randn(4), torch.randn(4)))
        torch.testing.assert_close(f(x), x * 2 if x.sum() > 0 else x - 1)
        assert len(compiles) == before
    finally:
        torch._dynamo.reset()
