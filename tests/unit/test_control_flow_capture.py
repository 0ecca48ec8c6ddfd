"""graphcap captures control flow itself: what that changes for the user and for the process.

* Values a branch closes over become operands: tensors (and their shape
  guards are scoped to the branch like an operand's) and symbolic ints.
* Nothing of torch is patched and nothing is compiled: a ``torch.compile``'d
  function, and eager ``torch.cond`` (which torch compiles internally), are
  not recompiled because graphcap exported a program with control flow, and
  the torch functions graphcap used to wrap are the same objects afterwards.
"""
from __future__ import annotations

import sys
import warnings

import pytest
import torch
from functorch.experimental.control_flow import map as ft_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import graphcap
from conftest import assert_same_outputs


def _export(model, args, dynamic_shapes=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, args, dynamic_shapes=dynamic_shapes)


def _range(ep):
    (vr,) = ep.range_constraints.values()
    return vr.lower, vr.upper


class SlicesClosedOver(torch.nn.Module):
    """The true branch (y longer than 4) slices ``y``, which it does not receive as an operand."""

    def forward(self, x, y):
        return torch.cond(y.shape[0] > 4, lambda x: x + y[:4].sum(0), lambda x: x * y.sum(0), (x,))


@pytest.mark.parametrize("example", [6, 3], ids=["example-takes-true", "example-takes-false"])
def test_guards_on_a_closed_over_tensor_are_scoped_to_the_branch(example):
    model = SlicesClosedOver()
    ep = _export(model, (torch.randn(3), torch.randn(example, 3)),
                 dynamic_shapes={"x": None, "y": {0: graphcap.Dim("b", min=2, max=20)}})
    assert _range(ep) == (2, 20)  # `y[:4]` asks b >= 4 only where b > 4
    cond = next(n for n in ep.graph_module.graph.nodes if n.target is torch.ops.higher_order.cond)
    assert [a.name for a in cond.args[3]] == ["y", "x"]  # the closed-over tensor is an operand
    for n in (2, 3, 4, 5, 20):
        x, y = torch.randn(3), torch.randn(n, 3)
        assert_same_outputs(model(x, y), ep.module()(x, y))


class ScalesByClosedOverSize(torch.nn.Module):
    def forward(self, x, y):
        n = y.shape[0]
        return torch.cond(x.sum() > 0, lambda x: x * n, lambda x: x + n, (x,))


def test_a_closed_over_symbolic_int_becomes_an_operand():
    model = ScalesByClosedOverSize()
    ep = _export(model, (torch.randn(3), torch.randn(5)),
                 dynamic_shapes={"x": None, "y": {0: graphcap.Dim("n", min=2, max=50)}})
    for x, n in ((torch.ones(3), 7), (-torch.ones(3), 9), (torch.ones(3), 2)):
        y = torch.randn(n)
        assert_same_outputs(model(x, y), ep.module()(x, y))


class ParameterInBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        h = x * 2
        return torch.cond(x.sum() > 0, lambda x: x + self.w + h, lambda x: x - h, (x,))


def test_closed_over_parameters_and_intermediates_are_operands(tmp_path):
    model = ParameterInBranch()
    ep = _export(model, (torch.randn(3),))
    for gm in ep.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            assert not [n for n in gm.graph.nodes if n.op == "get_attr"
                        and isinstance(getattr(gm, n.target), torch.Tensor)]
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    for x in (torch.ones(3), -torch.ones(3)):
        with torch.no_grad():
            assert_same_outputs(model(x), ep.module()(x))
            assert_same_outputs(model(x), ep.run_decompositions().module()(x))
            assert_same_outputs(model(x), loaded.module()(x))


class AllFour(torch.nn.Module):
    def forward(self, x, xs):
        y = torch.cond(x.shape[0] > 2, lambda x: x.sin(), lambda x: x.cos(), (x,))
        m = ft_map(lambda r: r * 2, xs)
        _, acc = while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + 1), (torch.tensor(0), x))
        carry, ys = scan(lambda c, r: (c + r, c * 2), torch.zeros(4), xs)
        return y, m, acc, carry, ys


def _graphs_compiled() -> int:
    """How many graphs dynamo has compiled in this process (every compile and recompile)."""
    import torch._dynamo.utils
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


class _Plain(torch.nn.Module):
    def forward(self, x):
        return x + 1


