"""Control-flow operators and grad / autocast regions, exported and run against eager.

cond / map / while_loop / scan become higher-order-operator nodes with
subgraph submodules; no_grad / enable_grad / set_grad_enabled and autocast
blocks become ``wrap_with_set_grad_enabled`` / ``wrap_with_autocast`` calls.
Every test runs the exported program on inputs that take the paths the
example did not, and compares with eager.
"""
from __future__ import annotations

import copy
import operator
import warnings

import pytest
import torch
from functorch.experimental.control_flow import cond as ft_cond
from functorch.experimental.control_flow import map as ft_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import graphcap
from conftest import TORCH_LINE, assert_same_outputs

hop = torch.ops.higher_order


def _export(model, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, args, **kw)


def _hop_nodes(gm, name):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is getattr(hop, name)]


def _check(model, ep, *inputs_list):
    for inputs in inputs_list:
        with torch.no_grad():
            assert_same_outputs(model(*inputs), ep.module()(*inputs))


# -- cond -------------------------------------------------------------------

class CondOnData(torch.nn.Module):
    """Predicate on tensor data; branches close over a parameter, a buffer and a local tensor."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.arange(4.0))

    def forward(self, x):
        scale = x.abs().mean()

        def big(x):
            return self.lin(x) * scale + self.shift

        def small(x):
            return x.cos() - self.shift

        return torch.cond(x.sum() > 0, big, small, (x,))


def test_cond_data_dependent_predicate_takes_both_branches_at_run_time():
    m = CondOnData()
    x = torch.randn(2, 4).abs()
    ep = _export(m, (x,))
    (node,) = _hop_nodes(ep.graph_module, "cond")
    true_gm, false_gm = ep.graph_module.true_graph_0, ep.graph_module.false_graph_0
    assert isinstance(true_gm, torch.fx.GraphModule) and isinstance(false_gm, torch.fx.GraphModule)
    # closed-over tensors are lifted into operands; subgraph inputs are named after them
    operand_names = [a.name for a in node.args[3]]
    assert {"p_lin_weight", "p_lin_bias", "b_shift", "x"} <= set(operand_names)
    assert [n.name for n in true_gm.graph.nodes if n.op == "placeholder"] == operand_names
    assert [n.name for n in false_gm.graph.nodes if n.op == "placeholder"] == operand_names
    assert any(n.target is torch.ops.aten.linear.default for n in true_gm.graph.nodes)
    _check(m, ep, (x,), (-x,), (torch.randn(2, 4),))
    # metadata: the call points at the user's line, not at code torch generated
    assert "test_control_flow.py" in node.meta["stack_trace"]
    assert "<eval_with_key>" not in node.meta["stack_trace"]
    for n in true_gm.graph.nodes:
        if n.op == "call_function":
            assert "<eval_with_key>" not in n.meta.get("stack_trace", "")
            assert "val" in n.meta


def test_cond_from_functorch_and_python_bool_predicate():
    class M(torch.nn.Module):
        def forward(self, x, flag: bool):
            y = ft_cond(x.max() > 0.5, lambda x: x * 2, lambda x: x / 2, (x,))
            # a Python bool predicate specializes, as torch.export does
            return torch.cond(flag, lambda y: y + 1, lambda y: y - 1, (y,))

    m = M()
    x = torch.rand(5)
    ep = _export(m, (x, True))
    assert len(_hop_nodes(ep.graph_module, "cond")) == 1
    _check(m, ep, (x, True), (x * 0.1, True))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(x, False)


def test_cond_pytree_outputs():
    class M(torch.nn.Module):
        def forward(self, x, y):
            def t(a, b):
                return {"sum": a + b, "pair": (a * 2, b * 1)}
            def f(a, b):
                return {"sum": a - b, "pair": (a * 3, b + 1)}
            return torch.cond(y.sum() > 0, t, f, (x, y))

    m = M()
    x, y = torch.randn(3), torch.randn(3)
    ep = _export(m, (x, y))
    _check(m, ep, (x, y.abs()), (x, -y.abs()))


def test_cond_bound_before_export_with_container_operands_is_refused_with_the_fix():
    """torch's cond takes a flat tuple of tensors unless dynamo compiles it (dynamo flattens
    containers); graphcap flattens them at the `torch.cond` entry (tests/unit/test_nested_operands.py),
    so a `cond` bound under another name before the export is refused, saying how to call it."""
    from functorch.experimental.control_flow import cond

    class M(torch.nn.Module):
        def forward(self, x, y):
            def t(ops):
                return ops["a"] + ops["b"][0]
            return cond(y.sum() > 0, t, t, ({"a": x, "b": [y]},))

    with pytest.raises(graphcap.UnsupportedError,
                       match=r"(?s)operands hold a container.*torch\.cond\(.*one by one") as info:
        _export(M(), (torch.randn(3), torch.randn(3)))
    assert "test_control_flow.py" in str(info.value)


def test_cond_on_dynamic_dim_stays_dynamic():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.shape[0] > 4, lambda x: x[:4].sum(0) * 2, lambda x: x.sum(0), (x,))

    m = M()
    b = graphcap.Dim("b", min=2, max=32)
    ep = _export(m, (torch.randn(6, 3),), dynamic_shapes={"x": {0: b}})
    (node,) = _hop_nodes(ep.graph_module, "cond")
    pred = node.args[0]
    assert isinstance(pred, torch.fx.Node) and isinstance(pred.meta["val"], torch.SymBool)
    assert len(ep.range_constraints) == 1
    (vr,) = ep.range_constraints.values()
    assert (vr.lower, vr.upper) == (2, 32)  # not specialized to the branch of the example
    _check(m, ep, *[(torch.randn(n, 3),) for n in (2, 4, 5, 6, 32)])


def test_cond_nested_in_cond_and_in_map():
    class M(torch.nn.Module):
        def forward(self, x, xs):
            def inner(x):
                return torch.cond(x.mean() > 0.5, lambda x: x * 2, lambda x: x / 2, (x,))
            y = torch.cond(x.sum() > 0, inner, lambda x: x - 1, (x,))
            z = ft_map(lambda r, y: torch.cond(r.sum() > 0, lambda r: r + y, lambda r: r - y, (r,)), xs, y)
            return y, z

    m = M()
    x, xs = torch.rand(3), torch.randn(4, 3)
    ep = _export(m, (x, xs))
    assert _hop_nodes(ep.graph_module.true_graph_0, "cond")  # the inner cond is a subgraph of a subgraph
    assert _hop_nodes(ep.graph_module.body_graph_0, "cond")
    _check(m, ep, (x, xs), (x * 0.2, xs), (-x, -xs))


def test_tensor_constants_made_inside_branches_are_lifted():
    class M(torch.nn.Module):
        def forward(self, x):
            def t(x):
                return x + torch.tensor([1.0, 2.0, 3.0])
            def f(x):
                return x * torch.tensor([4.0, 5.0, 6.0])
            return torch.cond(x.sum() > 0, t, f, (x,))

    m = M()
    ep = _export(m, (torch.ones(3),))
    kinds = [s.kind for s in ep.graph_signature.input_specs]
    assert kinds.count(graphcap.InputKind.CONSTANT_TENSOR) == 2
    for gm in ep.graph_module.modules():
        for n in gm.graph.nodes if isinstance(gm, torch.fx.GraphModule) else ():
            if n.op == "get_attr":
                assert isinstance(getattr(gm, n.target), torch.fx.GraphModule), n.target
    _check(m, ep, (torch.ones(3),), (-torch.ones(3),))


@pytest.mark.parametrize("true_fn, false_fn, pattern", [
    (lambda x: x.sum(0), lambda x: x * 2,
     r"the output differs between the branches \(rank 1 vs 2\).*shape \[4\].*shape \[3, 4\]"),
    (lambda x: (x * 2).int(), lambda x: x * 2, r"dtype torch.int32 vs torch.float32"),
    (lambda x: (x + 1, x - 1), lambda x: x * 2, r"different structures.*tuple of 2.*single tensor"),
    (lambda x: (x + 1, x.sum(1)), lambda x: (x * 2, x * 3),
     r"output\[1\] differs between the branches \(rank 1 vs 2\)"),
    (lambda x: x + 1, lambda x: x, r"(?s)the output of the false branch is one of its operands.*clone"),
    (lambda x: x @ torch.ones(5, 5), lambda x: x * 2, r"the true branch raised RuntimeError: .*reduction dim"),
], ids=["shape", "dtype", "structure", "second-output", "alias", "branch-raises"])
def test_branch_mismatch_says_which_output_and_how(true_fn, false_fn, pattern):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))

    with pytest.raises(graphcap.UnsupportedError, match=pattern) as info:
        _export(M(), (torch.randn(3, 4),))
    assert "test_control_flow.py" in str(info.value)  # where: the user's torch.cond line


# -- map, while_loop, scan ----------------------------------------------------

@pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11 "
                    "(torch 2.10 refuses it: tests/unit/test_map_dynamic_dim_release.py)")
def test_map_over_dynamic_leading_dim():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, xs, y):
            return ft_map(lambda x, y: x * y + self.w, xs, y)

    m = M()
    n = graphcap.Dim("n", min=2, max=64)
    ep = _export(m, (torch.randn(4, 3), torch.randn(3)), dynamic_shapes={"xs": {0: n}, "y": None})
    (node,) = _hop_nodes(ep.graph_module, "map_impl")
    body = ep.graph_module.body_graph_0
    assert [p.name for p in body.graph.nodes if p.op == "placeholder"] == ["xs", "y", "p_w"]
    _check(m, ep, *[(torch.randn(k, 3), torch.randn(3)) for k in (2, 4, 9, 64)])


@pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11 "
                    "(torch 2.10 refuses it: tests/unit/test_map_dynamic_dim_release.py)")
def test_an_earlier_map_of_other_sizes_does_not_change_the_program():
    """dynamo remembers sizes seen by torch's map wrapper ("automatic dynamic"); left in
    place, a map exported after one of other sizes got extra unused body inputs."""
    class Earlier(torch.nn.Module):
        def forward(self, xs):
            return ft_map(lambda x: x.sum(0) * 2, xs)

    class M(torch.nn.Module):
        def forward(self, xs, y):
            return ft_map(lambda x, y: x * y, xs, y)

    _export(Earlier(), (torch.randn(2, 6, 3),), dynamic_shapes={"xs": {1: graphcap.Dim("b", min=2, max=20)}})
    ep = _export(M(), (torch.randn(4, 3), torch.randn(3)),
                 dynamic_shapes={"xs": {0: graphcap.Dim("n", min=2, max=64)}, "y": None})
    body = ep.graph_module.body_graph_0
    assert [p.name for p in body.graph.nodes if p.op == "placeholder"] == ["xs", "y"]


def test_while_loop_runs_a_data_dependent_number_of_steps():
    class M(torch.nn.Module):
        def forward(self, n, x):
            def cond_fn(i, x):
                return i < n

            def body_fn(i, x):
                return i + 1, x * 2 + 1

            return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))

    m = M()
    ep = _export(m, (torch.tensor(3), torch.randn(3)))
    (node,) = _hop_nodes(ep.graph_module, "while_loop")
    assert ep.graph_module.while_loop_cond_graph_0 is not None
    _check(m, ep, *[(torch.tensor(k), torch.randn(3)) for k in (0, 1, 3, 7)])


def test_while_loop_body_that_changes_a_carried_shape_is_explained():
    class M(torch.nn.Module):
        def forward(self, n, x):
            return while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x.sum(0)),
                              (torch.zeros((), dtype=torch.int64), x))

    with pytest.raises(graphcap.UnsupportedError,
                       match=r"(?s)while_loop could not be captured: carried value \[1\].*rank 2 vs 1"):
        _export(M(), (torch.tensor(3), torch.randn(3, 2)))


def test_branch_with_a_python_side_effect_is_explained():
    class M(torch.nn.Module):
        def forward(self, x):
            def t(x):
                self.last = x  # a write outside the branch: cannot be part of a subgraph
                return x * 2
            return torch.cond(x.sum() > 0, t, lambda x: x + 1, (x,))

    with pytest.raises(graphcap.UnsupportedError, match=r"(?s)torch.cond could not be captured.*side effect"):
        _export(M(), (torch.randn(3),))


def test_scan_carries_state():
    class M(torch.nn.Module):
        def forward(self, init, xs):
            def combine(carry, x):
                nxt = carry * 0.5 + x
                return nxt, nxt.sum()
            return scan(combine, init, xs)

    m = M()
    ep = _export(m, (torch.zeros(3), torch.randn(5, 3)))
    assert _hop_nodes(ep.graph_module, "scan")
    _check(m, ep, (torch.zeros(3), torch.randn(5, 3)), (torch.ones(3), torch.randn(5, 3)))


# -- grad and autocast regions ------------------------------------------------

class GradRegions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        a = self.lin(x)
        with torch.no_grad():
            frozen = a * 2
        with torch.set_grad_enabled(False):
            also_frozen = a + 1
        return a + frozen, frozen, also_frozen


def test_no_grad_region_is_kept_and_runs_as_eager():
    m = GradRegions()
    x = torch.randn(2, 3)
    ep = _export(m, (x,))
    gm = ep.graph_module
    calls = _hop_nodes(gm, "wrap_with_set_grad_enabled")
    assert len(calls) == 2 and all(c.args[0] is False for c in calls)
    assert not any(n.target is torch._C._set_grad_enabled for n in gm.graph.nodes)
    assert isinstance(getattr(gm, calls[0].args[1].target), torch.fx.GraphModule)
    # region outputs keep the names of the values they stand for
    assert {n.name for n in gm.graph.nodes} >= {"mul", "add"}

    got, expected = ep.module()(x), m(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in expected] == [True, False, False]
    assert_same_outputs(expected, got)
    # the region restores the caller's mode: a no_grad caller stays in no_grad
    with torch.no_grad():
        got = ep.module()(x)
        assert not torch.is_grad_enabled()
    assert not any(t.requires_grad for t in got)
    assert torch.is_grad_enabled()


def test_buffer_update_inside_no_grad_is_a_mutation_output_after_decomposition():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ema", torch.zeros(3))

        def forward(self, x):
            with torch.no_grad():
                self.ema.mul_(0.9).add_(x.mean(0) * 0.1)
            return x - self.ema

    m = M()
    x = torch.randn(4, 3)
    ep = _export(m, (x,))
    assert not ep.graph_signature.buffers_to_mutate  # training IR: the write is in the region's graph
    assert list(ep.run_decompositions().graph_signature.buffers_to_mutate.values()) == ["ema"]
    runnable = copy.deepcopy(ep.module())  # module() shares the model's buffers, as torch.export's does
    for _ in range(2):
        assert_same_outputs(m(x), runnable(x))
    assert_same_outputs(m.ema, runnable.ema)


def test_enable_grad_inside_and_grad_toggle_functions():
    class M(torch.nn.Module):
        def forward(self, x):
            torch.set_grad_enabled(False)
            y = x * 2
            torch.set_grad_enabled(True)
            with torch.enable_grad():
                z = x * 3
            return y, z

    m = M()
    x = torch.randn(3, requires_grad=True)
    ep = _export(m, (x,))
    assert len(_hop_nodes(ep.graph_module, "wrap_with_set_grad_enabled")) == 1
    got, expected = ep.module()(x), m(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in expected] == [False, True]
    assert torch.is_grad_enabled()


def test_autocast_region():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.lin(x)
                with torch.no_grad():
                    g = h.relu()
                with torch.autocast("cpu", enabled=False):
                    k = x @ x.T
            return h.float() + 1, g, k

    m = M()
    x = torch.randn(4, 8)
    ep = _export(m, (x,))
    (call,) = _hop_nodes(ep.graph_module, "wrap_with_autocast")
    assert call.args[:4] == ("cpu", torch.bfloat16, True, False)
    sub = getattr(ep.graph_module, call.args[4].target)
    inner = _hop_nodes(sub, "wrap_with_autocast")
    assert len(inner) == 1 and inner[0].args[2] is False  # the nested block, with autocast off
    assert len(_hop_nodes(sub, "wrap_with_set_grad_enabled")) == 1
    got, expected = ep.module()(x), m(x)
    assert [t.dtype for t in got] == [t.dtype for t in expected] == [torch.float32, torch.bfloat16, torch.float32]
    assert_same_outputs(expected, got, rtol=1e-2, atol=1e-2)
    assert not torch.is_autocast_enabled("cpu")


def test_region_inside_a_branch():
    class M(torch.nn.Module):
        def forward(self, x):
            def t(x):
                with torch.no_grad():
                    return x.sin()
            return torch.cond(x.sum() > 0, t, lambda x: x.cos(), (x,))

    m = M()
    x = torch.rand(3, requires_grad=True)
    ep = _export(m, (x,))
    assert _hop_nodes(ep.graph_module.true_graph_0, "wrap_with_set_grad_enabled")
    assert_same_outputs(m(x).detach(), ep.module()(x).detach())


# -- verifier -----------------------------------------------------------------

def test_verifier_checks_each_subgraph():
    m = CondOnData()
    ep = _export(m, (torch.randn(2, 4),))
    ep.validate()
    false_gm = ep.graph_module.false_graph_0
    ph = next(n for n in false_gm.graph.nodes if n.op == "placeholder" and not n.users)
    false_gm.graph.erase_node(ph)
    with pytest.raises(graphcap.VerificationError, match=r"subgraph-signatures.*false_graph_0 has \d+ inputs"):
        ep.validate()


def test_verifier_rejects_unknown_targets_inside_subgraphs():
    m = CondOnData()
    ep = _export(m, (torch.randn(2, 4),))
    node = next(n for n in ep.graph_module.true_graph_0.graph.nodes if n.op == "call_function")
    node.target = operator.matmul if node.target is not operator.matmul else operator.add
    with pytest.raises(graphcap.VerificationError, match="known-targets"):
        ep.validate()


# -- inference IR -------------------------------------------------------------

class EverythingAtOnce(torch.nn.Module):
    """cond (nested, with a branch constant), map, a no_grad buffer update and an autocast block."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        with torch.no_grad():
            self.calls.add_(1)

        def big(x):
            inner = torch.cond(x.mean() > 1, lambda x: x * 2, lambda x: x / 2, (x,))
            return torch.nn.functional.silu(self.lin(inner)) + torch.tensor([1.0, 2.0, 3.0])

        y = torch.cond(x.sum() > 0, big, lambda x: x.cos() * 2, (x,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.lin(y)
        return y, z.float(), ft_map(lambda r: r.relu() + 1, y)


def _all_ops(gm):
    for mod in gm.modules():
        if isinstance(mod, torch.fx.GraphModule):
            for n in mod.graph.nodes:
                if n.op == "call_function":
                    yield n.target


@pytest.mark.parametrize("case", ["everything", "while_loop", "scan", "dynamic_cond"])
def test_control_flow_survives_run_decompositions(case):
    if case == "everything":
        m, inputs = EverythingAtOnce(), [(torch.rand(2, 3),), (-torch.rand(2, 3),), (torch.rand(2, 3) + 1,)]
        ep = _export(m, inputs[0])
        hops_expected = {"cond", "map_impl"}
    elif case == "while_loop":
        class W(torch.nn.Module):
            def forward(self, n, x):
                return while_loop(lambda i, x: i < n, lambda i, x: (i + 1, torch.nn.functional.gelu(x)),
                                  (torch.zeros((), dtype=torch.int64), x))
        m, inputs = W(), [(torch.tensor(k), torch.randn(3)) for k in (0, 2, 5)]
        ep = _export(m, inputs[0])
        hops_expected = {"while_loop"}
    elif case == "scan":
        class S(torch.nn.Module):
            def forward(self, init, xs):
                return scan(lambda c, x: (torch.addcmul(c, x, x), (c * x).sum()), init, xs)
        m, inputs = S(), [(torch.zeros(3), torch.randn(4, 3)), (torch.ones(3), torch.randn(4, 3))]
        ep = _export(m, inputs[0])
        hops_expected = {"scan"}
    else:
        class D(torch.nn.Module):
            def forward(self, x):
                return torch.cond(x.shape[0] > 4, lambda x: torch.nn.functional.silu(x[:4]).sum(0),
                                  lambda x: x.sum(0), (x,))
        m, inputs = D(), [(torch.randn(k, 3),) for k in (2, 5, 9)]
        ep = _export(m, inputs[0], dynamic_shapes={"x": {0: graphcap.Dim("b", min=2, max=16)}})
        hops_expected = {"cond"}

    dec = ep.run_decompositions()
    dec.validate()
    ops = list(_all_ops(dec.graph_module))
    found = {t.name() for t in ops if isinstance(t, torch._ops.HigherOrderOperator)}
    assert hops_expected <= found
    # subgraphs are decomposed too: only core ATen operators anywhere (and runtime assertions,
    # which torch's core IR keeps too)
    asserts = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default}
    non_core = {str(t) for t in ops if isinstance(t, torch._ops.OpOverload) and torch.Tag.core not in t.tags
                and t not in asserts}
    assert not non_core, non_core
    for args in inputs:
        eager = copy.deepcopy(m)
        with torch.no_grad():
            assert_same_outputs(eager(*args), dec.module()(*args), rtol=1e-2, atol=1e-2)


# -- guards -------------------------------------------------------------------

class MapAdd(torch.nn.Module):
    def forward(self, xs, y):
        return ft_map(lambda x, y: x + y, xs, y)


@pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11 "
                    "(torch 2.10 refuses it: tests/unit/test_map_dynamic_dim_release.py)")
