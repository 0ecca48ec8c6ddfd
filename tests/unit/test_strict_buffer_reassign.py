"""strict=True keeps a buffer given a new tensor in forward (``self.buf = self.buf + x``) as an update.

dynamo leaves such a store out of its graph (a side effect on the module), and
torch.export's strict mode exports a program that never updates the buffer
(each call reads the exported value), with only a warning naming dynamo's
internal path. graphcap's strict program writes the new value into the
buffer, as non-strict's does: one program whichever mode captured it, and the
same state as eager after every call.
"""
import copy

import pytest
import torch

import graphcap
from graphcap.errors import UnsupportedError


class Accumulate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total = self.total + x
        return self.total * 2


class TwiceReassigned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.ones(2, 3))

    def forward(self, x):
        self.state = self.state * x
        self.state = self.state + 1
        return self.state.sum(0)


class ReturnsTheOldTensor(torch.nn.Module):
    """A streaming cache: the old tensor is read after the buffer got a new one (eager keeps its value)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.arange(4.0))

    def forward(self, x):
        old = self.cache
        self.cache = torch.cat([old[1:], x])
        return old * 10, self.cache


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.count = self.count + 1
        return self.lin(x) * self.count


class CallsInnerTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(self.inner(x))


class NewShape(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("log", torch.zeros(2))

    def forward(self, x):
        self.log = torch.cat([self.log, x])
        return x + 1


def _calls_match_eager(model, inputs, program_module):
    eager = copy.deepcopy(model)
    for x in inputs:
        got, want = program_module(x), eager(x)
        for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
            torch.testing.assert_close(g, w)
    for name, want in eager.state_dict().items():
        torch.testing.assert_close(program_module.state_dict()[name], want)


def _program_ops(ep):
    return [(n.op, str(n.target)) for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("make, example, more", [
    (Accumulate, torch.ones(3), [torch.ones(3), torch.randn(3), torch.randn(3)]),
    (TwiceReassigned, torch.full((3,), 2.0), [torch.randn(3), torch.randn(3)]),
    (ReturnsTheOldTensor, torch.tensor([7.0]), [torch.tensor([8.0]), torch.tensor([9.0])]),
    (CallsInnerTwice, torch.randn(2, 3), [torch.randn(2, 3), torch.randn(2, 3)]),
], ids=["accumulate", "twice", "old_tensor_read", "submodule_called_twice"])
def test_strict_program_updates_the_buffer_as_eager(make, example, more):
    torch.manual_seed(0)
    model = make()
    before = copy.deepcopy(model.state_dict())
    ep = graphcap.export(model, (example,), strict=True)
    # the export leaves the user's model as it was
    for name, value in before.items():
        assert torch.equal(model.state_dict()[name], value)
    _calls_match_eager(model, more, ep.module())
    # the same program non-strict captures
    assert _program_ops(ep) == _program_ops(graphcap.export(copy.deepcopy(model), (example,)))


def test_update_survives_decomposition_and_save(tmp_path):
    model = Accumulate()
    ep = graphcap.export(model, (torch.ones(3),), strict=True)
    decomposed = ep.run_decompositions()
    kinds = [s.kind.name for s in decomposed.graph_signature.output_specs]
    assert kinds == ["BUFFER_MUTATION", "USER_OUTPUT"]
    assert list(decomposed.graph_signature.buffers_to_mutate.values()) == ["total"]
    path = tmp_path / "acc.pt2"
    graphcap.save(ep, path)
    _calls_match_eager(model, [torch.ones(3), torch.randn(3)], graphcap.load(path).module())
    _calls_match_eager(model, [torch.ones(3), torch.randn(3)], decomposed.module())


def test_new_shape_is_refused_as_in_non_strict():
    for strict in (False, True):
        with pytest.raises(UnsupportedError, match=r"buffer 'log' a new tensor .* shape \[3\]"):
            graphcap.export(NewShape(), (torch.ones(1),), strict=strict)


def test_in_place_updates_unchanged():
    class InPlace(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(3))

        def forward(self, x):
            self.b.add_(x)
            return self.b + 1

    model = InPlace()
    ep = graphcap.export(model, (torch.ones(3),), strict=True)
    assert [op for _, op in _program_ops(ep)].count("aten.copy_.default") == 0
    _calls_match_eager(model, [torch.ones(3), torch.randn(3)], ep.module())


def test_programs_without_tensors_still_export():
    """The entry dynamo reads returns the buffers after the call; with none, or with no tensor
    operation in forward, the program is as before."""
    class Constant(torch.nn.Module):
        def forward(self, x, y):
            return 5

    class ConstantWithBuffer(Constant):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.ones(1))

    for model in (Constant(), ConstantWithBuffer()):
        ep = graphcap.export(model, (2, 1), strict=True)
        assert ep.module()(2, 1) == 5
