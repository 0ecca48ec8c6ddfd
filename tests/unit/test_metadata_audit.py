"""Node metadata on real models (docs/torch-suite.md, "Node metadata on real models audit
(2026-11-27 late morning)"; probe: bench/probes/metadata_audit.py).

What consumers read from ``node.meta`` around control flow and in unflattened modules:

- a control-flow call's node and the ``getitem``s of its results name the operator the user
  called in ``torch_fn`` (``('cond_1', 'CondOp.cond')``, as torch.export writes it), and so in
  ``source_fn_stack``; they named whatever the branches' capture called last (``numel``,
  ``clone``, ``__get__``);
- a node a branch made inside a submodule lists its modules from the root, as a top-level node
  does: the call holding the ``torch.cond`` (``blk``), then what the branch called
  (``blk.inner``, ``blk.inner.l``), in both capture modes; non-strict dropped the outer modules,
  strict the inner ones (so pt2e's source partitions missed an ``nn.Linear`` in a branch);
- the copy run_decompositions makes of an output aliasing an input carries the value's ``custom``
  and ``torch_fn`` and its own ``tensor_meta``;
- the placeholders of control-flow subgraphs and grad/autocast regions, and the placeholders and
  state reads of an unflattened module, carry ``tensor_meta`` beside ``val``.
"""
from __future__ import annotations

import io

import torch
from torch import nn
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

import graphcap


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.other = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda y: self.inner(y) + 1, lambda y: self.other(y) - 1, (x,))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = Block()

    def forward(self, x):
        return self.blk(x) * 2


def _paths(node):
    return [path for path, _ in (node.meta.get("nn_module_stack") or {}).values()]


def _class_names(node):
    return [cls.rsplit(".", 1)[-1] if isinstance(cls, str) else cls.__name__
            for _, cls in (node.meta.get("nn_module_stack") or {}).values()]


def _ops(gm, name):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.name.startswith(name)]


# -- torch_fn and source_fn_stack of a control-flow call ------------------------------------------

def _hop_and_results(gm, op):
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is op]
    results = [u for c in calls for u in c.users if u.target.__name__ == "getitem"]
    return calls, results


def test_cond_node_and_its_results_name_torch_cond_in_both_modes():
    for strict in (False, True):
        ep = graphcap.export(Model(), (torch.randn(2, 4),), strict=strict)
        calls, results = _hop_and_results(ep.graph_module, torch.ops.higher_order.cond)
        assert len(calls) == 1 and results
        for node in (*calls, *results):
            assert node.meta["torch_fn"] == ("cond_1", "CondOp.cond"), (strict, node.name, node.meta["torch_fn"])
            assert node.meta["source_fn_stack"][-1][0] == "cond_1"


def test_two_conds_and_a_nested_one_are_counted_as_calls_of_cond():
    class TwoConds(nn.Module):
        def forward(self, x):
            def inner_true(y):
                return torch.cond(y.mean() > 0, lambda z: z.sin(), lambda z: z.cos(), (y,))

            a = torch.cond(x.sum() > 0, inner_true, lambda y: y - 1, (x,))
            return torch.cond(a.sum() > 1, lambda y: y * 2, lambda y: y / 2, (a,))

    ep = graphcap.export(TwoConds(), (torch.randn(3),))
    calls, results = _hop_and_results(ep.graph_module, torch.ops.higher_order.cond)
    assert [c.meta["torch_fn"][0] for c in calls] == ["cond_1", "cond_2"]
    assert {r.meta["torch_fn"] for r in results} == {("cond_1", "CondOp.cond"), ("cond_2", "CondOp.cond")}
    nested, _ = _hop_and_results(ep.graph_module.true_graph_0, torch.ops.higher_order.cond)
    assert len(nested) == 1 and nested[0].meta["torch_fn"][1] == "CondOp.cond"


