"""Unflattened graphs are complete and compilable: every node but the output (and the
reference to a preserved submodule, which is a module) carries meta["val"] (state reads,
submodule calls, preserved call sites); torch.compile(fullgraph)
of an unflattened submodule traces its forward (generated beforehand); a preserved call that
needs a size the caller computed from another size recomputes the whole chain."""
import torch
from torch.export import Dim

import graphcap


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2, 3))

    def forward(self, x):
        return x / 2 + self.w, x * x


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.register_buffer("b", torch.ones(2, 3))

    def forward(self, x):
        a, b = self.inner(x)
        c, _ = self.inner(a)
        return a + b + c - self.b


def test_every_unflattened_node_has_a_value():
    for preserve in ((), ("inner",)):
        ep = graphcap.export(Outer(), (torch.rand(2, 3),), preserve_module_call_signature=preserve)
        unf = graphcap.unflatten(ep)
        for module in unf.modules():
            graph = getattr(module, "graph", None)
            if graph is None:
                continue
            for node in graph.nodes:
                if node.op == "get_attr" and isinstance(getattr(module, node.target, None), torch.nn.Module):
                    continue  # the submodule a preserved call site calls (whatever sits there now)
                if node.op != "output":
                    assert node.meta.get("val") is not None, (preserve, node.format_node())
        torch.testing.assert_close(unf(torch.ones(2, 3)), Outer()(torch.ones(2, 3)))


def test_unflattened_submodule_compiles_in_place_without_graph_breaks():
    ep = graphcap.export(Outer(), (torch.rand(2, 3),))
    unf = graphcap.unflatten(ep)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    unf.inner.compile(backend=backend, fullgraph=True)
    x = torch.randn(2, 3)
    torch.testing.assert_close(unf(x), Outer()(x))
    assert len(graphs) >= 1
    unf.compile(backend=backend)
    torch.testing.assert_close(unf(x), Outer()(x))


class Half(torch.nn.Module):
    def forward(self, x, y):
        return y[: x.size(0) // 2]


class Halves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Half()
        self.second = Half()

    def forward(self, x, y):
        d = x.size(0) // 2
        return y[d:] + self.first(x, y) + self.second(x, y)


def test_preserved_call_recomputes_a_derived_size_chain():
    half = Dim("half", max=512)
    ep = graphcap.export(Halves(), (torch.ones(10), torch.ones(10)), dynamic_shapes=((2 * half,), (2 * half,)),
                         preserve_module_call_signature=("first",))
    unf = graphcap.unflatten(ep)
    for n in (4, 10, 32):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(unf(x, y), Halves()(x, y))
    sizes = [n for n in unf.first.graph.nodes if n.target is torch.ops.aten.sym_size.int]
    assert len(sizes) == 1  # read inside the call, not passed in
    unf.first = Half()  # the preserved call stays swappable
    torch.testing.assert_close(unf(torch.ones(6), torch.arange(6.0)), Halves()(torch.ones(6), torch.arange(6.0)))


class MaybeNone(torch.nn.Module):
    def forward(self, x):
        if x is None:
            return torch.ones(3), torch.ones(3)
        return x + x, x * x


class CallsWithTensorAndNone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = MaybeNone()

    def forward(self, x, y):
        a, b = self.m(x)
        c, d = self.m(y)
        return a + b + c + d


def test_preserved_module_called_with_a_tensor_and_with_none_picks_each_call():
    x = torch.randn(3)
    ep = graphcap.export(CallsWithTensorAndNone(), (x, None), preserve_module_call_signature=("m",))
    unf = graphcap.unflatten(ep)
    torch.testing.assert_close(unf(x, None), CallsWithTensorAndNone()(x, None))
    torch.testing.assert_close(unf.m(None)[0], torch.ones(3))  # the None call, not the tensor one
    torch.testing.assert_close(unf.m(x)[1], x * x)


class Converts(torch.nn.Module):
    def __init__(self, k=4.0):
        super().__init__()
        self.k = k

    def forward(self, x):
        a = x.to(torch.float32)  # x is float32 already: a is x
        return x + self.k + a


class ReadsInputAfter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Converts()

    def forward(self, x):
        return self.child(x) + x * 2  # x is read after the call that converted it


def test_preserved_call_with_a_no_op_conversion_stays_swappable():
    import warnings
    x = torch.ones(2, 3)
    ep = graphcap.export(ReadsInputAfter(), (x,), preserve_module_call_signature=("child",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the call keeps its signature
        unf = graphcap.unflatten(ep)
    unf.set_submodule("child", Converts(k=10.0))
    eager = ReadsInputAfter()
    eager.child = Converts(k=10.0)
    torch.testing.assert_close(unf(x), eager(x))
