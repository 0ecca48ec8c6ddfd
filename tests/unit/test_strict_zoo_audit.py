"""Behaviours found by the strict=True audit on real models (bench/probes/strict_zoo_audit.py),
reproduced on small synthetic models.

- A dict spec keyed as the call is made: transformers 5 models take their flags and extra tensors
  through ``**kwargs`` (``BertModel.forward(self, input_ids, ..., **kwargs)``), and a spec naming such
  an input at the top level (``{"input_ids": .., "token_type_ids": ..}``) was refused by graphcap in
  both modes ("missing ['kwargs']"), where torch.export (2.14 on) reads it as nested under ``kwargs``.
- A strict program is the non-strict one: same input kinds, names and order (torch's strict mode
  orders state by first use and drops unused or tied entries; graphcap keeps one program).
- ``torch.utils.checkpoint`` and a preserved submodule called with keywords export in strict mode,
  and the unflattened module's submodule can be swapped (torch's strict mode refuses the first and
  its unflattened module fails the second on transformers layers).
"""
from __future__ import annotations

import copy
import io

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import graphcap
from graphcap import Dim
from graphcap.errors import DynamicSpecError


class KwargsModel(torch.nn.Module):
    """transformers' layout: named tensor inputs, then ``**kwargs`` for the rest."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.types = torch.nn.Embedding(2, 8)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.emb(input_ids)
        if kwargs.get("token_type_ids") is not None:
            h = h + self.types(kwargs["token_type_ids"])
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        out = self.lin(h)
        if kwargs.get("output_hidden", False):
            return out, h
        return out


def _inputs(b, s, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (b, s), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones(b, s), "token_type_ids": (ids % 2),
            "output_hidden": True}


def _same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("strict", [False, True])
def test_spec_names_inputs_of_var_keyword_at_top_level(strict):
    model = KwargsModel().eval()
    b, s = Dim("batch", min=1, max=8), Dim("seq", min=2, max=16)
    spec = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}, "token_type_ids": {0: b, 1: s},
            "output_hidden": None}
    ep = graphcap.export(model, (), _inputs(2, 5), dynamic_shapes=spec, strict=strict)
    for bb, ss in ((1, 2), (3, 7), (8, 16)):
        assert _same(ep.module()(**_inputs(bb, ss, 1)), model(**_inputs(bb, ss, 1)))
    with pytest.raises(Exception, match="batch|9"):
        ep.module()(**_inputs(9, 4))
    # the saved and loaded program keeps the range
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    assert _same(loaded.module()(**_inputs(4, 3, 2)), model(**_inputs(4, 3, 2)))


def test_spec_nested_under_var_keyword_and_mixed_read_alike():
    model = KwargsModel().eval()
    b = Dim("batch", min=1, max=8)
    nested = {"input_ids": {0: b}, "attention_mask": {0: b}, "kwargs": {"token_type_ids": {0: b},
                                                                        "output_hidden": None}}
    mixed = {"input_ids": {0: b}, "attention_mask": {0: b}, "token_type_ids": {0: b},
             "kwargs": {"output_hidden": None}}
    for spec in (nested, mixed):
        ep = graphcap.export(model, (), _inputs(2, 5), dynamic_shapes=spec)
        assert [str(v) for v in ep.range_constraints.values()] == ["VR[1, 8]"]
        assert _same(ep.module()(**_inputs(6, 5, 3)), model(**_inputs(6, 5, 3)))


def test_spec_giving_one_var_keyword_input_twice_is_refused():
    model = KwargsModel().eval()
    b = Dim("batch", min=1, max=8)
    spec = {"input_ids": {0: b}, "attention_mask": {0: b}, "token_type_ids": {0: b},
            "kwargs": {"token_type_ids": {0: b}, "output_hidden": None}}
    with pytest.raises(DynamicSpecError, match=r"'token_type_ids'.*twice") as info:
        graphcap.export(model, (), _inputs(2, 5), dynamic_shapes=spec)
    assert "Keep one of the two entries" in str(info.value)


def test_spec_with_var_keyword_entry_not_a_dict_is_refused():
    model = KwargsModel().eval()
    b = Dim("batch", min=1, max=8)
    spec = {"input_ids": {0: b}, "attention_mask": {0: b}, "token_type_ids": {0: b}, "kwargs": None}
    with pytest.raises(DynamicSpecError, match=r"\*\*kwargs.*not a dict"):
        graphcap.export(model, (), _inputs(2, 5), dynamic_shapes=spec)


def test_unknown_top_level_key_still_refused():
    model = KwargsModel().eval()
    b = Dim("batch", min=1, max=8)
    spec = {"input_ids": {0: b}, "attention_mask": {0: b}, "token_type_ids": {0: b}, "output_hidden": None,
            "typo_ids": {0: b}}
    with pytest.raises(DynamicSpecError, match="unknown.*typo_ids"):
        graphcap.export(model, (), _inputs(2, 5), dynamic_shapes=spec)


class TiedUnused(torch.nn.Module):
    """State that torch's strict mode lists differently: registered in one order, read in another,
    one weight tied under two names, one buffer never read."""

    def __init__(self):
        super().__init__()
        self.second = torch.nn.Linear(4, 4)
        self.first = torch.nn.Linear(4, 4)
        self.tied = torch.nn.Linear(4, 4)
        self.tied.weight = self.first.weight
        self.register_buffer("unused", torch.zeros(4))
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        return self.second(self.tied(self.first(x) * self.scale))


def test_strict_program_lists_state_as_non_strict_does():
    model = TiedUnused().eval()
    x = torch.randn(3, 4)
    spec = ({0: Dim("b", min=1, max=8)},)

    def listed(ep):
        return [(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.input_specs]

    strict = graphcap.export(model, (x,), dynamic_shapes=spec, strict=True)
    loose = graphcap.export(model, (x,), dynamic_shapes=spec, strict=False)
    assert listed(strict) == listed(loose)
    assert [t for _, _, t in listed(strict)][:2] == ["second.weight", "second.bias"]  # registration order
    assert ("BUFFER", "b_unused", "unused") in listed(strict)
    x2 = torch.randn(7, 4)
    assert torch.allclose(strict.module()(x2), model(x2), atol=1e-6)


class Checkpointed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.b(checkpoint(self.a, x, use_reentrant=False)).relu()


@pytest.mark.parametrize("training", [False, True])
def test_strict_activation_checkpoint_exports(training):
    model = Checkpointed().train(training)
    ep = graphcap.export(model, (torch.randn(3, 8),), dynamic_shapes=({0: Dim("b", min=1, max=9)},), strict=True)
    x = torch.randn(6, 8)
    assert torch.allclose(ep.module()(x), model(x), atol=1e-6)
    assert torch.allclose(ep.run_decompositions().module()(x), model(x), atol=1e-6)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, hidden, attention_mask=None, position=None, **kwargs):
        out = self.lin(hidden) + position[0] * position[1]
        if attention_mask is not None:
            out = out * attention_mask.unsqueeze(-1)
        return (out,)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(), Layer()])

    def forward(self, x, mask):
        pos = (torch.ones(x.shape[1], 8), torch.arange(x.shape[1]).float().unsqueeze(-1))
        for layer in self.layers:
            x = layer(x, attention_mask=mask, position=pos, output_attentions=False)[0]
        return x


@pytest.mark.parametrize("strict", [True, False])
def test_preserved_layer_called_with_keywords_swaps_after_unflatten(strict):
    model = Stack().eval()
    x, mask = torch.randn(2, 5, 8), torch.ones(2, 5)
    b, s = Dim("b", min=1, max=8), Dim("s", min=2, max=16)
    ep = graphcap.export(model, (x, mask), dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}), strict=strict,
                         preserve_module_call_signature=("layers.1",))
    uf = graphcap.unflatten(ep)
    x2, m2 = torch.randn(3, 7, 8), torch.ones(3, 7)
    with torch.no_grad():
        assert torch.allclose(uf(x2, m2), model(x2, m2), atol=1e-5)
        changed = copy.deepcopy(model.layers[1])
        changed.lin.weight.mul_(0.5)
        other = copy.deepcopy(model)
        other.layers[1] = copy.deepcopy(changed)
        uf.set_submodule("layers.1", changed)
        assert torch.allclose(uf(x2, m2), other(x2, m2), atol=1e-5)
