"""A program and those derived from it (``run_decompositions``, ``copy.deepcopy``) share no mutable state.

A consumer (ExecuTorch, AOTInductor, a user's pass) works on the fake values of
the program it was given, and settling a question there (``batch == 2``) is
remembered in their ShapeEnv. Were that ShapeEnv shared with the program the
consumer's was derived from, the other program would silently change what it
accepts: GPT-2 handed to AOTInductor after ExecuTorch lowered a copy returned
batch 2 for a batch-3 input (issue 22).
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from graphcap import Dim


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return self.lin(x).relu() * x.shape[0]


BATCH = {"x": {0: Dim("batch", min=1, max=64)}}


def _export():
    return graphcap.export(Net(), (torch.randn(2, 4),), dynamic_shapes=BATCH)


def _user_input_val(ep):
    node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x")
    return node.meta["val"]


def _settle_batch_to_two(ep):
    """What a consumer's pass does when it asks whether the batch is 2 (and the example says so)."""
    val = _user_input_val(ep)
    assert bool(val.shape[0] == 2)  # a guard: the symbol is replaced by 2 in this program's ShapeEnv


def _narrow_batch(ep):
    """A consumer's pass assuming the batch is at least 2."""
    torch._check(_user_input_val(ep).shape[0] >= 2)


def _assert_still_dynamic(ep, model):
    """The program accepts batch 1 and 3, with eager's numbers, and its batch is still a symbol of range 1..64."""
    expr = _user_input_val(ep).shape[0]
    assert isinstance(expr, torch.SymInt) and not expr.node.expr.is_number, expr
    assert [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()] == [(1, 64)]
    for batch in (1, 3):
        x = torch.randn(batch, 4)
        got = ep.module()(x)
        want = copy.deepcopy(model)(x)
        assert got.shape == want.shape == (batch, 3)
        torch.testing.assert_close(got, want)


def test_a_consumer_settling_a_symbol_of_the_decomposed_program_leaves_the_original_dynamic():
    model = Net()
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(2, 4),), dynamic_shapes=BATCH)
    core = ep.run_decompositions()
    _settle_batch_to_two(core)
    _assert_still_dynamic(ep, model)
    # and a second decomposition of the original is dynamic too
    again = ep.run_decompositions()
    assert not _user_input_val(again).shape[0].node.expr.is_number
    _assert_still_dynamic(again, model)


def test_a_narrowed_range_in_the_decomposed_program_stays_there():
    ep = _export()
    core = ep.run_decompositions()
    _narrow_batch(core)
    env = _user_input_val(ep).shape[0].node.shape_env
    sym = _user_input_val(ep).shape[0].node.expr
    assert int(env.var_to_range[sym].lower) == 1
    core_env = _user_input_val(core).shape[0].node.shape_env
    assert core_env is not env and int(core_env.var_to_range[sym].lower) == 2


def test_decomposing_a_decomposed_program_keeps_each_apart():
    model = Net()
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(2, 4),), dynamic_shapes=BATCH)
    core = ep.run_decompositions()
    core2 = core.run_decompositions()
    _settle_batch_to_two(core2)
    _assert_still_dynamic(core, model)
    _assert_still_dynamic(ep, model)


@pytest.mark.parametrize("settle_in", ["copy", "original"])
def test_a_deep_copy_and_its_original_do_not_settle_each_others_symbols(settle_in):
    model = Net()
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(2, 4),), dynamic_shapes=BATCH)
    dup = copy.deepcopy(ep)
    settled, kept = (dup, ep) if settle_in == "copy" else (ep, dup)
    _settle_batch_to_two(settled)
    _assert_still_dynamic(kept, model)
    _assert_still_dynamic(kept.run_decompositions(), model)


def test_a_deep_copy_shares_no_tensor_graph_or_table():
    ep = _export()
    dup = copy.deepcopy(ep)
    assert dup.graph_module is not ep.graph_module and dup.graph is not ep.graph
    assert not set(map(id, dup.graph.nodes)) & set(map(id, ep.graph.nodes))
    for a, b in zip(dup.graph.nodes, ep.graph.nodes):
        assert a.meta is not b.meta
        if isinstance(b.meta.get("val"), torch.Tensor):
            assert a.meta["val"] is not b.meta["val"] and a.meta["val"].shape == b.meta["val"].shape
    assert dup.range_constraints is not ep.range_constraints and dup.range_constraints == ep.range_constraints
    assert dup.state_dict is not ep.state_dict and dup.constants is not ep.constants
    before = {k: v.clone() for k, v in ep.state_dict.items()}
    for name, t in dup.state_dict.items():
        assert t.data_ptr() != ep.state_dict[name].data_ptr()
        with torch.no_grad():
            t.add_(1)  # a consumer's pass folding something into the copy's weights in place
    for name, t in ep.state_dict.items():
        assert torch.equal(t, before[name])
    dup.range_constraints.clear()
    assert len(ep.range_constraints) == 1
    dup.graph.erase_node(next(n for n in dup.graph.nodes if n.op == "call_function" and not n.users))
    ep.validate()  # the original's graph is whole
    assert ep.call_spec == dup.call_spec and ep.graph_signature == dup.graph_signature


