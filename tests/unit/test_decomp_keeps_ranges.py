"""run_decompositions never gives a program narrower than the one it decomposes.

The retrace asks its own size questions (a decomposition's special case for a
size of 1; the memory-format check made while recording each node's tensor
metadata). Answered from the example's sizes, they held a dynamic dim at its
example size: the decomposed program of ``interpolate(bilinear)`` exported at
batch 1 refused batch 2 although its range constraints still said [1, 8]. The
retrace now gives dims exported at 0 or 1 an example of 2, and refuses a
retrace that would still fix a size, naming the dims, rather than return a
smaller program.
"""
import pytest
import torch
import torch.nn.functional as F
from size_one_models import SIZE_ONE_EXAMPLES, operator_example
from torch.export import Dim

import graphcap
from graphcap.errors import UnsupportedError


class Upsample(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


def test_bilinear_exported_at_batch_one_keeps_its_batch_dim():
    spec = {"x": {0: Dim("batch", min=1, max=8), 2: Dim("h", min=2, max=32), 3: Dim("w", min=2, max=32)}}
    ep = graphcap.export(Upsample(), (torch.randn(1, 2, 4, 4),), dynamic_shapes=spec)
    decomposed = ep.run_decompositions()
    x_val = next(n for n in decomposed.graph.nodes if n.op == "placeholder").meta["val"]
    assert all(isinstance(s, torch.SymInt) for i, s in enumerate(x_val.shape) if i != 1), x_val.shape
    for shape in [(1, 2, 4, 4), (2, 2, 6, 5), (8, 2, 3, 32)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(decomposed.module()(x), Upsample()(x))


@pytest.mark.parametrize("name", sorted(SIZE_ONE_EXAMPLES))
def test_decomposed_program_holds_the_whole_range_or_is_refused(name):
    model, example, spec, sizes = operator_example(name)
    dims = list(spec["x"])
    ep = graphcap.export(model, (example,), dynamic_shapes=spec)
    try:
        decomposed = ep.run_decompositions()
    except UnsupportedError as e:
        assert "would narrow the sizes the program accepts" in str(e)
        assert any(f"d{d}" in str(e) for d in dims), str(e)  # in the spec's names
        decomposed = None
    for k in (1, 2, 5):
        x = torch.randn(*sizes(k))
        torch.testing.assert_close(ep.module()(x), model(x), equal_nan=True)
        if decomposed is not None:
            torch.testing.assert_close(decomposed.module()(x), model(x), equal_nan=True)


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def test_sizes_exported_at_one_are_retraced_as_general_sizes():
    """A table entry branching on ``x.shape[0] == 1`` takes its general branch for a program exported
    at batch 1, as it does for one exported at batch 2: the retrace's example is 2."""
    seen = []

    def relu_special_cased(x):
        seen.append(int(x.shape[0] == 1))
        if x.shape[0] == 1:
            return x.clamp_min(0)
        return torch.where(x > 0, x, 0.0)

    for batch in (1, 2):
        ep = graphcap.export(Relu(), (torch.randn(batch, 3),),
                             dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}})
        table = graphcap.default_decompositions()
        table[torch.ops.aten.relu.default] = relu_special_cased
        decomposed = ep.run_decompositions(table)
        assert "where" in str(decomposed.graph) and "clamp_min" not in str(decomposed.graph)
        for k in (1, 2, 8):
            x = torch.randn(k, 3)
            torch.testing.assert_close(decomposed.module()(x), Relu()(x))
    # the general branch every time (run_decompositions also runs the entry's path once more, at
    # batch 1, to check it holds there: test_decomp_size_paths.py)
    assert seen and set(seen) == {0}


def test_a_table_entry_deciding_a_size_is_refused():
    def relu_special_cased(x):
        if x.shape[0] == 2:  # a Python branch on a size: decided from the example
            return x.clamp_min(0)
        return torch.where(x > 0, x, 0.0)

    ep = graphcap.export(Relu(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}})
    table = graphcap.default_decompositions()
    table[torch.ops.aten.relu.default] = relu_special_cased
    with pytest.raises(UnsupportedError, match=r"batch = 2.*batch in \[1, 8\]") as raised:
        ep.run_decompositions(table)
    assert "del table[op]" in str(raised.value)
    x = torch.randn(4, 3)
    torch.testing.assert_close(ep.module()(x), Relu()(x))  # the program itself is untouched


