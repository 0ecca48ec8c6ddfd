"""Nothing left behind: graphcap's public calls leave the process as they found it.

Every public call (export static and dynamic, ``module()`` and running it,
``run_decompositions``, save, load) is made between two snapshots of the
process-wide state graphcap touches while it works — torch's pytree registry,
grad/autocast/inference modes, backend and determinism flags, torch.compiler's
flags, fx and shape-engine config, mode stacks, the builtins graphcap replaces
during a trace, ShapeEnv's class, dynamo's counters — and the snapshots must be
equal. A compiled function is not recompiled because graphcap exported.
"""
from __future__ import annotations

import builtins
import collections
import dataclasses
import io
import math
import warnings
from typing import NamedTuple

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import graphcap
from conftest import build_zoo
from graphcap.torch_private import pytree as private_pytree


def _config(module) -> dict:
    return dict(module.get_config_copy()) if hasattr(module, "get_config_copy") else {}


def snapshot() -> dict:
    import torch._dynamo  # its counters and config
    import torch.fx.experimental._config as fx_experimental_config
    from torch._dynamo.utils import counters

    return {
        "pytree": private_pytree.pytree_registry_snapshot(),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "autocast": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
        "backends": (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
                     torch.backends.cudnn.deterministic, torch.backends.mkldnn.enabled,
                     torch._C._get_nnpack_enabled()),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "compiler": (torch.compiler.is_compiling(), torch.compiler.is_exporting(),
                     torch.compiler.is_dynamo_compiling()),
        "default_dtype": torch.get_default_dtype(),
        "fx_config": _config(torch.fx.config),
        "fx_experimental_config": _config(fx_experimental_config),
        "dynamo_config": _config(torch._dynamo.config),
        "stack_trace_anchors": set(getattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", ())),  # torch 2.13 on
        "mode_stacks": (torch._C._len_torch_dispatch_stack(), torch._C._len_torch_function_stack(),
                        torch._ops._len_torch_dispatch_stack_pre_dispatch()),
        # what graphcap replaces while it traces: builtins, and the public torch.cond entry
        # (graphcap.torch_private.cond_entry)
        "builtins": (builtins.max, builtins.min, math.pow, torch.cond),
        "shape_env_class": {k: v for k, v in vars(ShapeEnv).items()},
        "dynamo_counters": {k: dict(v) for k, v in counters.items()},
    }


class ShapeEnvCacheProbe:
    """A user's own ShapeEnv with one memoized answer: graphcap must not empty ShapeEnv's
    class-level caches (which would drop it for every ShapeEnv of the process)."""

    def __init__(self):
        from torch._dynamo.source import ConstantSource
        self.env = ShapeEnv()
        self.expr = self.env.create_symbol(5, ConstantSource("probe")) + 1
        # a method memoized on its arguments on every supported torch line (guarding_hint_or_throw
        # from 2.12 on; size_hint on 2.10 and 2.11)
        self.name = "guarding_hint_or_throw" if hasattr(ShapeEnv, "guarding_hint_or_throw") else "size_hint"
        self.memoized = getattr(ShapeEnv, self.name)
        getattr(self.env, self.name)(self.expr)

    def still_cached(self) -> bool:
        hits = self.memoized.cache_info().hits
        getattr(self.env, self.name)(self.expr)
        return self.memoized.cache_info().hits == hits + 1


def assert_unchanged(before: dict, after: dict, call: str) -> None:
    changed = [k for k in before if before[k] != after[k]]
    assert not changed, f"{call} left process state changed: {changed}"


# ---------------------------------------------------------------------------
# models with structured inputs and outputs
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Batch:  # never registered: graphcap flattens it by its attributes
    image: torch.Tensor
    scale: torch.Tensor


class Prediction(NamedTuple):
    logits: torch.Tensor
    features: torch.Tensor


@dataclasses.dataclass
class Report:  # an unregistered dataclass as output
    score: torch.Tensor
    label: str


class StructuredModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, batch: Batch):
        features = self.conv(batch.image * batch.scale).mean(dim=(2, 3))
        logits = self.fc(features)
        return Prediction(logits, features), Report(logits.sum(dim=1), "ok")


def _structured_inputs(n: int = 2):
    return (Batch(torch.randn(n, 3, 8, 8), torch.rand(n, 1, 1, 1)),)


def _calls_of_one_program(model, args, dynamic_shapes=None):
    """Each public call on one model, as (name, thunk); the ep is made by the first."""
    box = {}

    def export():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the auto-flatten warning
            box["ep"] = graphcap.export(model, args, dynamic_shapes=dynamic_shapes)

    def module_and_call():
        with torch.no_grad():
            box["ep"].module()(*args)

    def decompose():
        box["decomposed"] = box["ep"].run_decompositions()
        with torch.no_grad():
            box["decomposed"].module()(*args)

    def save():
        box["file"] = io.BytesIO()
        graphcap.save(box["ep"], box["file"])

    def load():
        box["file"].seek(0)
        loaded = graphcap.load(box["file"])
        with torch.no_grad():
            loaded.module()(*args)

    return box, [("export", export), ("module()", module_and_call), ("run_decompositions", decompose),
                 ("save", save), ("load", load)]


def _check_each_call(model, args, dynamic_shapes=None):
    box, calls = _calls_of_one_program(model, args, dynamic_shapes)
    for name, call in calls:
        probe = ShapeEnvCacheProbe()
        before = snapshot()
        call()
        assert_unchanged(before, snapshot(), name)
        assert probe.still_cached(), f"{name} emptied ShapeEnv's class-level caches"
    return box