def test_while_loop_map_and_scan_nodes_name_their_operator():
    from torch._higher_order_ops.map import map as control_map
    from torch._higher_order_ops.scan import scan
    from torch._higher_order_ops.while_loop import while_loop

    class Loops(nn.Module):
        def forward(self, x):
            mapped = control_map(lambda t: t.sin(), x)
            (counted,) = while_loop(lambda i: i.sum() < 10, lambda i: (i + 1,), (x.clone(),))
            carry, ys = scan(lambda c, y: (c + y, c * 2), x[0], x)
            return mapped, counted, carry, ys

    ep = graphcap.export(Loops(), (torch.randn(3, 2),))
    for op, name in ((torch.ops.higher_order.map_impl, "map_impl"),
                     (torch.ops.higher_order.while_loop, "while_loop"),
                     (torch.ops.higher_order.scan, "scan")):
        calls, results = _hop_and_results(ep.graph_module, op)
        assert len(calls) == 1 and results, name
        for node in (*calls, *results):
            fn_name, called = node.meta["torch_fn"]
            assert fn_name == f"{name}_1" and called.endswith(f".{name}"), (name, node.meta["torch_fn"])


def test_cond_torch_fn_survives_decomposition_and_save_load():
    ep = graphcap.export(Model(), (torch.randn(2, 4),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    for derived in (ep.run_decompositions(), graphcap.load(buf)):
        calls, _ = _hop_and_results(derived.graph_module, torch.ops.higher_order.cond)
        assert [c.meta["torch_fn"] for c in calls] == [("cond_1", "CondOp.cond")]


# -- module stacks of branch nodes -----------------------------------------------------------------

def test_branch_nodes_list_their_modules_from_the_root_in_both_modes():
    for strict in (False, True):
        ep = graphcap.export(Model(), (torch.randn(2, 4),), strict=strict)
        gm = ep.graph_module
        (linear,) = _ops(gm.true_graph_0, "linear")
        (relu,) = _ops(gm.true_graph_0, "relu")
        (add,) = _ops(gm.true_graph_0, "add")
        (other,) = _ops(gm.false_graph_0, "linear")
        assert _paths(linear) == ["", "blk", "blk.inner", "blk.inner.lin"], strict
        assert _class_names(linear) == ["Model", "Block", "Inner", "Linear"], strict
        assert _paths(relu) == ["", "blk", "blk.inner"], strict
        assert _paths(add) == ["", "blk"], strict
        assert _paths(other) == ["", "blk", "blk.other"], strict
        (cond,) = _ops(gm, "cond")
        # the branch nodes begin with the stack of the call that holds the branch, keys included
        assert list(linear.meta["nn_module_stack"])[:2] == list(cond.meta["nn_module_stack"])


def test_a_cond_in_a_branch_nests_its_modules_under_the_outer_call():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blk = Block()

        def forward(self, x):
            return torch.cond(x.mean() > 0, lambda y: self.blk(y), lambda y: y.neg(), (x,))

    for strict in (False, True):
        ep = graphcap.export(Outer(), (torch.randn(2, 4),), strict=strict)
        inner_branch = ep.graph_module.true_graph_0.true_graph_0
        (linear,) = _ops(inner_branch, "linear")
        assert _paths(linear) == ["", "blk", "blk.inner", "blk.inner.lin"], strict
        (neg,) = _ops(ep.graph_module.false_graph_0, "neg")
        assert _paths(neg) == [""], strict


def test_a_module_called_twice_in_a_branch_has_one_key_per_call_in_both_modes():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda y: self.inner(self.inner(y)), lambda y: y.cos(), (x,))

    keys = {}
    for strict in (False, True):
        ep = graphcap.export(Twice(), (torch.randn(2, 4),), strict=strict)
        linears = _ops(ep.graph_module.true_graph_0, "linear")
        keys[strict] = [list(n.meta["nn_module_stack"]) for n in linears]
        assert [_paths(n) for n in linears] == [["", "inner", "inner.lin"]] * 2, strict
    assert keys[False] == keys[True] == [["L__self__", "L__self__inner", "L__self__inner.lin"],
                                         ["L__self__", "L__self__inner@1", "L__self__inner.lin@1"]]


def test_source_partitions_find_a_linear_inside_a_branch_in_both_modes():
    for strict in (False, True):
        ep = graphcap.export(Model(), (torch.randn(2, 4),), strict=strict)
        for branch in ("true_graph_0", "false_graph_0"):
            graph = getattr(ep.graph_module, branch).graph
            partitions = get_source_partitions(graph, [torch.nn.Linear])
            assert len(partitions.get(torch.nn.Linear, [])) == 1, (strict, branch)


def test_branch_module_stacks_survive_decomposition_and_save_load():
    ep = graphcap.export(Model(), (torch.randn(2, 4),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    for derived in (ep.run_decompositions(), graphcap.load(buf)):
        branch = derived.graph_module.true_graph_0
        deepest = max((_paths(n) for n in branch.graph.nodes if n.op == "call_function"), key=len)
        assert deepest == ["", "blk", "blk.inner", "blk.inner.lin"]


def test_a_module_passed_in_as_the_branch_keeps_its_path():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Inner()
            self.b = Inner()

        def forward(self, x):
            return torch.cond(x.sum() > 0, self.a, self.b, (x,))

    for strict in (False, True):
        ep = graphcap.export(Holder(), (torch.randn(2, 4),), strict=strict)
        (lin_a,) = _ops(ep.graph_module.true_graph_0, "linear")
        (lin_b,) = _ops(ep.graph_module.false_graph_0, "linear")
        assert _paths(lin_a)[0] == "" and _paths(lin_a)[-1] == "a.lin", (strict, _paths(lin_a))
        assert _paths(lin_b)[0] == "" and _paths(lin_b)[-1] == "b.lin", (strict, _paths(lin_b))


# -- unflatten -------------------------------------------------------------------------------------

def test_unflattened_placeholders_and_state_reads_carry_tensor_meta():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
            self.register_buffer("scale", torch.ones(2))

        def forward(self, x):
            return self.layers(x) * self.scale

    ep = graphcap.export(Net(), (torch.randn(3, 4),))
    unflat = graphcap.unflatten(ep)
    checked = 0
    for _, sub in unflat.named_modules():
        graph = getattr(sub, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr") and isinstance(node.meta.get("val"), torch.Tensor):
                meta = node.meta.get("tensor_meta")
                assert meta is not None, (node.op, node.name)
                assert tuple(meta.shape) == tuple(node.meta["val"].shape)
                checked += 1
    assert checked >= 4
    torch.testing.assert_close(unflat(torch.ones(3, 4)), ep.module()(torch.ones(3, 4)))


def test_subgraph_placeholders_carry_tensor_meta_in_branches_and_regions():
    class Regions(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                y = self.lin(x)
            return torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: self.lin(t), (y,))

    for strict in (False, True):
        ep = graphcap.export(Regions(), (torch.randn(2, 4),), strict=strict)
        seen = 0
        for name, sub in ep.graph_module.named_modules():
            if not name or not isinstance(sub, torch.fx.GraphModule):
                continue
            for node in sub.graph.nodes:
                if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor):
                    assert tuple(node.meta["tensor_meta"].shape) == tuple(node.meta["val"].shape), (strict, name)
                    assert node.meta["tensor_meta"].dtype == node.meta["val"].dtype
                    seen += 1
        assert seen >= 3, strict


def test_the_copy_of_an_aliased_output_carries_the_metadata_of_the_value_it_copies():
    import torch.fx.traceback as fx_traceback

    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            with fx_traceback.annotate({"stage": 2}):
                flat = x.view(-1)
            return flat, self.lin(x).t()

    with fx_traceback.preserve_node_meta():
        ep = graphcap.export(Views(), (torch.randn(2, 3),))
    decomposed = ep.run_decompositions()
    out = decomposed.graph.output_node().args[0]
    copy_node = out[0]
    assert copy_node.target is torch.ops.aten.clone.default
    viewed = copy_node.args[0]
    assert copy_node.meta["custom"] == {"stage": 2} == viewed.meta["custom"]
    assert copy_node.meta["torch_fn"] == viewed.meta["torch_fn"]
    assert tuple(copy_node.meta["tensor_meta"].shape) == (6,)
    for node in decomposed.graph.nodes:
        if node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor):
            assert "tensor_meta" in node.meta, node.name
    buf = io.BytesIO()
    graphcap.save(decomposed, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    assert loaded.graph.output_node().args[0][0].meta["custom"] == {"stage": 2}
