"""strict=True with preserve_module_call_signature: the preserved submodules' call boundaries are
kept as non-strict capture keeps them (the call graph's signatures, one per call), the program
holds no trace of how they were found, and unflatten / swap / save-load work on the result."""
from __future__ import annotations

import collections
import copy
import dataclasses
import gc
import io
import operator
import types

import pytest
import torch
from preserved_block_models import Net

import graphcap
from graphcap.errors import ExportInputError, StrictCaptureError
from graphcap.hierarchy import SubmoduleSignatureError, unflatten


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, scale):
        return self.lin(x) * scale


class Outer(torch.nn.Module):
    """Holds a preserved module inside another; both take keyword inputs and return containers."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, *, bias=None):
        self.count.add_(1)
        h = self.inner(x, 2.0) + bias
        return {"h": h, "pair": (h.relu(), x)}


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.outer = Outer()

    def forward(self, x):
        out = self.outer(x, bias=torch.ones(4))
        return out["h"] + out["pair"][0] - out["pair"][1]


class Twice(torch.nn.Module):
    """One preserved module called twice, the second call right after the first (no node between)."""

    def __init__(self):
        super().__init__()
        self.sub = Outer()

    def forward(self, x):
        first = self.sub(x, bias=x)["h"]
        return self.sub(first, bias=x)["pair"][0]


class SameTensorTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Outer()

    def forward(self, x):
        return self.sub(x, bias=x)["h"]


class Shared(torch.nn.Module):
    """One module under two names. dynamo names every call of it by the first name it found
    (``a``), so strict capture preserves both calls as ``a`` and ``a@1``, where non-strict
    keeps only the call made through ``a``."""

    def __init__(self):
        super().__init__()
        self.a = Inner()
        self.b = self.a

    def forward(self, x):
        return self.b(self.a(x, 1.0), 3.0)


def _signatures(ep):
    return {e.fqn: e.signature for e in ep.module_call_graph}


def _both(model, args, preserve, **kw):
    return (graphcap.export(model, args, preserve_module_call_signature=preserve, **kw),
            graphcap.export(model, args, preserve_module_call_signature=preserve, strict=True, **kw))


@pytest.mark.parametrize("model, args, preserve", [
    (Net(), (torch.randn(2, 4),), ("block", "other")),
    (Nested(), (torch.randn(2, 4),), ("outer", "outer.inner")),
    (Twice(), (torch.randn(2, 4),), ("sub",)),
    (SameTensorTwice(), (torch.randn(2, 4),), ("sub",)),
], ids=["two-blocks", "nested", "called-twice", "same-tensor-twice"])
def test_strict_records_the_call_graph_non_strict_records(model, args, preserve):
    loose, strict = _both(model, args, preserve)
    assert list(_signatures(strict)) == list(_signatures(loose))
    for fqn, sig in _signatures(loose).items():
        got = _signatures(strict)[fqn]
        if sig is None:
            assert got is None, fqn
            continue
        assert got.in_spec == sig.in_spec and got.out_spec == sig.out_spec, fqn
        assert [a.name for a in got.inputs] == [a.name for a in sig.inputs], fqn
        assert [a.name for a in got.outputs] == [a.name for a in sig.outputs], fqn
        assert [getattr(a, "value", None) for a in got.inputs] == [getattr(a, "value", None) for a in sig.inputs]
    # the boundary marker is gone: the same operators as non-strict, nothing else
    assert strict.graph_module.code == loose.graph_module.code


def test_a_module_called_twice_keeps_one_signature_per_call():
    ep = graphcap.export(Twice(), (torch.randn(2, 4),), strict=True, preserve_module_call_signature=("sub",))
    sigs = _signatures(ep)
    assert sigs["sub"] is not None and sigs["sub@1"] is not None
    assert sigs["sub@1"].inputs[0].name == sigs["sub"].outputs[0].name  # the second call eats the first's h
    keys = {k for n in ep.graph.nodes for k in (n.meta.get("nn_module_stack") or {})}
    assert {"L__self__sub", "L__self__sub@1"} <= keys


def test_the_program_calls_no_marker():
    ep = graphcap.export(Nested(), (torch.randn(2, 4),), strict=True,
                         preserve_module_call_signature=("outer", "outer.inner"))
    for node in ep.graph.nodes:
        if node.op == "call_function":
            assert isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem, node.target


@pytest.mark.parametrize("model, preserve", [
    (Net(), ("block", "other")), (Nested(), ("outer", "outer.inner")), (Twice(), ("sub",)),
    (SameTensorTwice(), ("sub",)), (Shared(), ("a",))])
def test_unflattened_strict_program_runs_like_eager_and_updates_buffers(model, preserve):
    x = torch.randn(2, 4)
    eager = copy.deepcopy(model)
    unf = unflatten(graphcap.export(copy.deepcopy(model), (x,), strict=True, preserve_module_call_signature=preserve))
    for _ in range(2):  # buffers updated inside preserved modules carry over to the next call
        torch.testing.assert_close(unf(x), eager(x))
    for name, buf in eager.named_buffers():
        torch.testing.assert_close(unf.get_buffer(name), buf)


def test_a_preserved_submodule_of_a_strict_program_keeps_its_calling_convention():
    model, x = Nested(), torch.randn(2, 4)
    unf = unflatten(graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("outer", "outer.inner")))
    out = unf.outer(x, bias=torch.ones(4))  # keyword input, dict-of-tuple output, as in eager
    expected = copy.deepcopy(model.outer)(x, bias=torch.ones(4))
    assert set(out) == {"h", "pair"} and isinstance(out["pair"], tuple)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(unf.outer.inner(x, 2.0), model.outer.inner(x, 2.0))


def test_swapping_a_preserved_submodule_of_a_strict_program():
    model, x = Net(), torch.randn(2, 4)
    unf = unflatten(graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("block", "other")))
    expected = copy.deepcopy(model)(x)
    unf.block = copy.deepcopy(model.block)
    torch.testing.assert_close(unf(x), expected)
    assert unf.block.steps.item() == 1  # the replacement's own buffer took the update

    class Doubler(torch.nn.Module):
        def forward(self, x, *, mask=None):
            return x * 2, x

    unf.other = Doubler()
    eager = copy.deepcopy(model)
    eager.other = Doubler()
    torch.testing.assert_close(unf(x), eager(x))

    class NoMask(torch.nn.Module):
        def forward(self, x):
            return x, x

    unf.other = NoMask()
    with pytest.raises(SubmoduleSignatureError, match="other"):
        unf(x)


def test_swapping_the_twice_called_module_replaces_both_calls():
    model, x = Twice(), torch.randn(2, 4)
    unf = unflatten(graphcap.export(copy.deepcopy(model), (x,), strict=True, preserve_module_call_signature=("sub",)))
    unf.sub = copy.deepcopy(model.sub)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    assert unf.sub.count.item() == 2


def test_dynamic_shapes_through_a_preserved_submodule():
    model = Nested()
    batch = graphcap.Dim("batch", min=2, max=64)
    ep = graphcap.export(model, (torch.randn(3, 4),), strict=True, dynamic_shapes=({0: batch},),
                         preserve_module_call_signature=("outer", "outer.inner"))
    unf = unflatten(ep)
    for n in (2, 5, 17):
        x = torch.randn(n, 4)
        torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
        torch.testing.assert_close(unf.outer.inner(x, 2.0), model.outer.inner(x, 2.0))


def test_save_and_load_keep_the_strict_call_graph():
    model, x = Nested(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("outer", "outer.inner"))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    for fqn, sig in _signatures(ep).items():
        got = _signatures(loaded)[fqn]
        assert (got is None) == (sig is None), fqn
        if sig is not None:
            assert got.in_spec == sig.in_spec and got.out_spec == sig.out_spec
            assert [a.name for a in got.inputs] == [a.name for a in sig.inputs]
    unf = unflatten(loaded)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    unf.outer.inner = copy.deepcopy(model.outer.inner)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))


def test_decomposed_strict_program_keeps_the_preserved_calls():
    model, x = Net(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("block", "other"))
    unf = unflatten(ep.run_decompositions())
    unf.other = copy.deepcopy(model.other)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))


def test_a_path_that_is_not_a_submodule_is_refused_before_tracing():
    with pytest.raises(ExportInputError, match="not submodules"):
        graphcap.export(Net(), (torch.randn(2, 4),), strict=True, preserve_module_call_signature=("nope",))


def test_no_hook_and_no_marker_function_outlive_the_export():
    model = Net()
    graphcap.export(model, (torch.randn(2, 4),), strict=True, preserve_module_call_signature=("block",))
    assert not model.block._forward_pre_hooks and not model.block._forward_hooks
    gc.collect()
    # only functions: gc also holds objects whose attributes are not plain (an fx Proxy left by another test)
    markers = [o for o in gc.get_objects()
               if isinstance(o, types.FunctionType) and o.__name__ == "graphcap_call_boundary"]
    assert markers == []


@pytest.mark.parametrize("strict", [False, True])
def test_a_call_recorded_with_one_tensor_twice_answers_only_such_calls(strict):
    # sub(x, bias=x): the recorded graph reads one value for both inputs; a call that passes two
    # different tensors must not be answered by it (it would silently use x for both)
    model, x = SameTensorTwice(), torch.randn(2, 4)
    unf = unflatten(graphcap.export(model, (x,), strict=strict, preserve_module_call_signature=("sub",)))
    torch.testing.assert_close(unf.sub(x, bias=x), copy.deepcopy(model.sub)(x, bias=x))
    with pytest.raises(SubmoduleSignatureError, match="input 1 the same tensor as input 0"):
        unf.sub(x, bias=torch.randn(2, 4))


@pytest.mark.parametrize("strict", [False, True])
def test_later_calls_with_distinct_tensors_use_their_own_graph(strict):
    # the first call passes x twice, the second two different tensors of the same structure
    model, x = Twice(), torch.randn(2, 4)
    unf = unflatten(graphcap.export(copy.deepcopy(model), (x,), strict=strict, preserve_module_call_signature=("sub",)))
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    h, b = torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(unf.sub(h, bias=b), copy.deepcopy(model.sub)(h, bias=b))


Pair = collections.namedtuple("Pair", "a b")


class NamedTupleSub(torch.nn.Module):
    def forward(self, p):
        return Pair(p.a + 1, p.b * 2)


class NamedTupleUser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = NamedTupleSub()

    def forward(self, x):
        q = self.sub(Pair(x, x + 1))
        return q.a + q.b


def test_named_tuples_cross_a_strict_boundary():
    # dynamo builds the returned named tuple outside the module's stack, between the call's last
    # operator and its end: the call is still one call
    model, x = NamedTupleUser(), torch.randn(3)
    loose, strict = _both(model, (x,), ("sub",))
    assert _signatures(strict)["sub"].in_spec == _signatures(loose)["sub"].in_spec
    assert _signatures(strict)["sub"].out_spec == _signatures(loose)["sub"].out_spec
    unf = unflatten(strict)
    out = unf.sub(Pair(x, x))
    assert isinstance(out, Pair)
    torch.testing.assert_close(unf(x), model(x))


@dataclasses.dataclass
class Fields:
    a: torch.Tensor
    b: torch.Tensor


class DataclassSub(torch.nn.Module):
    def forward(self, f):
        return f.a + f.b


class DataclassUser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = DataclassSub()

    def forward(self, x):
        return self.sub(Fields(x, x + 1))


def test_a_structure_dynamo_cannot_pass_is_refused_naming_the_call():
    torch.utils._pytree.register_dataclass(Fields)
    try:
        with pytest.raises(StrictCaptureError, match="call signature of 'sub'") as info:
            graphcap.export(DataclassUser(), (torch.randn(3),), strict=True, preserve_module_call_signature=("sub",))
        assert "self.sub(Fields(x, x + 1))" in str(info.value) and "strict=False" in str(info.value)
        # strict=False preserves it
        ep = graphcap.export(DataclassUser(), (torch.randn(3),), preserve_module_call_signature=("sub",))
        assert _signatures(ep)["sub"] is not None
    finally:
        torch.utils._pytree._deregister_pytree_node(Fields)


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x), lambda x: x * 2, (x,))


class CondAround(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Branchy()
        self.other = Branchy()

    def forward(self, x):
        y = self.sub(x)
        return torch.cond(y.sum() > 0, lambda y: self.other(y), lambda y: y - 1, (y,))


def test_a_cond_inside_a_preserved_module_and_a_preserved_call_inside_a_cond():
    model, x = CondAround(), torch.randn(2, 3)
    with pytest.warns(UserWarning, match=r"call signature of \['other'\] is not recorded") as record:
        ep = graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("sub", "other"))
    assert any(w.filename == __file__ for w in record)  # points at the user's export call
    assert _signatures(ep)["sub"] is not None and _signatures(ep)["other"] is None
    unf = unflatten(ep)
    for t in (x, -x):  # both branches of each cond
        torch.testing.assert_close(unf(t), model(t))
    unf.sub = copy.deepcopy(model.sub)
    torch.testing.assert_close(unf(x), model(x))


def test_strict_re_export_of_a_programs_module_with_the_same_names():
    # the program's module() calls no submodule (their calls are inlined in its graph): the
    # re-export works, and records no call signature for them
    model, x = Net(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("block",))
    again = graphcap.export(ep.module(), (x,), strict=True, preserve_module_call_signature=("block",))
    assert _signatures(again).get("block") is None
    torch.testing.assert_close(again.module()(x), copy.deepcopy(model)(x))


def test_strict_re_export_names_a_submodule_the_programs_module_lacks():
    # a stateless submodule leaves no attribute in the program's module(): the name is left out
    # with a warning at the user's export call, as non-strict does, instead of an error
    model, x = NamedTupleUser(), torch.randn(3)
    ep = graphcap.export(model, (x,), strict=True, preserve_module_call_signature=("sub",))
    with pytest.warns(UserWarning, match=r"names \['sub'\].*does not call as submodules") as record:
        again = graphcap.export(ep.module(), (x,), strict=True, preserve_module_call_signature=("sub",))
    assert any(w.filename == __file__ for w in record)
    torch.testing.assert_close(again.module()(x), model(x))
