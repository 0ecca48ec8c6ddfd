"""The speed measures of the trace keep programs and process state as they were.

* ``graphcap.young_heap``: the heap that existed before an export is kept out
  of garbage collections while it traces, and is given back whichever way the
  export ends; a process that froze its heap itself keeps its freeze.
* ``graphcap.trace.fakify.fake_state``: plain parameters and buffers take a
  short path to their fake copies; the copies are what ``from_tensor`` gives,
  tied weights share one, and tensors that share a storage stay aliased.
* ``graphcap.torch_private.fake.tracing_fake_mode``: views of symbolically
  sized tensors skip the fake-tensor cache; the results are the same.
"""
from __future__ import annotations

import gc

import pytest
import torch

import graphcap
from graphcap import young_heap
from graphcap.torch_private.fake import FakeTensor, FakeTensorMode, fake_of_plain_leaf, tracing_fake_mode
from graphcap.trace import fakify


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return self.lin(x).view(x.shape[0], 3) * self.scale


# -- young_heap -----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_freeze_from_before():
    """These tests watch graphcap's own freeze, so they start from an empty permanent generation.
    Something before them in the worker may have frozen objects and not unfrozen them (seen once:
    375 objects, in the GPU machine's Python 3.12 image); graphcap then stands aside, which
    ``test_a_process_that_froze_its_heap_keeps_its_freeze`` checks, and the tests below would
    watch nothing. Unfreezing in a test process changes no result, only when garbage is looked at."""
    if gc.get_freeze_count():
        gc.unfreeze()
    yield


def test_the_old_heap_is_frozen_only_while_the_trace_runs():
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(gc.get_freeze_count())
            return x + 1

    assert gc.get_freeze_count() == 0
    graphcap.export(Probe(), (torch.ones(2),))
    assert seen and seen[0] > 0, "objects made before the export were not frozen while it traced"
    assert gc.get_freeze_count() == 0, "the export left objects in the permanent generation"


def test_save_load_and_module_freeze_the_old_heap_while_they_run(monkeypatch, tmp_path):
    """Saving, loading and module() of a deep program allocate in proportion to its nodes: a full
    collection inside them must not walk the heap that was there before (their cost would grow
    faster than the program), and each gives the heap back when it returns."""
    from graphcap import serialize
    from graphcap.runtime import exported_module

    ep = graphcap.export(_Small(), (torch.ones(2, 4),))
    seen: dict[str, int] = {}

    def probing(name, fn):
        def probe(*args, **kwargs):
            seen[name] = gc.get_freeze_count()
            return fn(*args, **kwargs)
        return probe

    monkeypatch.setattr(serialize, "save", probing("save", serialize.save))
    monkeypatch.setattr(serialize, "load", probing("load", serialize.load))
    monkeypatch.setattr(exported_module, "build_module", probing("module", exported_module.build_module))
    path = tmp_path / "small.pt2"
    graphcap.save(ep, path)
    loaded = graphcap.load(path)
    module = loaded.module()
    assert set(seen) == {"save", "load", "module"}, seen
    assert all(count > 0 for count in seen.values()), f"the old heap was not frozen: {seen}"
    assert gc.get_freeze_count() == 0, "a save, load or module() left objects in the permanent generation"
    torch.testing.assert_close(module(torch.ones(2, 4)), ep.module()(torch.ones(2, 4)))


def test_the_heap_is_given_back_when_the_export_fails():
    class Fails(torch.nn.Module):
        def forward(self, x):
            raise ValueError("user error")

    with pytest.raises(graphcap.TraceError):
        graphcap.export(Fails(), (torch.ones(2),))
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_its_heap_keeps_its_freeze():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        graphcap.export(_Small(), (torch.ones(2, 4),))
        # objects freed by reference counting leave the permanent generation; nothing else does
        assert gc.get_freeze_count() > 0.9 * frozen, "graphcap unfroze the user's frozen heap"
    finally:
        gc.unfreeze()


def _still_frozen(outer: int) -> bool:
    """An unfreeze empties the permanent generation; a frozen object freed by its reference count
    meanwhile (a finalizer, another thread's garbage) lowers the count by one, not to nothing."""
    return gc.get_freeze_count() >= outer - max(100, outer // 100)


def test_nested_blocks_freeze_once_and_unfreeze_at_the_outermost():
    with young_heap.trace_allocations_only():
        outer = gc.get_freeze_count()
        assert outer > 1000  # the heap of a process that imported torch
        with young_heap.trace_allocations_only():
            assert _still_frozen(outer) and gc.get_freeze_count() <= outer, "the inner block froze again"
        assert _still_frozen(outer), "the inner block unfroze the outer one's heap"
    assert gc.get_freeze_count() == 0


def test_old_garbage_waits_for_the_end_of_the_block_and_is_collected_after():
    import weakref

    class Node:
        pass

    old = Node()
    old.me = old  # a cycle made before the block: frozen inside it
    ref = weakref.ref(old)
    with young_heap.trace_allocations_only():
        del old
        gc.collect()
        assert ref() is not None, "the block did not keep the old heap out of collections"
        young = Node()
        young.me = young  # a cycle made inside: collected inside
        young_ref = weakref.ref(young)
        del young
        gc.collect()
        assert young_ref() is None
    gc.collect()
    assert ref() is None, "the old heap was not given back to the collector"


# -- fake_state -------------------------------------------------------------------------------

def _fake_mode():
    return fakify.new_fake_mode()


def _same_metadata(a: torch.Tensor, b: torch.Tensor) -> None:
    assert type(a) is type(b) is FakeTensor
    assert (a.shape, a.stride(), a.dtype, a.device, a.requires_grad, a.is_leaf) == \
           (b.shape, b.stride(), b.dtype, b.device, b.requires_grad, b.is_leaf)
    assert isinstance(a, torch.nn.Parameter) == isinstance(b, torch.nn.Parameter)
    assert a.storage_offset() == b.storage_offset()


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Parameter(torch.randn(3, 4)),
    lambda: torch.nn.Parameter(torch.randn(3, 4), requires_grad=False),
    lambda: torch.randn(2, 3).t().contiguous(),
    lambda: torch.zeros(5, dtype=torch.int64),
    lambda: torch.nn.Parameter(torch.empty(0, 4)),
    lambda: torch.empty_strided((3, 4), (1, 3)).normal_(),  # a non-contiguous leaf: strides kept
    lambda: torch.nn.Parameter(torch.randn(2, 2, device="meta")),
], ids=["param", "frozen-param", "buffer", "int-buffer", "empty", "transposed", "meta-param"])
def test_a_plain_leafs_fake_copy_is_what_from_tensor_gives(make):
    t = make()
    assert fake_of_plain_leaf(_fake_mode(), t) is not None, "the short path was not taken"
    fast = fakify.fake_state(_fake_mode(), [t])[id(t)]
    _same_metadata(fast, FakeTensorMode(allow_non_fake_inputs=True).from_tensor(t, static_shapes=True))


