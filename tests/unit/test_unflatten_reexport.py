"""Re-export and torch.compile of unflattened modules (bench/probes/unflatten_reexport.py;
docs/torch-suite.md, "Unflatten re-export audit").

An unflattened module makes its submodules' forward code and its input checker on first use.
When dynamo met the module first (a strict export by graphcap or torch.export, torch.compile
with ``fullgraph=True``), the checker was made by a ``torch.compiler.disable``'d function, a
graph break those refuse (``Skip calling torch.compiler.disable()d function``). Now both are
made while dynamo traces (``hierarchy/when_needed.py``), so the module, any submodule, a
preserved or swapped submodule (also inside a user's model and its cond branches) can be
re-exported and compiled before their first call, with eager's numbers and buffers, and the
program's refusals of bad inputs kept.

Found on the way: a model holding one module under two names and a ``torch.cond`` whose branch
calls a submodule did not export (``TraceError[KeyError]``, make_fx's module proxies unknown to
the branch's tracer); it exports, unflattens and re-exports.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.export as te

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError, InputGuardError


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class TwoBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        return self.b(self.a(x))


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x):
        self.seen.add_(x.sum(0))
        return self.lin(x) + self.seen


class Mutating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.b = Counting(), Block()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.b(self.c(x)) * self.calls


class Branch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: self.lin(t) - 1, (x,))


class Mixed(torch.nn.Module):
    """A cond, one block called twice."""

    def __init__(self):
        super().__init__()
        self.blk = Block()
        self.br = Branch()

    def forward(self, x):
        return self.br(self.blk(self.blk(x)) + x)


class Shared(torch.nn.Module):
    """One block at two names, called under each."""

    def __init__(self):
        super().__init__()
        self.first = Block()
        self.second = self.first
        self.last = Block()

    def forward(self, x):
        return self.last(self.second(self.first(x)))


def _x(n=2):
    return torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) / 5 - 0.7


def _compiled_graphs(module, fullgraph=True):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return torch.compile(module, backend=backend, fullgraph=fullgraph), graphs


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("exporter", [graphcap.export, te.export], ids=["graphcap", "torch"])
def test_unflattened_module_never_called_re_exports_and_refuses_what_the_program_refuses(exporter, strict):
    model = TwoBlocks()
    unf = graphcap.unflatten(graphcap.export(copy.deepcopy(model), (_x(),)))
    again = exporter(unf, (_x(),), strict=strict).module()
    torch.testing.assert_close(again(-_x()), model(-_x()))
    with pytest.raises(AssertionError):  # graphcap's InputGuardError is one; torch's module raises its own
        again(_x(3))


@pytest.mark.parametrize("strict", [True, False])
def test_submodules_preserved_and_swapped_re_export_before_any_call(strict):
    model = TwoBlocks()
    unf = graphcap.unflatten(graphcap.export(copy.deepcopy(model), (_x(),)))
    torch.testing.assert_close(graphcap.export(unf.b, (_x(),), strict=strict).module()(_x()), model.b(_x()))
    torch.testing.assert_close(te.export(unf.a, (_x(),), strict=strict).module()(_x()), model.a(_x()))

    preserved = graphcap.export(copy.deepcopy(model), (_x(),), preserve_module_call_signature=("a",))
    for swap in (False, True):
        unf = graphcap.unflatten(preserved)
        if swap:
            unf.a = copy.deepcopy(model.a)
        for exporter in (graphcap.export, te.export):
            torch.testing.assert_close(exporter(unf, (_x(),), strict=strict).module()(-_x()), model(-_x()))
        torch.testing.assert_close(graphcap.export(unf.a, (_x(),), strict=strict).module()(_x()), model.a(_x()))


def test_compile_fullgraph_before_the_first_call_is_one_graph_and_checks_the_range():
    model = TwoBlocks()
    ep = graphcap.export(copy.deepcopy(model), (_x(4),), dynamic_shapes=({0: Dim("batch", min=2, max=16)},))
    compiled, graphs = _compiled_graphs(graphcap.unflatten(ep))
    for n in (4, 7, 16):
        torch.testing.assert_close(compiled(_x(n)), model(_x(n)))
    assert len(graphs) <= 2  # the example, then at most one dynamic recompile; no graph break
    loose, _ = _compiled_graphs(graphcap.unflatten(ep), fullgraph=False)
    torch.testing.assert_close(loose(_x(5)), model(_x(5)))
    with pytest.raises(InputGuardError):
        loose(_x(17))


def test_compiled_submodule_of_a_never_called_module_is_one_graph():
    model = Mixed()
    unf = graphcap.unflatten(graphcap.export(copy.deepcopy(model), (_x(),)))
    compiled, graphs = _compiled_graphs(unf.br)
    torch.testing.assert_close(compiled(_x()), model.br(_x()))
    torch.testing.assert_close(compiled(-_x()), model.br(-_x()))
    assert len(graphs) == 1
    torch.testing.assert_close(unf(_x()), model(_x()))  # the eager module still runs


@pytest.mark.parametrize("strict", [True, False])
def test_buffer_updates_survive_re_export_and_compile_before_the_first_call(strict):
    model = Mutating()
    ep = graphcap.export(copy.deepcopy(model), (_x(),))
    again = graphcap.export(graphcap.unflatten(ep), (_x(),), strict=strict).module()
    eager = copy.deepcopy(model)
    for x in (_x(), -_x(), _x() * 2):
        torch.testing.assert_close(again(x), eager(x))
    torch.testing.assert_close(dict(again.named_buffers()), dict(eager.named_buffers()))

    unf = graphcap.unflatten(graphcap.export(copy.deepcopy(model), (_x(),)))
    compiled, graphs = _compiled_graphs(unf)
    eager = copy.deepcopy(model)
    for x in (_x(), -_x()):
        torch.testing.assert_close(compiled(x), eager(x))
    torch.testing.assert_close(dict(unf.named_buffers()), dict(eager.named_buffers()))
    assert len(graphs) == 1


@pytest.mark.parametrize("strict", [True, False])
def test_cond_repeated_and_shared_blocks_re_export_before_the_first_call(strict):
    for model in (Mixed(), Shared()):
        ep = graphcap.export(copy.deepcopy(model), (_x(),))
        for exporter in (graphcap.export, te.export):
            again = exporter(graphcap.unflatten(ep), (_x(),), strict=strict).module()
            for x in (_x(), -_x() * 3):  # both branches
                torch.testing.assert_close(again(x), model(x))


@pytest.mark.parametrize("strict", [True, False])
def test_re_export_past_the_programs_range_is_refused_with_the_range(strict):
    ep = graphcap.export(TwoBlocks(), (_x(4),), dynamic_shapes=({0: Dim("batch", min=2, max=16)},))
    with pytest.raises(ConstraintViolationError, match="2 <= wide <= 16"):
        graphcap.export(graphcap.unflatten(ep), (_x(4),), dynamic_shapes=({0: Dim("wide", min=2, max=64)},),
                        strict=strict)
    narrower = graphcap.export(graphcap.unflatten(ep), (_x(4),),
                               dynamic_shapes=({0: Dim("narrow", min=2, max=8)},), strict=strict)
    torch.testing.assert_close(narrower.module()(_x(8)), ep.module()(_x(8)))


def test_copies_made_before_the_first_call_compile_and_run_on_their_own():
    model = TwoBlocks()
    unf = graphcap.unflatten(graphcap.export(copy.deepcopy(model), (_x(),)))
    twin = copy.deepcopy(unf)
    compiled, graphs = _compiled_graphs(twin)
    torch.testing.assert_close(compiled(_x()), model(_x()))
    assert len(graphs) == 1
    with torch.no_grad():
        twin.a.lin.weight.zero_()  # the copy's state is its own
    torch.testing.assert_close(unf(_x()), model(_x()))
    assert unf.code == twin.code


class Around(torch.nn.Module):
    """A user's model holding an unflattened module, calling it directly and in a cond."""

    def __init__(self, unf):
        super().__init__()
        self.unf = unf

    def forward(self, x):
        y = self.unf(x) * 2
        return torch.cond(x.sum() > 0, lambda t: self.unf.a(t), lambda t: self.unf.b(t) - 1, (y,))


