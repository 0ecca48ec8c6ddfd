"""A loaded control-flow call hands its subgraphs' operands over as lists, as torch's load does.

torch's load turns the tuples ``torch.cond`` / ``while_loop`` / ``scan`` were traced with into lists;
a pass or consumer written against a program torch loaded (``node.args[3].append(...)``, a
``type(args) is list`` check, code text compared with torch's) must read a graphcap-loaded program
the same way. The loaded program still runs, decomposes, re-exports and saves again.
"""
from __future__ import annotations

import io
import json

import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import graphcap
from conftest import save_load
from graphcap.serialize.archive import read_entries


class TwoBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda a, s: a.cos() * s, lambda a, s: a.sin() + s, (x, self.scale))


class NoOperands(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda: torch.ones(2), lambda: torch.zeros(2), ()) + x


class Doubling(torch.nn.Module):
    def forward(self, x):
        return while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (torch.tensor(0), x))[1]


class RunningSum(torch.nn.Module):
    def forward(self, init, xs):
        return scan(lambda c, x: (c + x, c * x), init, xs)


CASES = {
    "cond": (TwoBranches(), (torch.randn(6, 4),), {"x": {0: torch.export.Dim("n", min=2)}},
             [(torch.randn(3, 4),), (torch.randn(9, 4),)]),
    "cond_without_operands": (NoOperands(), (torch.randn(2),), None, [(-torch.ones(2),)]),
    "while_loop": (Doubling(), (torch.randn(3),), None, [(torch.randn(3),)]),
    "scan": (RunningSum(), (torch.randn(3), torch.randn(4, 3)), None, [(torch.randn(3), torch.randn(4, 3))]),
}
HOPS = {"cond", "while_loop", "scan", "map_impl"}


def control_flow_args(ep):
    return [(n.target.name(), n.args) for n in ep.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)
            and n.target.name() in HOPS]


def torch_round_trip(ep):
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


@pytest.mark.parametrize("case", sorted(CASES))
def test_loaded_operand_sequences_are_lists_as_torchs_load_gives(case):
    model, args, spec, others = CASES[case]
    ep = graphcap.export(model, args, dynamic_shapes=spec)
    loaded = save_load(ep)
    theirs = torch_round_trip(torch.export.export(model, args, dynamic_shapes=spec))
    ours_calls, torch_calls = control_flow_args(loaded), control_flow_args(theirs)
    assert [n for n, _ in ours_calls] == [n for n, _ in torch_calls] and ours_calls
    for (_, ours), (_, their) in zip(ours_calls, torch_calls):
        assert [isinstance(a, list) for a in ours] == [isinstance(a, list) for a in their]
        assert not any(type(a) is tuple for a in ours)
    for inputs in [args, *others]:
        torch.testing.assert_close(loaded.module()(*inputs), model(*inputs))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_loaded_program_with_list_operands_decomposes_saves_and_re_exports(case):
    model, args, spec, others = CASES[case]
    loaded = save_load(graphcap.export(model, args, dynamic_shapes=spec))
    again = save_load(loaded)
    assert [[type(a) for a in a_] for _, a_ in control_flow_args(again)] == \
        [[type(a) for a in a_] for _, a_ in control_flow_args(loaded)]
    decomposed = loaded.run_decompositions()
    re_exported = graphcap.export(loaded.module(), args, dynamic_shapes=spec)
    for inputs in [args, *others]:
        expected = model(*inputs)
        for program in (again, decomposed, re_exported):
            torch.testing.assert_close(program.module()(*inputs), expected)


def test_the_in_memory_program_keeps_the_traced_tuple():
    """Only load changes the container: the exported program is what torch.export gives too."""
    model, args, spec, _ = CASES["cond"]
    (_, ours), = control_flow_args(graphcap.export(model, args, dynamic_shapes=spec))
    (_, their), = control_flow_args(torch.export.export(model, args, dynamic_shapes=spec))
    assert type(ours[3]) is type(their[3]) is tuple


def test_a_loaded_program_saves_the_same_file_as_the_exported_one():
    """The file holds the traced tuple: saving the loaded program writes the graph saved first."""
    model, args, spec, _ = CASES["cond"]
    ep = graphcap.export(model, args, dynamic_shapes=spec)

    def graph_json(program):
        buf = io.BytesIO()
        graphcap.save(program, buf)
        return json.loads(read_entries(io.BytesIO(buf.getvalue()))["program.json"])["graph_module"]
    assert graph_json(save_load(ep)) == graph_json(ep)