def test_earlier_runs_do_not_specialize_a_later_dynamic_export():
    """torch caches the compiled wrapper of each control-flow call; checking those
    cached guards against symbolic sizes must not add guards to a new export."""
    m = MapAdd()
    xs, y = torch.randn(3, 2), torch.randn(2)
    m(xs, y)  # eager
    _export(m, (xs, y))  # static export
    ep = _export(m, (xs, y), dynamic_shapes={"xs": {0: graphcap.Dim("n", min=2, max=64)}, "y": None})
    (vr,) = ep.range_constraints.values()
    assert (vr.lower, vr.upper) == (2, 64)
    _check(m, ep, (torch.randn(5, 2), y), (torch.randn(64, 2), y))


def test_shape_guard_inside_a_branch_is_checked_against_the_spec():
    """A Python branch on a dynamic size inside a cond branch specializes that branch.
    The guard (b <= 10) is needed only where the branch runs (b > 4), which still
    cuts 11..20 out of the spec: reported with a suggested fix. Guards a branch does
    not need outside its predicate are tested in test_branch_guards.py."""
    class M(torch.nn.Module):
        def forward(self, x):
            def t(x):
                if x.shape[0] > 10:
                    return x[:10].sum(0) * 2
                return x.sum(0) * 3
            return torch.cond(x.shape[0] > 4, t, lambda x: x.sum(0), (x,))

    with pytest.raises(graphcap.ConstraintViolationError, match=r"(?s)b.*Suggested fixes:.*max=10"):
        _export(M(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: graphcap.Dim("b", min=2, max=20)}})
    ep = _export(M(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: graphcap.Dim("b", min=2, max=10)}})
    _check(M(), ep, *[(torch.randn(k, 3),) for k in (2, 4, 5, 10)])
