"""module() of an inference-IR program that updates a user input named like a builtin.

The module works on a copy of the graph, where fx suffixes a placeholder named
``input``; the update listed as ``USER_INPUT_MUTATION target='input'`` is found by
its position in the signature, not by the copy's node name.
"""
import torch

import graphcap


class _AddsOneToInput(torch.nn.Module):
    def forward(self, input):
        input.add_(1)
        return input * 2


def test_module_of_decomposed_program_updates_input_named_input():
    x = torch.randn(3)
    ep = graphcap.export(_AddsOneToInput(), (x.clone(),)).run_decompositions({})
    targets = [s.target for s in ep.graph_signature.output_specs if s.kind.name == "USER_INPUT_MUTATION"]
    assert targets == ["input"]
    given = x.clone()
    out = ep.module()(given)
    torch.testing.assert_close(given, x + 1)
    torch.testing.assert_close(out, (x + 1) * 2)