def test_structured_io_model_static_leaves_nothing_behind():
    box = _check_each_call(StructuredModel().eval(), _structured_inputs())
    # module() rebuilds the unregistered classes from the program's own specs
    (pred, report), = [box["ep"].module()(*_structured_inputs())]
    assert isinstance(pred, Prediction) and isinstance(report, Report) and report.label == "ok"
    assert Batch not in private_pytree.pytree_registry_snapshot()["nodes"]
    assert Report not in private_pytree.pytree_registry_snapshot()["nodes"]


def test_structured_io_model_dynamic_leaves_nothing_behind():
    batch = graphcap.Dim("batch", min=2, max=64)
    spec = ([{0: batch}, {0: batch}],)  # a flattened class's spec: one entry per child, in order
    box = _check_each_call(StructuredModel().eval(), _structured_inputs(), dynamic_shapes=spec)
    pred, _ = box["ep"].module()(*_structured_inputs(5))
    assert pred.logits.shape == (5, 5)


def test_resnet_from_the_zoo_leaves_nothing_behind():
    built = build_zoo("tv_resnet18")
    _check_each_call(built.model.eval(), tuple(built.args))


def test_a_class_the_user_registered_stays_registered():
    @dataclasses.dataclass
    class Mine:
        x: torch.Tensor

    graphcap.register_dataclass(Mine)
    try:
        before = snapshot()
        ep = graphcap.export(lambda m: Mine(m.x + 1), (Mine(torch.ones(2)),))
        assert_unchanged(before, snapshot(), "export")
        assert Mine in private_pytree.pytree_registry_snapshot()["nodes"]
        assert isinstance(ep.module()(Mine(torch.ones(2))), Mine)
    finally:
        private_pytree.deregister_python_node(Mine)


def test_registration_is_removed_when_the_export_fails():
    class Holder:
        def __init__(self, t):
            self.t = t

    def broken(h):
        raise ValueError("user failure")

    before = snapshot()
    with warnings.catch_warnings(), pytest.raises(graphcap.TraceError):
        warnings.simplefilter("ignore")
        graphcap.export(broken, (Holder(torch.ones(2)),))
    assert_unchanged(before, snapshot(), "failed export")


def test_a_saved_program_with_flattened_classes_loads_and_runs_in_this_process():
    box = _check_each_call(StructuredModel().eval(), _structured_inputs())
    box["file"].seek(0)
    loaded = graphcap.load(box["file"])
    pred, report = loaded.module()(*_structured_inputs())
    assert isinstance(pred, Prediction) and isinstance(report, Report)


# ---------------------------------------------------------------------------
# control flow and torch.compile
# ---------------------------------------------------------------------------

class Branchy(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda t: t.sin(), lambda t: t.cos(), (x,))


def _compile_counter():
    counts = collections.Counter()

    def backend(gm, example_inputs):
        counts["compiles"] += 1
        return gm.forward

    return counts, backend



def test_control_flow_export_leaves_nothing_behind():
    x = torch.randn(6, 3)
    dims = ({0: graphcap.Dim("n", min=2, max=32)},)
    for dynamic_shapes in (None, dims):
        _check_each_call(Branchy(), (x,), dynamic_shapes)


def test_compiled_function_is_not_recompiled_after_an_export():
    import torch._dynamo

    counts, backend = _compile_counter()

    @torch.compile(backend=backend)
    def f(x):
        return x * 2 + 1

    x = torch.randn(3)
    f(x)
    graphcap.export(StructuredModel().eval(), _structured_inputs())
    f(x)
    assert counts["compiles"] == 1
    torch._dynamo.reset()


def test_compiled_function_is_not_recompiled_after_a_control_flow_export():
    import torch._dynamo

    counts, backend = _compile_counter()

    @torch.compile(backend=backend)
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))

    x = torch.randn(3)
    f(x)
    before = counts["compiles"]
    graphcap.export(Branchy(), (torch.randn(6, 3),), dynamic_shapes=({0: graphcap.Dim("n", min=2, max=32)},))
    f(x)
    assert counts["compiles"] == before
    torch._dynamo.reset()


def test_module_of_a_program_with_flattened_classes_exports_again():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(StructuredModel().eval(), _structured_inputs())
        before = snapshot()
        again = graphcap.export(ep.module(), _structured_inputs())
    assert_unchanged(before, snapshot(), "export of module()")
    args = _structured_inputs(2)
    (p1, r1), (p2, r2) = ep.module()(*args), again.module()(*args)
    torch.testing.assert_close(p1.logits, p2.logits)
    assert isinstance(r2, Report) and r2.label == r1.label


def test_a_module_input_program_saves_and_loads_without_registering_anything():
    def scale_by(layer, x):
        return layer(x) * 2

    layer = torch.nn.Linear(3, 3)
    before = snapshot()
    ep = graphcap.export(scale_by, (layer, torch.ones(2, 3)))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    other = torch.nn.Linear(3, 3)
    torch.testing.assert_close(loaded.module()(other, torch.ones(2, 3)), other(torch.ones(2, 3)) * 2)
    assert_unchanged(before, snapshot(), "export/save/load with a module input")


def test_a_dataclass_registered_with_torch_checks_and_runs_through_graphcaps_walks():
    @dataclasses.dataclass
    class Pair:
        flag: bool
        count: int
        t: torch.Tensor

    torch.export.register_dataclass(Pair)  # torch's own registration (its context is [names, none names])
    try:
        ep = graphcap.export(lambda p: p.t * p.count, (Pair(True, 3, torch.ones(3)),))
        torch.testing.assert_close(ep.module()(Pair(True, 3, torch.full((3,), 2.0))), torch.full((3,), 6.0))
        with pytest.raises(graphcap.RuntimeInputError):
            ep.module()((torch.ones(3),))
    finally:
        private_pytree.deregister_python_node(Pair)
