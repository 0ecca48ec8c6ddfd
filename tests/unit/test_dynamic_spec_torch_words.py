"""A spec whose structure does not match the inputs is refused with torch.export's statement of
the mismatch (what code written against torch.export matches on) after graphcap's own message: a tuple spec for a
list input (and the reverse) included, which graphcap used to accept. The reference is
torch.export's message for the same mistake."""
from __future__ import annotations

import re

import pytest
import torch
from torch._dynamo.exc import UserError
from torch.export import Dim

import graphcap


class Nested(torch.nn.Module):
    def forward(self, x):
        return x["k"]["k"][0] + x["k"]["k"][1]


class Pair(torch.nn.Module):
    def forward(self, xs, n):
        return xs[0] + xs[1] * n


NESTED = ({"k": {"k": [torch.rand(4), torch.rand(4)]}},)
PAIR = ((torch.rand(3, 2), torch.rand(3, 2)), 2)
d = Dim("d")

MISTAKES = {
    "dict keyed by the inner dict's key": (Nested(), NESTED, {"k": {"k": [d, d]}}),
    "extra top-level key": (Nested(), NESTED, {"x": {"k": [(d,), (d,)]}, "k": {"k": [(d,), (d,)]}}),
    "a Dim where a tensor's spec goes": (Nested(), NESTED, ({"k": {"k": [d, d]}},)),
    "tuple spec for a list input": (Nested(), NESTED, ({"k": {"k": (d, d)}},)),
    "list spec for a tuple input": (Pair(), PAIR, ([{0: d}, {0: d}], None)),
    "a Dim for a list": (Nested(), NESTED, ({"k": {"k": d}},)),
    "one entry too many": (Nested(), NESTED, ({"k": {"k": [(d,), (d,), (d,)]}},)),
    "keys differ": (Nested(), NESTED, ({"k": {"K": [(d,), (d,)]}},)),
    "list longer than the rank": (Pair(), PAIR, (({0: d}, [d, None, None]), None)),
    "dim mapped to a string": (Pair(), PAIR, {"xs": ({0: "d"}, None), "n": None}),
    "shape for a float": (Pair(), ((torch.rand(3, 2), torch.rand(3, 2)), 2.0), (({0: d}, {0: d}), {0: d})),
}


def _torch_sentence(m, args, spec) -> str:
    with pytest.raises(UserError) as info:
        torch.export.export(m, args, dynamic_shapes=spec)
    first = str(info.value).splitlines()[0]
    # the statement of the mismatch (torch's first sentence), not the advice that follows it
    return first.split(" For more information about this error")[0].split(". ")[0]


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_spec_mistake_carries_torchs_sentence(case):
    m, args, spec = MISTAKES[case]
    expected = _torch_sentence(m, args, spec)
    with pytest.raises(UserError, match=re.escape(expected)) as info:
        graphcap.export(m, args, dynamic_shapes=spec)
    assert isinstance(info.value, graphcap.ExportInputError)
    assert "How to fix" in str(info.value)  # graphcap's own words stay


@pytest.mark.parametrize("spec", [({"k": {"k": [(d,), (d,)]}},), ({"k": {"k": [{0: d}, [d]]}},)])
def test_matching_structure_still_exports(spec):
    ep = graphcap.export(Nested(), NESTED, dynamic_shapes=spec)
    x = {"k": {"k": [torch.rand(6), torch.rand(6)]}}
    torch.testing.assert_close(ep.module()(x), Nested()(x))


def test_tuple_spec_for_tuple_input_exports():
    ep = graphcap.export(Pair(), PAIR, dynamic_shapes=(({0: d}, {0: d}), None))
    xs = (torch.rand(5, 2), torch.rand(5, 2))
    torch.testing.assert_close(ep.module()(xs, 2), Pair()(xs, 2))


def test_static_int_that_differs_from_the_example_says_torchs_sentence():
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    args = (torch.randn(5, 3), torch.randn(5, 3))
    with pytest.raises(torch.fx.experimental.symbolic_shapes.ConstraintViolationError) as ref:
        torch.export.export(Add(), args, dynamic_shapes=({0: 4}, None))
    expected = str(ref.value).splitlines()[0]
    with pytest.raises(UserError, match=re.escape(expected)):
        graphcap.export(Add(), args, dynamic_shapes=({0: 4}, None))


@pytest.mark.parametrize("spec", [(None, None), {"xs": None, "n": None}])
def test_none_for_a_container_input_means_every_tensor_in_it_is_static(spec):
    """A deliberate difference (docs/torch-suite.md): torch.export refuses None for a tuple input."""
    ep = graphcap.export(Pair(), PAIR, dynamic_shapes=spec)
    assert not ep.range_constraints
    with pytest.raises(graphcap.errors.RuntimeInputError):
        ep.module()((torch.rand(4, 2), torch.rand(4, 2)), 2)
