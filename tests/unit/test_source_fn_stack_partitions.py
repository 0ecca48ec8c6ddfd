"""Source-partition tools find in graphcap's programs what they find in torch's strict ones.

``get_source_partitions`` (pt2e quantizers, ExecuTorch backend passes, torchao's
``find_sequential_partitions``) compares the last entry of each node's ``source_fn_stack`` with
classes and functions (``torch.nn.Conv2d``, ``torch.nn.functional.gelu``, ``operator.add``).
graphcap's entries were strings, so those tools found nothing; they now hold the objects, one
entry per node as torch's strict capture writes it, through save/load and decomposition too."""
from __future__ import annotations

import importlib.util
import io
import operator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

import graphcap
from graphcap.trace.source_fns import name_in_file, resolve

WANTED = [torch.nn.Linear, torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.ReLU, torch.nn.MultiheadAttention,
          F.gelu, torch.cat, torch.relu, operator.add, operator.getitem]


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        z = self.act(self.bn(self.conv(x))).mean((2, 3))
        z = self.head(z) + y          # the same Linear called twice: two partitions
        z = self.head(z)
        z = torch.relu(F.gelu(z))
        return torch.cat([z, z[0:1]])


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def _partitions(graph):
    found = get_source_partitions(graph, WANTED)
    # operator nodes only: strict programs also tag the parameter placeholders a call reads
    return {getattr(k, "__name__", k): sorted(sum(n.op == "call_function" for n in p.nodes) for p in v)
            for k, v in found.items()}


CASES = [(Mixed, (torch.randn(2, 3, 6, 6), torch.randn(2, 4))), (Attention, (torch.randn(2, 5, 8),))]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("model_class,args", CASES, ids=["mixed", "attention"])
def test_partitions_match_torchs_strict_program(model_class, args, strict):
    model = model_class().eval()
    ours = _partitions(graphcap.export(model, args, strict=strict).graph)
    theirs = _partitions(torch.export.export(model, args, strict=True).graph)
    assert set(ours) - {"getitem"} == set(theirs) - {"getitem"}
    for kind in ("Linear", "Conv2d", "BatchNorm2d", "ReLU", "gelu", "cat", "relu", "add"):
        if kind in theirs:
            assert ours[kind] == theirs[kind], kind  # one partition per call, the same nodes in each
    if "MultiheadAttention" in theirs:
        # one call, one partition; torch's splits its first and last transpose off by their names
        assert len(ours["MultiheadAttention"]) == 1
        if strict:
            assert ours["MultiheadAttention"] == [sum(theirs["MultiheadAttention"])]


def test_one_module_call_is_one_partition_and_two_calls_two():
    ep = graphcap.export(Mixed().eval(), CASES[0][1])
    found = get_source_partitions(ep.graph, [torch.nn.Linear])[torch.nn.Linear]
    assert len(found) == 2
    ep = graphcap.export(Attention().eval(), CASES[1][1])
    (mha,) = get_source_partitions(ep.graph, [torch.nn.MultiheadAttention])[torch.nn.MultiheadAttention]
    assert len(mha.nodes) > 5  # the projections, the attention and the output projection together


def test_partitions_survive_save_load_and_decomposition():
    model, args = Mixed().eval(), CASES[0][1]
    ep = graphcap.export(model, args)
    expected = _partitions(ep.graph)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    assert _partitions(graphcap.load(buf).graph) == expected
    decomposed = _partitions(ep.run_decompositions().graph)
    assert set(decomposed) == set(expected)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None,
                    reason="torchao not installed (the consumers extra, torch 2.14 line)")
def test_torchao_finds_conv_then_batch_norm():
    from torchao.quantization.pt2e.graph_utils import find_sequential_partitions
    gm = graphcap.export(Mixed().eval(), CASES[0][1]).module()
    assert len(find_sequential_partitions(gm, [torch.nn.Conv2d, torch.nn.BatchNorm2d])) == 1


def test_names_in_a_file_resolve_only_among_modules_already_imported():
    assert resolve(name_in_file(torch.nn.Linear)) is torch.nn.Linear
    assert resolve(name_in_file(torch.cat)) is torch.cat
    assert resolve(name_in_file(operator.add)) is operator.add
    assert resolve("torch.nn.modules.not_a_module.Thing") == "torch.nn.modules.not_a_module.Thing"
    assert resolve("os.system") == "os.system"  # outside torch and operator: never looked up
    assert resolve("builtin_function_or_method.linear") == "builtin_function_or_method.linear"