def test_what_export_already_knew_is_no_narrowing():
    """Only what the retrace itself decides counts: a program whose ShapeEnv already knew more of a
    size than its range constraints say (a slice written into, sized by another input) decomposes."""
    class FillPrefix(torch.nn.Module):
        def forward(self, mask, fill):
            mask = mask.clone()
            mask[:, :fill.shape[-1]] = fill
            return mask

    spec = {"mask": {1: Dim("M")}, "fill": {1: Dim("N")}}
    ep = graphcap.export(FillPrefix(), (torch.randn(2, 4), torch.randn(2, 3)), dynamic_shapes=spec)
    decomposed = ep.run_decompositions()
    for m, n in [(4, 3), (5, 5), (6, 1), (2, 2)]:
        args = (torch.randn(2, m), torch.randn(2, n))
        torch.testing.assert_close(decomposed.module()(*args), FillPrefix()(*args))


class OffByFour(torch.nn.Module):
    def forward(self, x, y):
        return x + y[4:]


def test_a_relation_the_program_asserts_is_no_narrowing():
    """Replaying the program's own assert ``x.shape[0] == y.shape[0] - 4`` settles y as x + 4 in
    the retrace: nothing the program accepted is lost."""
    spec = {"x": (Dim.AUTO,), "y": (Dim.AUTO,)}
    ep = graphcap.export(OffByFour(), (torch.randn(3), torch.randn(7)), dynamic_shapes=spec)
    decomposed = ep.run_decompositions()
    for k in (0, 1, 2, 7):
        args = (torch.randn(k), torch.randn(k + 4))
        torch.testing.assert_close(decomposed.module()(*args), OffByFour()(*args))
    with pytest.raises(Exception, match="4"):  # sizes the program's assert refuses
        decomposed.module()(torch.randn(3), torch.randn(8))


def test_tied_sizes_exported_at_one_are_refused_not_narrowed():
    """x tied to y by an assert keeps its example 1 (the example 2 would break the assert), and the
    retrace settles x = 1: refused, naming the sizes, where the result used to hold them at 1 and 5."""
    spec = {"x": (Dim.AUTO,), "y": (Dim.AUTO,)}
    ep = graphcap.export(OffByFour(), (torch.randn(1), torch.randn(5)), dynamic_shapes=spec)
    try:
        decomposed = ep.run_decompositions()
    except UnsupportedError as e:
        assert "x.shape[0] = 1" in str(e)
        return
    for k in (0, 1, 2, 7):  # or, where the retrace keeps them open, every size works
        args = (torch.randn(k), torch.randn(k + 4))
        torch.testing.assert_close(decomposed.module()(*args), OffByFour()(*args))


class FirstThree(torch.nn.Module):
    """``x[:3]`` is ``Min(3, n)`` rows: the program holds for every n, and ties y's rows to it."""

    def forward(self, x, y, zs):
        return x[:3] + y @ torch.cat(zs)


@pytest.mark.parametrize("strict", [False, True])
def test_a_slice_by_a_constant_stays_clamped_through_decomposition(strict):
    """The retrace answers its size questions for the general size, as the export did: it used to
    decide n >= 3 from the example (7), settle y's rows to 3 and refuse the program it was given."""
    spec = ((Dim.DYNAMIC, Dim.DYNAMIC), (Dim.DYNAMIC, Dim.DYNAMIC), [(Dim.DYNAMIC, Dim.DYNAMIC)] * 2)
    example = (torch.randn(7, 5), torch.randn(3, 6), [torch.randn(2, 5), torch.randn(4, 5)])
    ep = graphcap.export(FirstThree(), example, dynamic_shapes=spec, strict=strict)
    decomposed = ep.run_decompositions()
    assert {str(k): v for k, v in decomposed.range_constraints.items()} == \
        {str(k): v for k, v in ep.range_constraints.items()}
    for n, k, a, b in [(7, 5, 2, 4), (2, 3, 1, 1), (3, 1, 0, 2), (0, 4, 3, 3)]:
        args = (torch.randn(n, k), torch.randn(min(3, n), a + b), [torch.randn(a, k), torch.randn(b, k)])
        torch.testing.assert_close(decomposed.module()(*args), FirstThree()(*args))
    with pytest.raises(Exception, match="Min"):  # y's rows must be min(3, n)
        decomposed.module()(torch.randn(7, 5), torch.randn(2, 6), [torch.randn(2, 5), torch.randn(4, 5)])