def test_meeting_the_real_tensor_again_gives_the_same_fake_copy():
    mode = _fake_mode()
    p = torch.nn.Parameter(torch.randn(3))
    fake = fakify.fake_state(mode, [p])[id(p)]
    assert mode.from_tensor(p, static_shapes=True) is fake


def test_tied_weights_share_one_fake_copy():
    p = torch.nn.Parameter(torch.randn(3))
    fakes = fakify.fake_state(_fake_mode(), [p, p])
    assert len(fakes) == 1


def test_tensors_sharing_a_storage_keep_aliasing_among_their_fake_copies():
    base = torch.nn.Parameter(torch.randn(6))
    view = base.detach()[2:]  # a buffer that views a weight's storage
    fakes = fakify.fake_state(_fake_mode(), [base, view])
    assert fakes[id(base)].untyped_storage()._cdata == fakes[id(view)].untyped_storage()._cdata
    assert fakes[id(view)].storage_offset() == 2


def test_a_state_tensor_an_input_aliases_keeps_aliasing_it():
    weight = torch.randn(4)
    user_input = weight[1:]
    mode = _fake_mode()
    fake_weight = fakify.fake_state(mode, [weight], others=[user_input])[id(weight)]
    fake_input = mode.from_tensor(user_input, static_shapes=True)
    assert fake_weight.untyped_storage()._cdata == fake_input.untyped_storage()._cdata


def test_exports_with_shared_storage_state_match_eager():
    class Shares(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(6))
            self.register_buffer("tail", self.w.detach()[3:])

        def forward(self, x):
            return x * self.w[:3] + self.tail

    m, x = Shares(), torch.randn(3)
    ep = graphcap.export(m, (x,))
    torch.testing.assert_close(ep.module()(x), m(x))


# -- tracing_fake_mode ---------------------------------------------------------------------------

def test_the_tracing_mode_is_torchs_class_so_control_flow_finds_its_fake_rules():
    mode = tracing_fake_mode(allow_non_fake_inputs=True)
    assert type(mode) is FakeTensorMode


def test_symbolic_views_give_what_the_cached_path_gives():
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from graphcap.torch_private.shapes import new_shape_env
    results, hits = [], []
    for make in (tracing_fake_mode, FakeTensorMode):
        mode = make(shape_env=new_shape_env(), allow_non_fake_inputs=True)
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
        x = mode.from_tensor(torch.randn(5, 6), symbolic_context=ctx)  # real tensor made outside the mode
        assert isinstance(x.shape[0], torch.SymInt)
        hits_before = FakeTensorMode.cache_hits
        with mode:
            outs = [x.view(-1), x.view(-1), x.t(), x.t(), x[1:], x.unsqueeze(0), x.view(x.shape[0], 2, 3)]
        hits.append(FakeTensorMode.cache_hits - hits_before)
        results.append([(tuple(map(str, o.shape)), tuple(map(str, o.stride())), str(o.storage_offset()))
                        for o in outs])
    assert results[0] == results[1]
    # the repeated views hit torch's cache in a plain mode and skip it in the tracing mode
    assert hits[1] > 0 and hits[0] == 0


def test_dynamic_export_with_views_matches_eager_across_sizes():
    m = _Small()
    ep = graphcap.export(m, (torch.randn(2, 4),), dynamic_shapes=({0: graphcap.Dim("batch")},))
    for n in (2, 3, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(ep.module()(x), m(x))


# -- code generated on first use ---------------------------------------------------------------

def test_programs_hold_only_plain_graph_modules_with_their_code():
    from torch.fx._lazy_graph_module import _LazyGraphModule

    class Branches(torch.nn.Module):
        def forward(self, x):
            def inner(y):
                return torch.cond(y.sum() > 1, lambda z: z.cos(), lambda z: z.sin(), (y,))
            return torch.cond(x.sum() > 0, inner, lambda y: y - 1, (x,))

    m, x = Branches(), torch.randn(3)
    ep = graphcap.export(m, (x,))
    modules = dict(ep.graph_module.named_modules())
    assert len(modules) >= 3  # the program and its branches, nested ones included
    for name, mod in modules.items():
        assert isinstance(mod, torch.fx.GraphModule) and not isinstance(mod, _LazyGraphModule), name
        assert "def forward" in mod.code, name
    for sample in (x, -x, torch.full((3,), 5.0)):
        torch.testing.assert_close(ep.module()(sample), m(sample))
