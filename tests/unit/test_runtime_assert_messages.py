"""Runtime asserts say which input, which source line and which range (issue 24, defect 5).

torch's message (``Runtime assertion failed for expression u0 <= 10 on node
'le_1'``) stays first, so code matching it still does; ``module()`` adds the
user's terms. ``print(ep)`` keeps torch's message.
"""
from __future__ import annotations

import re

import pytest
import torch

import graphcap


class Bounded(torch.nn.Module):
    def forward(self, y):
        n = y.item()
        torch._check(n >= 0)
        torch._check(n <= 10)
        return torch.zeros(n)


class Branches(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


class CountChecked(torch.nn.Module):
    def forward(self, y):
        torch._check(y.nonzero().shape[0] <= 2)
        return y * 2


def _message(ep, *inputs) -> str:
    with pytest.raises(RuntimeError) as info:
        ep.module()(*inputs)
    return str(info.value)


def test_item_bound_names_input_line_and_range():
    ep = graphcap.export(Bounded(), (torch.tensor(3),))
    text = _message(ep, torch.tensor(11))
    assert re.match(r"Runtime assertion failed for expression u\d+ <= 10 on node '\w+'", text)
    assert "n <= 10" in text and "from input y" in text
    assert "n = y.item()" in text and "line" in text and "[0, 10]" in text
    text = _message(ep, torch.tensor(-1))
    assert "n >= 0" in text and "from input y" in text


def test_draft_branch_on_a_tensor_names_the_condition_and_its_line():
    ep = graphcap.draft_export(Branches(), (torch.ones(3),))
    text = _message(ep, -torch.ones(3))
    assert "`x.sum() > 0` to be true" in text and "from input x" in text and "if x.sum() > 0:" in text
    torch.testing.assert_close(ep.module()(torch.ones(3)), torch.ones(3) + 1)


def test_nonzero_count_names_the_expression():
    ep = graphcap.export(CountChecked(), (torch.tensor([1, 0, 1]),))
    text = _message(ep, torch.tensor([1, 1, 1]))
    assert "y.nonzero().shape[0] <= 2" in text and "from input y" in text and "[0, 2]" in text


def test_printed_program_keeps_torchs_message():
    ep = graphcap.export(Bounded(), (torch.tensor(3),))
    printed = str(ep)
    assert re.search(r"\"Runtime assertion failed for expression u\d+ <= 10 on node 'le_1'\"", printed), printed
    assert "from input" not in printed


def test_module_graph_keeps_torchs_message_and_copies_explain_too():
    import copy
    ep = graphcap.export(Bounded(), (torch.tensor(3),))
    m = ep.module()
    code = m.print_readable(print_output=False)
    assert re.search(r"\"Runtime assertion failed for expression u\d+ <= 10 on node 'le_1'\"", code)
    assert "from input" not in code
    with pytest.raises(RuntimeError, match="from input y"):
        copy.deepcopy(m)(torch.tensor(11))


def test_size_only_asserts_keep_torchs_message_to_its_end():
    # torch's own tests match these to the end of the message ($)
    import sympy

    from graphcap.dynamic.assert_messages import explain
    s = sympy.Symbol("s77", integer=True, positive=True)
    msg = "Runtime assertion failed for expression Eq(Mod(s77, 4), 0) on node 'eq'"
    assert explain(msg, {}, {s: "batch"}, {}) is None