def test_compiled_functions_are_not_recompiled_after_an_export_with_control_flow():
    compiles = []

    def counting_backend(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    @torch.compile(backend=counting_backend)
    def compiled(x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)) + 1

    def eager_cond(x):  # torch compiles its control-flow wrapper internally
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x * 3, (x,))

    # graphcap's first export registers its own input container with torch's pytree once, which
    # dynamo's guards see (a matter of pytree registration, not of control flow): done first
    _export(_Plain(), (torch.randn(2),))
    x = torch.randn(4)
    args = (torch.ones(4), torch.ones(3, 4))
    expected = AllFour()(*args)  # eager control flow: torch compiles its wrappers here
    compiled(x), eager_cond(x)
    compiled(x), eager_cond(x), AllFour()(*args)  # warm: anything compiled is cached now
    before, graphs_before = len(compiles), _graphs_compiled()

    for dynamic in (None, {"x": {0: graphcap.Dim.AUTO}, "xs": {1: graphcap.Dim.AUTO}}):
        ep = _export(AllFour(), (torch.randn(4), torch.randn(3, 4)), dynamic_shapes=dynamic)
        assert_same_outputs(expected, ep.module()(*args))
    assert _graphs_compiled() == graphs_before  # the exports compiled nothing

    compiled(x), eager_cond(x), AllFour()(*args)
    assert len(compiles) == before  # no recompilation of the user's compiled function
    assert _graphs_compiled() == graphs_before  # nor of eager torch.cond's wrapper


def test_torch_functions_are_the_same_objects_after_export():
    import torch._dynamo.variables.higher_order_ops as dynamo_hops
    import torch._higher_order_ops.utils as hop_utils
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    cond_module = sys.modules["torch._higher_order_ops.cond"]
    cond_op = torch.ops.higher_order.cond

    def snapshot():
        return {
            "hop_compile_and_call": getattr(hop_utils, "_hop_compile_and_call", None),  # torch 2.12 on
            "maybe_compile_and_run_fn": hop_utils._maybe_compile_and_run_fn,
            "speculate_subgraph": dynamo_hops.speculate_subgraph,
            "CondHigherOrderVariable._call_function": dynamo_hops.CondHigherOrderVariable.__dict__["_call_function"],
            "trace_cond": cond_module.trace_cond,
            "cond fake kernel": cond_op.python_key_table[FakeTensorMode],
            "torch.cond": torch.cond,
            **{f"ShapeEnv.{name}": ShapeEnv.__dict__[name]
               for name in ("_update_var_to_range", "_set_replacement", "_maybe_guard_rel", "evaluate_expr")},
        }

    before = snapshot()
    dispatch_cache = dict(cond_op._dispatch_cache)
    _export(AllFour(), (torch.randn(4), torch.randn(3, 4)),
            dynamic_shapes={"x": {0: graphcap.Dim.AUTO}, "xs": {1: graphcap.Dim.AUTO}})
    after = snapshot()
    assert [k for k in before if before[k] is not after[k]] == []
    assert all(cond_op._dispatch_cache.get(k) is v for k, v in dispatch_cache.items())
    # graphcap's modes are gone from the mode stacks
    assert not torch._C._is_torch_function_mode_enabled()
    assert torch._C._len_torch_dispatch_stack() == 0


def test_exports_with_control_flow_from_two_threads_are_each_right():
    """graphcap's capture modes are per thread: another thread's export is not captured by
    this one's. (An eager torch.cond in another thread during an export is not covered: torch's
    make_fx keeps its current tracer in a process-wide variable that torch's cond consults.)"""
    import threading

    class Closure(torch.nn.Module):
        def forward(self, x):
            y = x * 3
            return torch.cond(x.sum() > 0, lambda x: x + y, lambda x: x - y, (x,))

    cases = [(SlicesClosedOver(), (torch.randn(3), torch.randn(6, 3)),
              {"x": None, "y": {0: graphcap.Dim("b", min=2, max=20)}}),
             (Closure(), (torch.randn(5),), None)]
    errors = []
    expected = {type(model): model(*args) for model, args, _ in cases}

    def run(model, args, dynamic):
        try:
            for _ in range(3):
                ep = _export(model, args, dynamic)
                assert_same_outputs(expected[type(model)], ep.module()(*args))
        except Exception as e:  # reported below, with the thread's case
            errors.append(f"{type(model).__name__}: {e!r}")

    threads = [threading.Thread(target=run, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