def test_the_decomposed_program_has_its_own_tables_but_the_same_weights():
    """Its state and constant tables are new dicts (a consumer dropping an entry leaves the original
    whole); the tensors are the original's, as torch.export's ``run_decompositions`` keeps them (a
    copy would double a model's memory)."""
    ep = _export()
    core = ep.run_decompositions()
    assert core.state_dict is not ep.state_dict and core.range_constraints is not ep.range_constraints
    assert all(core.state_dict[k] is v for k, v in ep.state_dict.items())
    core.state_dict.clear()
    core.range_constraints.clear()
    assert ep.state_dict and ep.range_constraints


class DerivedDim(torch.nn.Module):
    def forward(self, x, y):
        return x[: y.shape[0]] + y


def test_derived_dims_keep_their_relation_in_a_copy_and_a_decomposition():
    n = Dim("n", min=2, max=32)
    ep = graphcap.export(DerivedDim(), (torch.randn(8, 3), torch.randn(4, 3)),
                         dynamic_shapes={"x": {0: 2 * n}, "y": {0: n}})
    for derived in (copy.deepcopy(ep), ep.run_decompositions(), copy.deepcopy(ep).run_decompositions()):
        x, y = torch.randn(10, 3), torch.randn(5, 3)
        torch.testing.assert_close(derived.module()(x, y), DerivedDim()(x, y))
        with pytest.raises(Exception, match="x"):
            derived.module()(torch.randn(9, 3), y)
    x, y = torch.randn(6, 3), torch.randn(3, 3)
    torch.testing.assert_close(ep.module()(x, y), DerivedDim()(x, y))


class DataDependent(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[0])
        return x[:k].sum(0), torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))


def test_unbacked_symbols_and_subgraphs_survive_a_copy_and_a_decomposition():
    b = Dim("b", min=2, max=16)
    ep = graphcap.export(DataDependent(), (torch.randn(4, 3), torch.tensor(2)), dynamic_shapes={"x": {0: b}, "n": None})
    for derived in (copy.deepcopy(ep), ep.run_decompositions(), copy.deepcopy(ep).run_decompositions()):
        derived.validate()
        for x, n in ((torch.randn(5, 3), torch.tensor(3)), (-torch.ones(3, 3), torch.tensor(1))):
            for got, want in zip(derived.module()(x, n), DataDependent()(x, n)):
                torch.testing.assert_close(got, want)


def test_a_pass_on_the_module_settling_a_symbol_leaves_the_program_dynamic():
    """pt2e's prepare and users' passes work on ``ep.module()``'s graph and its values."""
    model = Net()
    ep = graphcap.export(copy.deepcopy(model), (torch.randn(2, 4),), dynamic_shapes=BATCH)
    gm = ep.module()
    val = next(n.meta["val"] for n in gm.graph.nodes if n.name == "x")
    assert bool(val.shape[0] == 2)
    _assert_still_dynamic(ep, model)
    x = torch.randn(3, 4)  # the module settled by the pass still runs any batch: its checks are the program's
    torch.testing.assert_close(gm(x), copy.deepcopy(model)(x))


def test_a_static_program_keeps_one_fake_mode_in_its_copies():
    """No symbol, nothing to settle: the copy's values stay where they were (no cost for moving them)."""
    ep = graphcap.export(Net(), (torch.randn(2, 4),))
    dup = copy.deepcopy(ep)
    assert _user_input_val(dup).fake_mode is _user_input_val(ep).fake_mode
    torch.testing.assert_close(dup.module()(torch.ones(2, 4)), ep.module()(torch.ones(2, 4)))


class _BranchOnItems(torch.nn.Module):
    def forward(self, x, y, z):
        total = 0
        for v in (x, y):
            b = v.item()
            total = total + (v * b if b > 10 else v + b)
        return z * total


def test_draft_programs_copies_keep_the_real_data_they_were_traced_with():
    """A draft export's values carry the real tensors it ran with (its report explains failures
    with them); module() and a deep copy move the values to their own ShapeEnv and keep them."""
    inputs = (torch.tensor(5), torch.tensor(3), torch.tensor(2))
    ep = graphcap.draft_export(_BranchOnItems(), inputs)
    for graph in (ep.module().graph, copy.deepcopy(ep).graph):
        reals = [n.meta["val"].real_tensor for n in graph.nodes if n.op == "placeholder"]
        assert len(reals) == 3 and all(isinstance(r, torch.Tensor) for r in reals)
        for real, given in zip(reals, inputs):
            torch.testing.assert_close(real, given)
    other = (torch.tensor(4), torch.tensor(2), torch.tensor(6))
    torch.testing.assert_close(ep.module()(*other), _BranchOnItems()(*other))
