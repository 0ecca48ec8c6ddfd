"""Small contracts of graphcap's exported programs that torch-written code relies on."""
import pytest
import torch

import graphcap


class _OddSlice(torch.nn.Module):
    def forward(self, w):
        return w[1:-1:2]


@pytest.mark.parametrize("scale, offset, bad, remainder", [(2, 0, 11, 0), (2, 1, 10, 1), (3, -1, 12, 2)])
def test_derived_size_of_wrong_form_names_its_remainder(scale, offset, bad, remainder):
    """A size that no integer root can produce is refused with torch's modulo condition."""
    dimx = torch.export.Dim("dimx", min=3, max=6)
    example = scale * 4 + offset
    ep = graphcap.export(_OddSlice(), (torch.randn(example),), dynamic_shapes=({0: dimx * scale + offset},))
    with pytest.raises(AssertionError, match=rf"Guard failed: w\.size\(\)\[0\] % {scale} == {remainder}"):
        ep.module()(torch.randn(bad))
    good = torch.randn(scale * 5 + offset)
    torch.testing.assert_close(ep.module()(good), _OddSlice()(good))


class _SliceByItem(torch.nn.Module):
    def forward(self, x, y):
        b = x.item()
        torch._check(b >= 0)
        torch._check(b < y.size(0))
        return y[:b]


class _TwoSlicers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = _SliceByItem()
        self.second = _SliceByItem()

    def forward(self, x, y):
        return self.first(x, y) + self.second(x, y)


def test_nodes_added_for_runtime_asserts_belong_to_the_root_module():
    """Every operator node names a module: the size reads runtime asserts add sit in the root."""
    inputs = (torch.tensor(3), torch.randn(10))
    ep = graphcap.export(_TwoSlicers(), inputs, dynamic_shapes={"x": None, "y": (torch.export.Dim("n"),)})
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert all(n.meta["nn_module_stack"] for n in ops)
    size_reads = [n for n in ops if n.target is torch.ops.aten.sym_size.int]
    assert size_reads and all(list(n.meta["nn_module_stack"].values()) == [("", f"{__name__}._TwoSlicers")]
                              for n in size_reads)
    torch.testing.assert_close(torch.export.unflatten(ep)(*inputs), _TwoSlicers()(*inputs))


class _Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _TwoSlicers()

    def forward(self, x, y):
        return self.inner(x, y) * 2


def test_checks_on_a_value_read_in_a_submodule_run_in_that_submodule():
    """The checks of ``b < y.size(0)`` (``b = x.item()`` read inside ``inner.first``) are placed
    in ``inner.first``, where ``b`` exists, on every torch line: unflattened, each submodule is
    called once with its own inputs, and the checks still refuse what eager refuses."""
    inputs = (torch.tensor(3), torch.randn(10))
    ep = graphcap.export(_Nested(), inputs, dynamic_shapes={"x": None, "y": (torch.export.Dim("n"),)})
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    (item,) = [n for n in ops if n.target is torch.ops.aten.item.default]
    read_in = list(item.meta["nn_module_stack"].values())
    assert [path for path, _ in read_in] == ["", "inner", "inner.first"]
    checks = [n for n in ops if n.target is torch.ops.aten._assert_scalar.default]
    assert len(checks) >= 2 and all(list(n.meta["nn_module_stack"].values()) == read_in for n in checks)
    unflat = torch.export.unflatten(ep)
    for b in (0, 5):
        args = (torch.tensor(b), torch.randn(6))
        torch.testing.assert_close(unflat(*args), _Nested()(*args))
    with pytest.raises(RuntimeError):
        ep.module()(torch.tensor(6), torch.randn(6))


class _CheckedItemUnderNoGrad(torch.nn.Module):
    def forward(self, x, y):
        with torch.no_grad():
            a = x.item()
            torch._check(a > 2)
            torch._check(a < 6)
            picked = torch.zeros(a, 2)
        return y + picked.sum()


def test_checks_on_a_value_read_inside_a_no_grad_region_stay_in_the_program():
    """``torch._check`` on ``x.item()`` computed under no_grad is kept (inside the region)
    and refuses values eager refuses; values eager accepts give eager's result."""
    inputs = (torch.tensor(4), torch.randn(3))
    ep = graphcap.export(_CheckedItemUnderNoGrad(), inputs)
    region = next(m for m in ep.graph_module.children() if isinstance(m, torch.fx.GraphModule))
    asserts = [n for n in region.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert len(asserts) >= 2
    for bad in (1, 7):
        # torch's wrap_with_set_grad_enabled does not restore grad mode when its body
        # raises: keep the failure from leaking no_grad into later tests
        with torch.enable_grad(), pytest.raises(RuntimeError, match="Runtime assertion failed"):
            ep.module()(torch.tensor(bad), inputs[1])
    torch.testing.assert_close(ep.module()(torch.tensor(5), inputs[1]),
                               _CheckedItemUnderNoGrad()(torch.tensor(5), inputs[1]))


def test_wrong_dtype_names_the_input_and_carries_torchs_phrase():
    """module() refuses a float where int32 was exported, before computing: graphcap's sentence
    names the input, the second line is the phrase code written for torch.export matches."""
    class ToFloat(torch.nn.Module):
        def forward(self, x):
            return x.float()

    ep = graphcap.export(ToFloat(), (torch.tensor(1, dtype=torch.int32),))
    with pytest.raises(RuntimeError, match=r"(?s)\*args\[0\] to have dtype torch.int32.*Tensor dtype mismatch!"):
        ep.module()(torch.tensor(1, dtype=torch.float32))
    assert ep.module()(torch.tensor(7, dtype=torch.int32)).item() == 7.0
