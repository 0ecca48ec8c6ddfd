"""A submodule registered under two names of one parent: its non-persistent buffer is
non-persistent under both FQNs (the state walk follows every name, as
``named_buffers(remove_duplicate=False)`` does)."""
import torch

import graphcap


class _Child(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scratch", torch.ones(2), persistent=False)

    def forward(self, x):
        return x + self.scratch


class _TwoNamesOneChild(torch.nn.Module):
    def __init__(self):
        super().__init__()
        child = _Child()
        self.a = child
        self.b = child

    def forward(self, x):
        return self.a(x) * self.b(x)


def test_shared_child_buffer_is_non_persistent_under_every_name():
    ep = graphcap.export(_TwoNamesOneChild(), (torch.randn(2),))
    buffers = {s.target: s.persistent for s in ep.graph_signature.input_specs if s.target}
    assert buffers == {"a.scratch": False, "b.scratch": False}
    assert "a.scratch" not in ep.state_dict and "b.scratch" not in ep.state_dict
    x = torch.randn(2)
    torch.testing.assert_close(ep.module()(x), _TwoNamesOneChild()(x))
