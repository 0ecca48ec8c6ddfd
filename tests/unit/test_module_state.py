"""What forward does to the user's modules during export: buffer reassignment, attribute writes."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import graphcap


class ReassignsBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = nn.Buffer(torch.ones(2, 3), persistent=False)

    def forward(self, x):
        y = self.buf
        w1 = self.buf + 3
        w3 = self.buf + 5
        self.buf = w1
        z = self.buf
        self.buf = w3
        return x + y + z


def test_reassigned_buffer_is_an_in_graph_copy_and_module_matches_eager():
    ep = graphcap.export(ReassignsBuffer(), (torch.randn(2, 3),))
    # training IR, as torch's: copy_ of the last new value into the buffer, no mutation output
    assert not ep.graph_signature.buffers_to_mutate
    writes = [n for n in ep.graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert [w.args[0].name for w in writes] == ["b_buf"]
    eager, exported = ReassignsBuffer(), ep.module()
    x = torch.randn(2, 3)
    for _ in range(3):  # the buffer grows by 5 per call
        torch.testing.assert_close(exported(x), eager(x))
    torch.testing.assert_close(exported.buf, eager.buf)
    decomposed = ep.run_decompositions({})
    assert list(decomposed.graph_signature.buffers_to_mutate.values()) == ["buf"]


def test_returned_old_buffer_keeps_its_value_and_submodule_buffers_count_too():
    class Sub(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.ones(2))

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.sub = Sub()

        def forward(self, x):
            old = self.sub.b
            self.sub.b = self.sub.b * 3 + x
            return old

    ep = graphcap.export(M(), (torch.ones(2),))
    assert list(ep.run_decompositions().graph_signature.buffers_to_mutate.values()) == ["sub.b"]
    eager, exported = M(), ep.module()
    for _ in range(2):
        torch.testing.assert_close(exported(torch.ones(2)), eager(torch.ones(2)))
    torch.testing.assert_close(exported.sub.b, eager.sub.b)


def test_buffer_reassigned_with_another_shape_is_refused():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.ones(2))

        def forward(self, x):
            self.b = torch.cat([self.b, x])
            return x

    with pytest.raises(graphcap.UnsupportedError, match="buffer 'b'"):
        graphcap.export(M(), (torch.ones(2),))


def test_tensor_attributes_assigned_in_forward_warn_and_are_restored():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = torch.ones(2)
            self.tensors = [torch.ones(2), torch.ones(2)]

        def forward(self, x):
            y = self.cache + self.tensors[0]
            self.cache = self.cache + 3
            self.tensors[1] = x * 2
            self.register_buffer("made_here", x + 1)
            self.fresh = x * 4
            return x + y + self.cache + self.made_here

    m = M()
    cache, tensors = m.cache, list(m.tensors)
    with pytest.warns(UserWarning, match=r"The tensor attributes .*self\.cache.*self\.tensors\[1\].*"
                                         r"were assigned during export") as record:
        ep = graphcap.export(m, (torch.ones(2),))
    text = str(record[0].message)
    assert "self.made_here" in text and "self.fresh" in text and "register_buffer" in text
    assert m.cache is cache and m.tensors == tensors and "made_here" not in dict(m.named_buffers())
    assert not hasattr(m, "fresh")
    torch.testing.assert_close(ep.module()(torch.ones(2)), M()(torch.ones(2)))


def test_no_warning_when_forward_writes_no_tensor_attribute():
    # a number it changes is told (test_side_effects_audit.py); a string, or a number given the
    # value it had, changes nothing a program could miss
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0
            self.mode = "a"

        def forward(self, x):
            self.calls = 0
            self.mode = "b"
            return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        graphcap.export(M(), (torch.ones(2),))
