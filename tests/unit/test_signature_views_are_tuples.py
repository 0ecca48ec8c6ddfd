"""The graph signature's views of names (``parameters``, ``buffers``, ``user_inputs``, ...) are
tuples, as torch.export's are: code written against torch compares them with tuples, hashes them,
uses them as dict keys, and cannot change the signature through them."""
from __future__ import annotations

import torch
from torch import nn

import graphcap

_VIEWS = ("parameters", "buffers", "non_persistent_buffers", "lifted_tensor_constants", "lifted_custom_objs",
          "user_inputs", "user_outputs", "input_tokens", "output_tokens")


class _State(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))
        self.register_buffer("work", torch.ones(4), persistent=False)
        self.offsets = torch.arange(4.0)

    def forward(self, x, flag: bool, *, gain):
        self.seen.add_(x.sum(0))
        y = self.proj(x) * gain + self.offsets + self.work
        return y, y.sum()


def _args():
    return (torch.randn(3, 4), True), {"gain": torch.full((4,), 2.0)}


def test_every_view_is_a_tuple_equal_to_torchs():
    args, kwargs = _args()
    ours = graphcap.export(_State(), args, kwargs).graph_signature
    theirs = torch.export.export(_State(), args, kwargs).graph_signature
    for view in _VIEWS:
        assert type(getattr(ours, view)) is tuple, view
        assert getattr(ours, view) == getattr(theirs, view), view
    assert ours.user_inputs == ("x", True, "gain")
    assert ours.non_persistent_buffers == ("work",)


def test_views_hash_and_do_not_write_back():
    args, kwargs = _args()
    ep = graphcap.export(_State(), args, kwargs)
    sig = ep.graph_signature
    by_names = {sig.parameters: "params", sig.buffers: "buffers"}
    assert by_names[("proj.weight", "proj.bias")] == "params"
    assert by_names[("seen", "work")] == "buffers"
    # a caller extending a view builds a new tuple; the program is unchanged
    more = sig.buffers + ("extra",)
    assert more[-1] == "extra" and sig.buffers == ("seen", "work")
    ep.validate()


def test_views_after_decomposition_and_reexport():
    args, kwargs = _args()
    ep = graphcap.export(_State(), args, kwargs).run_decompositions()
    assert type(ep.graph_signature.user_outputs) is tuple and len(ep.graph_signature.user_outputs) == 2
    again = graphcap.export(ep.module(), args, kwargs)
    assert again.graph_signature.parameters == ("proj.weight", "proj.bias")
    assert again.graph_signature.lifted_tensor_constants == ("offsets",)
