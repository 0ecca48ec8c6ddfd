"""An eval-mode in-place dropout writes nothing: a static retrace replays it as its input and skips
functionalization, and the program is the one the functionalized retrace gives."""
from __future__ import annotations

import torch

import graphcap
from graphcap.ir_checks import verify
from graphcap.passes import decompose as decompose_module
from graphcap.passes import simple_inplace
from graphcap.shape_env_copies import fake_mode_of_graph


class Head(torch.nn.Module):
    """EfficientNet's classifier: pooling, ``flatten`` (a view), ``Dropout(inplace=True)``, linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.drop = torch.nn.Dropout(0.2, inplace=True)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(self.pool(self.conv(x).relu_()), 1)))


class Training(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x.view(-1), 0.5, training=True, inplace=True) + 1


def _describe(ep) -> list:
    """Everything compared: code, each node's name, target, value layout and metadata keys, the
    signature, the ranges and what the program's ShapeEnv holds.

    One exception: torch 2.10's functionalized retrace leaves the last operator's
    ``original_aten`` on the output node, where a plain retrace (every program that writes
    nowhere, on every torch) has none; on torch 2.13 and 2.14 neither has it."""
    rows = [ep.graph_module.code, str(ep.graph_signature), sorted(map(str, ep.range_constraints.items()))]
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        layout = (tuple(v.shape), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else repr(v)
        keys = sorted(k for k in n.meta if not (n.op == "output" and k == "original_aten"))
        rows.append((n.name, str(n.target), layout, keys, n.meta.get("nn_module_stack"),
                     n.meta.get("stack_trace")))
    env = fake_mode_of_graph(ep.graph_module).shape_env
    if env is not None:
        rows.append([str(g.expr) for g in env.guards])
    return rows


def _decomposed_with_rule(ep, rule_on: bool, monkeypatch):
    original = simple_inplace.plan

    def plan(gm, has_declared_mutations, has_symbols=False):
        return original(gm, has_declared_mutations, has_symbols=has_symbols if rule_on else True)

    monkeypatch.setattr(decompose_module.simple_inplace, "plan", plan)
    try:
        return ep.run_decompositions()
    finally:
        monkeypatch.setattr(decompose_module.simple_inplace, "plan", original)


def test_eval_dropout_needs_no_functionalization():
    ep = graphcap.export(Head().eval(), (torch.randn(2, 3, 8, 8),))
    plan = simple_inplace.plan(ep.graph_module, has_declared_mutations=False)
    assert [n.target for n in plan.identity] == [torch.ops.aten.dropout_.default]
    assert not plan.needs_functionalization
    # with symbols, dropout is left to functionalization (that retrace's names are kept)
    with_symbols = simple_inplace.plan(ep.graph_module, has_declared_mutations=False, has_symbols=True)
    assert not with_symbols.identity and with_symbols.needs_functionalization


def test_same_program_as_functionalized_retrace(monkeypatch):
    model = Head().eval()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(model, (x,))
    plain = _decomposed_with_rule(ep, True, monkeypatch)
    functionalized = _decomposed_with_rule(ep, False, monkeypatch)
    assert _describe(plain) == _describe(functionalized)
    verify(plain)
    assert not any(n.target is torch.ops.aten.dropout_.default for n in plain.graph.nodes)
    torch.testing.assert_close(plain.module()(x), model(x))


def test_dynamic_program_decomposes_as_before(monkeypatch):
    model = Head().eval()
    x = torch.randn(2, 3, 8, 8)
    ep = graphcap.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    assert simple_inplace.plan(ep.graph_module, False, has_symbols=True).needs_functionalization
    dep = ep.run_decompositions()
    verify(dep)
    y = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(dep.module()(y), model(y))


def test_training_dropout_still_functionalized():
    ep = graphcap.export(Training(), (torch.randn(3, 4),))
    plan = simple_inplace.plan(ep.graph_module, has_declared_mutations=False)
    assert not plan.identity
    assert plan.needs_functionalization