def test_unflattened_module_inside_a_users_model_and_its_cond_never_called():
    model = TwoBlocks()
    ep = graphcap.export(copy.deepcopy(model), (_x(),))

    def eager(x):
        y = model(x) * 2
        return model.a(y) if x.sum() > 0 else model.b(y) - 1

    runs = [graphcap.export(Around(graphcap.unflatten(ep)), (_x(),), strict=True).module(),
            te.export(Around(graphcap.unflatten(ep)), (_x(),), strict=True).module(),
            torch.compile(Around(graphcap.unflatten(ep)), backend="eager", fullgraph=True)]
    for run in runs:
        for x in (_x() + 1, _x() - 1):  # both branches
            torch.testing.assert_close(run(x), eager(x))


class SharedAndCond(torch.nn.Module):
    """One block under two names, and a cond whose branches call submodules."""

    def __init__(self):
        super().__init__()
        self.blk = Block()
        self.alias = self.blk
        self.br = Branch()

    def forward(self, x):
        return self.br(self.alias(self.blk(x)) + x)


@pytest.mark.parametrize("strict", [True, False])
def test_shared_module_and_a_cond_calling_submodules_export_unflatten_and_re_export(strict):
    # the cond's branch closes over the module proxies make_fx hands out for a model holding one
    # module under two names; its tracer did not know them (TraceError[KeyError])
    model = SharedAndCond()
    ep = graphcap.export(copy.deepcopy(model), (_x(),), strict=strict)
    unf = graphcap.unflatten(ep)
    assert (unf.blk is unf.alias) or strict  # a strict program's unflatten keeps two copies (torch's too)
    for run in (ep.module(), unf, graphcap.export(graphcap.unflatten(ep), (_x(),), strict=strict).module()):
        for x in (_x() + 1, _x() - 1):  # both branches
            torch.testing.assert_close(run(x), model(x))
    stacks = {path for n in ep.graph_module.graph.nodes for path, _ in (n.meta.get("nn_module_stack") or {}).values()}
    assert "br" in stacks
