"""A program's size symbols are numbered as torch.export numbers them, in each mode.

torch numbers a new symbol from its source's name: non-strict names an input by its argument
(``L['x'].size()[0]`` → s77), strict mode by its flat position in dynamo's wrapper
(``L['flat_args'][0].size()[0]`` → s6). A user who switches the import keeps the printed
program, the range constraints and any expected-output test written against torch's; graphcap's
own messages still name the argument (``x.shape[0]``, the Dim's name), never ``flat_args``.
"""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from torch.export import export as torch_export

import graphcap


class ThreeInputs(torch.nn.Module):
    def forward(self, a, xs, z=None):
        return a.sum(0) + xs[1].sum(0) + z.sum(0) + xs[0].sum(0)


class Derived(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] + y


class IntInput(torch.nn.Module):
    def forward(self, x, n):
        return x.sum(0) * n


def _cases():
    a, b, d = Dim("A"), Dim("B"), Dim("D", min=2, max=64)
    yield "named, nested, kwarg", ThreeInputs(), (torch.randn(8, 3), [torch.randn(5, 3), torch.randn(6, 3)]), \
        {"z": torch.randn(7, 3)}, {"a": {0: a}, "xs": [{0: b}, {0: Dim.AUTO}], "z": {0: d}}
    r = Dim("r", min=2, max=32)
    yield "derived", Derived(), (torch.randn(9, 4), torch.randn(8, 4)), {}, {"x": {0: r + 1}, "y": {0: r}}
    yield "hints", Derived(), (torch.randn(9, 4), torch.randn(8, 4)), {}, \
        {"x": {0: Dim.DYNAMIC, 1: Dim.AUTO}, "y": {0: Dim.DYNAMIC, 1: Dim.AUTO}}


def _input_shapes(ep) -> list[str]:
    return [str(n.meta["val"].shape) for n in ep.graph.nodes if n.op == "placeholder"]


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_symbols_are_torch_exports_in_each_mode(case, strict):
    _, model, args, kwargs, spec = case
    ours = graphcap.export(model, args, kwargs, dynamic_shapes=spec, strict=strict)
    theirs = torch_export(model, args, kwargs, dynamic_shapes=spec, strict=strict)
    assert _input_shapes(ours) == _input_shapes(theirs)
    assert sorted(map(str, ours.range_constraints)) == sorted(map(str, theirs.range_constraints))
    out = ours.module()(*args, **kwargs)
    torch.testing.assert_close(out, model(*args, **kwargs))


def test_strict_numbering_is_by_flat_position():
    model, args = Derived(), (torch.randn(9, 4), torch.randn(8, 4))
    r = Dim("r", min=2, max=32)
    ep = graphcap.export(model, args, dynamic_shapes={"x": {0: r + 1}, "y": {0: r}}, strict=True)
    non_strict = graphcap.export(model, args, dynamic_shapes={"x": {0: r + 1}, "y": {0: r}})
    # the same program, told apart only by its symbols' numbers
    assert _input_shapes(ep) != _input_shapes(non_strict)
    assert len(ep.range_constraints) == len(non_strict.range_constraints) == 2  # r and r + 1


def test_strict_messages_name_the_argument_not_its_flat_position():
    class Branches(torch.nn.Module):
        def forward(self, x, y):
            if x.shape[0] > 4:
                return x.sum(0) + y.sum(0)
            return x.sum(0)

    with pytest.raises(torch._dynamo.exc.UserError) as info:
        graphcap.export(Branches(), (torch.randn(8, 3), torch.randn(3)),
                        dynamic_shapes={"x": {0: Dim("A")}, "y": {0: Dim("B")}}, strict=True)
    text = str(info.value)
    assert "flat_args" not in text
    assert "Dim('A', min=5)" in text


def test_strict_int_input_symbol_keeps_program_sound():
    model = IntInput()
    ep = graphcap.export(model, (torch.randn(4, 3), 3), dynamic_shapes={"x": {0: Dim("b")}, "n": None}, strict=True)
    x = torch.randn(6, 3)
    torch.testing.assert_close(ep.module()(x, 3), model(x, 3))
    with pytest.raises(Exception, match="3"):
        ep.module()(x, 4)
