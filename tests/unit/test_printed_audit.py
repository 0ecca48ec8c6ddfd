"""The printed program reads as torch.export's after ``run_decompositions()`` too: runtime asserts
keep their inserted names and each message names the node it checks, input size reads stay right
after the placeholders, and control-flow subgraphs keep the input names the exported program gave
them (bench/probes/printed_audit.py compares whole programs with torch's)."""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import graphcap

_ASSERT = torch.ops.aten._assert_scalar.default


def _asserts(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
            for n in sub.graph.nodes if n.op == "call_function" and n.target is _ASSERT]


def _check_asserts_read_as_inserted(gm: torch.fx.GraphModule) -> None:
    names = {n.name for n in gm.graph.nodes}
    for node in _asserts(gm):
        assert node.name == "_assert_scalar_default" or node.name.startswith("_assert_scalar_default_"), node.name
        condition = node.args[0].name
        assert condition in names
        assert node.args[1].endswith(f" on node '{condition}'"), (node.args[1], condition)


class TwoChecks(torch.nn.Module):
    def forward(self, n, x):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= 6)
        return x[:k] * 2, torch.zeros(k)


class SplitSizes(torch.nn.Module):
    def forward(self, sizes, x):
        a, b = sizes.tolist()
        torch._check(a >= 0)
        torch._check(b >= 0)
        torch._check(a + b == x.shape[0])
        return [t.cos() for t in x.split([a, b])]


class SizeRelation(torch.nn.Module):
    def forward(self, x, y):
        return x[: y.shape[0]] + y


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("case", ["two_checks", "split_sizes", "size_relation"])
def test_decomposed_asserts_keep_inserted_names_and_name_the_node_they_check(case, strict):
    model, args, spec, bad = {
        "two_checks": (TwoChecks(), (torch.tensor(3), torch.randn(8)), None, (torch.tensor(7), torch.randn(8))),
        "split_sizes": (SplitSizes(), (torch.tensor([2, 3]), torch.randn(5)), {"sizes": None, "x": {0: Dim("n")}},
                        (torch.tensor([2, 2]), torch.randn(5))),
        "size_relation": (SizeRelation(), (torch.randn(6, 2), torch.randn(3, 2)),
                          {"x": {0: Dim("a")}, "y": {0: Dim("b")}}, (torch.randn(2, 2), torch.randn(3, 2))),
    }[case]
    ep = graphcap.export(model, args, dynamic_shapes=spec, strict=strict)
    decomposed = ep.run_decompositions()
    for program in (ep, decomposed):
        _check_asserts_read_as_inserted(program.graph_module)
        assert "_assert_scalar_default" in program.graph_module.code
        torch.testing.assert_close(program.module()(*args), model(*args))
        with pytest.raises(Exception):  # noqa: B017 (the refusal's class differs by check; refused is the point)
            program.module()(*bad)
    assert len(_asserts(decomposed.graph_module)) >= 1


def test_an_assert_message_follows_a_condition_renamed_by_the_decomposition():
    # the exported program counts ge_1 (its trace deleted a ge); the decomposition's nodes count
    # afresh, so its condition is ge and the message says ge
    ep = graphcap.export(TwoChecks(), (torch.tensor(3), torch.randn(8)))
    messages = {n.args[0].name: n.args[1] for n in _asserts(ep.run_decompositions().graph_module)}
    assert messages and all(text.endswith(f"on node '{name}'") for name, text in messages.items())
    assert all(f"'{name}'" in text for name, text in messages.items())


class LateSizes(torch.nn.Module):
    def forward(self, x, y, *, z):
        a = x.sin() * z.shape[1]
        b = a.sum() + y.shape[0]
        return b * x.shape[0], torch.ones(y.shape[1]) + z.shape[0]


def test_decomposed_size_reads_follow_the_placeholders_by_input_and_dim():
    spec = {"x": {0: Dim("a")}, "y": {0: Dim("b"), 1: Dim("c")}, "z": {0: Dim("d"), 1: Dim("e")}}
    args, kwargs = (torch.randn(3, 2), torch.randn(4, 5)), {"z": torch.randn(6, 7)}
    ep = graphcap.export(LateSizes(), args, kwargs, dynamic_shapes=spec)
    for program in (ep, ep.run_decompositions()):
        nodes = list(program.graph.nodes)
        n_inputs = len(program.graph.find_nodes(op="placeholder"))
        reads = [n for n in nodes if n.target is torch.ops.aten.sym_size.int]
        assert nodes[n_inputs:n_inputs + len(reads)] == reads
        assert [(r.args[0].name, r.args[1]) for r in reads] == [("x", 0), ("y", 0), ("y", 1), ("z", 0), ("z", 1)]
    assert [n.name for n in ep.run_decompositions().graph.nodes if n.target is torch.ops.aten.sym_size.int] == \
        [n.name for n in ep.graph.nodes if n.target is torch.ops.aten.sym_size.int]
    torch.testing.assert_close(ep.run_decompositions().module()(*args, **kwargs), LateSizes()(*args, **kwargs))


def _subgraph_inputs(gm: torch.fx.GraphModule) -> dict[str, list[str]]:
    return {name: [n.name for n in sub.graph.find_nodes(op="placeholder")]
            for name, sub in gm.named_modules() if name and isinstance(sub, torch.fx.GraphModule)}


class CondOverState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x, y):
        def inner(a, b):
            return torch.cond(b.sum() > 0, lambda p, q: self.lin(p) + q, lambda p, q: p - q, (a, b))

        return torch.cond(x.sum() > 0, inner, lambda a, b: a * b + self.offset, (x, y))


class Loop(torch.nn.Module):
    def forward(self, step, acc):
        return torch._higher_order_ops.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a.cos()), (step, acc))


@pytest.mark.parametrize("case", ["nested_cond_over_state", "while_loop"])
def test_decomposed_subgraphs_keep_the_input_names_of_the_exported_program(case):
    model, args = {"nested_cond_over_state": (CondOverState(), (torch.randn(2, 3), torch.randn(2, 3))),
                   "while_loop": (Loop(), (torch.tensor(0), torch.randn(3)))}[case]
    ep = graphcap.export(model, args)
    decomposed = ep.run_decompositions()
    before, after = _subgraph_inputs(ep.graph_module), _subgraph_inputs(decomposed.graph_module)
    assert before and after == before
    assert not any(name.startswith("arg") for names in after.values() for name in names)
    torch.testing.assert_close(decomposed.module()(*args), model(*args))


class IntsInCond(torch.nn.Module):
    def forward(self, x, trigger, target):
        return torch.cond(trigger == 1, lambda: x + target, lambda: x * target, ())


@pytest.mark.parametrize("trigger", [0, 1])
def test_int_inputs_exported_at_0_or_1_with_unbounded_range_decompose(trigger):
    # Dim.DYNAMIC int inputs range over [0, int_oo]; an example of 0 or 1 is retraced at a general
    # size, and int_oo (which calls itself finite) must not be taken for a bound
    args = (torch.randn(2), trigger, 2)
    ep = graphcap.export(IntsInCond(), args, dynamic_shapes=(None, Dim.DYNAMIC, Dim.DYNAMIC))
    decomposed = ep.run_decompositions({})
    assert [str(v) for v in decomposed.range_constraints.values()] == ["VR[0, int_oo]", "VR[0, int_oo]"]
    for call in [args, (torch.randn(2), 1, 5), (torch.randn(2), 0, 0)]:
        torch.testing.assert_close(decomposed.module()(*call), IntsInCond()(*call))
