"""graphcap's programs handed, as is, to the tools that take torch.export's.

A user who changes only the import line goes on to ExecuTorch, torch.onnx,
AOTInductor, torchao's pt2e, coremltools or ``torch.export.save`` with the
program. These tests hand graphcap's program to each of them without any
conversion call and check what the consumer produces against eager (the
consumer runners are bench/consumers.py's, which also runs the whole zoo with
torch.export's program beside graphcap's: ``make consumers``). Two or three
small models per consumer here; a consumer whose package is absent (a torch line
without a paired ExecuTorch) skips with the reason.
"""
from __future__ import annotations

import copy
import importlib.util
import io
import sys
import traceback
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap.errors import GraphcapError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import consumers  # bench/consumers.py

from conftest import NEEDS_COREMLTOOLS, NEEDS_EXECUTORCH, NEEDS_ONNX, NEEDS_TORCHAO, build_zoo, quiet_warnings

# Model Explorer is pinned in the consumers extra of the 2.14 line; its adapter converts in the
# process (no server), so it needs no GPU or display.
NEEDS_MODEL_EXPLORER = pytest.mark.skipif(importlib.util.find_spec("model_explorer") is None,
                                          reason="model_explorer (ai-edge-model-explorer) not installed "
                                                 "(the consumers extra, torch 2.14 line)")
MARKS = {"et_xnnpack": [NEEDS_EXECUTORCH], "et_portable": [NEEDS_EXECUTORCH],
         "pt2e": [NEEDS_EXECUTORCH, NEEDS_TORCHAO], "onnx": [NEEDS_ONNX], "aoti": [],
         "model_explorer": [NEEDS_MODEL_EXPLORER]}


class TinyConvNet(torch.nn.Module):
    """Conv, batch norm, pooling and a linear head: the operators every consumer lowers."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.nn.functional.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x).softmax(-1)


def _tiny(name: str, dynamic: bool = False) -> consumers.Case:
    torch.manual_seed(0)
    if name == "tiny_conv":
        model, args, args2 = TinyConvNet().eval(), (torch.randn(2, 3, 16, 16),), (torch.randn(4, 3, 16, 16),)
    else:
        model, args, args2 = TinyMLP().eval(), (torch.randn(3, 16),), (torch.randn(7, 16),)
    spec = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic else None
    return consumers.Case(name + ("_dynamic" if dynamic else ""), model, args, {}, spec, args2, {})


def case_of(name: str) -> consumers.Case:
    if name.startswith("tiny_"):
        base, _, dyn = name.partition("_dynamic")
        return _tiny(base, dynamic=name.endswith("_dynamic"))
    base = name.removesuffix("_dynamic")
    built = build_zoo(base)  # the public zoo, or the clone's small_models.py without ../shared
    return consumers.Case(base, built.model.eval(), tuple(built.args), dict(built.kwargs or {}),
                          built.dynamic_shapes if name != base else None, built.args2, built.kwargs2)


def graphcap_program(case: consumers.Case):
    ep = consumers.export_case("graphcap", case)
    assert type(ep) is graphcap.ExportedProgram and isinstance(ep, torch.export.ExportedProgram)
    return ep


def hand_over(consumer: str, name: str) -> float:
    case = case_of(name)
    ep = graphcap_program(case)
    with quiet_warnings():
        return consumers.CONSUMERS[consumer](ep, case, "graphcap")


# Two or three small models per consumer (the whole zoo: make consumers).
MATRIX = [
    ("et_xnnpack", "tiny_conv_dynamic"), ("et_xnnpack", "custom_dict_list_io"), ("et_xnnpack", "custom_buffer_inplace"),
    ("et_portable", "tiny_mlp"), ("et_portable", "custom_kwargs_only"), ("et_portable", "custom_buffer_inplace"),
    ("pt2e", "tiny_conv"), ("pt2e", "tiny_mlp_dynamic"),
    ("onnx", "tiny_conv_dynamic"), ("onnx", "custom_dict_list_io"), ("onnx", "custom_buffer_inplace"),
    ("onnx", "custom_dict_list_io_dynamic"),
    ("aoti", "tiny_mlp_dynamic"),
    ("model_explorer", "tiny_conv_dynamic"), ("model_explorer", "custom_dict_list_io"),
]


@pytest.mark.parametrize("consumer, name", [pytest.param(c, n, marks=MARKS[c], id=f"{c}-{n}") for c, n in MATRIX])
def test_consumer_takes_graphcaps_program_as_is(consumer, name):
    diff = hand_over(consumer, name)
    assert diff == diff and diff < (5e-2 if consumer == "pt2e" else 1e-3)


@NEEDS_COREMLTOOLS
@pytest.mark.parametrize("name", ["tiny_conv", "custom_kwargs_only", "custom_buffer_inplace"])
def test_coremltools_gets_as_far_with_graphcaps_program_as_with_torchs(name):
    """coremltools converts on Linux but runs models only on macOS: the bar is torch.export's outcome."""
    case = case_of(name)
    outcomes = {}
    for exporter in consumers.EXPORTERS:
        ep = consumers.export_case(exporter, case)
        try:
            with quiet_warnings():
                consumers.coreml(ep, case, exporter)
            outcomes[exporter] = "converted"
        except Exception as e:  # coremltools' own refusal: it must be the same for both programs
            outcomes[exporter] = f"{type(e).__name__}: {e}"
    assert outcomes["graphcap"] == outcomes["torch"]


@NEEDS_COREMLTOOLS
def test_coremltools_refuses_the_training_dialect_as_for_torchs():
    """coremltools takes only the ATEN dialect: graphcap's training-IR program says TRAINING, like torch's."""
    import coremltools as ct
    case = case_of("tiny_mlp")
    messages = []
    for exporter in consumers.EXPORTERS:
        with pytest.raises(NotImplementedError) as info, quiet_warnings():
            ct.convert(consumers.export_case(exporter, case))
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "TRAINING" in messages[0]


def test_torch_export_save_and_load_graphcaps_program():
    case = case_of("custom_buffer_inplace")
    ep = graphcap_program(case)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    loaded = torch.export.load(io.BytesIO(buf.getvalue()))
    assert [s.kind.name for s in loaded.graph_signature.input_specs] == \
        [s.kind.name for s in ep.graph_signature.input_specs]
    got = loaded.module()(*copy.deepcopy(case.args))
    assert consumers.max_difference(consumers.eager(case), got) < 1e-5


def _every_kind_of_program():
    """What graphcap.export, draft_export, run_decompositions, load and capture return."""
    case = _tiny("tiny_mlp", dynamic=True)
    model = copy.deepcopy(case.model)
    exported = graphcap.export(model, case.args, dynamic_shapes=case.dynamic_shapes)
    buf = io.BytesIO()
    graphcap.save(exported, buf)
    with quiet_warnings():
        drafted = graphcap.draft_export(copy.deepcopy(model), case.args, dynamic_shapes=case.dynamic_shapes)
        captured = graphcap.capture(copy.deepcopy(model), case.args, dynamic_shapes=case.dynamic_shapes,
                                    progress=False).program
    return case, {"export": exported, "draft_export": drafted, "run_decompositions": exported.run_decompositions(),
                  "load": graphcap.load(io.BytesIO(buf.getvalue())), "capture": captured}


@NEEDS_EXECUTORCH
@NEEDS_ONNX
def test_every_program_graphcap_returns_reaches_executorch_and_onnx():
    case, programs = _every_kind_of_program()
    for how, ep in programs.items():
        assert isinstance(ep, torch.export.ExportedProgram), how
        assert ep.dialect == ("ATEN" if how == "run_decompositions" else "TRAINING"), how
        assert ep.verifiers == [ep.verifier] and ep.verifier.dialect == ep.dialect, how
        for consumer in ("et_portable", "onnx"):
            with quiet_warnings():
                diff = consumers.CONSUMERS[consumer](ep, case, "graphcap")
            assert diff < 1e-4, (how, consumer)


@NEEDS_EXECUTORCH
@pytest.mark.parametrize("name", ["format_v1.pt2", "format_v2.pt2"])
def test_a_program_loaded_from_an_older_file_reaches_executorch(name):
    from executorch.exir import to_edge
    ep = graphcap.load(Path(__file__).resolve().parents[1] / "golden" / name)
    with quiet_warnings():
        assert len(to_edge(ep).to_executorch().buffer) > 0


def test_to_torch_and_from_torch_keep_the_dialect():
    ep = graphcap_program(_tiny("tiny_mlp"))
    for program, dialect in ((ep, "TRAINING"), (ep.run_decompositions(), "ATEN")):
        theirs = graphcap.to_torch(program)
        assert type(theirs) is torch.export.ExportedProgram and theirs.dialect == dialect
        assert graphcap.from_torch(theirs).dialect == dialect


def test_torchs_constructor_takes_the_fields_of_graphcaps_program():
    """What ExecuTorch does after each of its passes (torch only, so it runs on every torch line):
    build torch's ExportedProgram from the program's fields and its verifier, and validate it."""
    case = _tiny("tiny_conv", dynamic=True)
    ep = graphcap_program(case)
    for program in (ep, ep.run_decompositions()):
        rebuilt = torch.export.ExportedProgram(
            root=copy.deepcopy(program.graph_module), graph=copy.deepcopy(program.graph_module).graph,
            graph_signature=program.graph_signature, state_dict=program.state_dict,
            range_constraints=program.range_constraints, module_call_graph=copy.deepcopy(program.module_call_graph),
            example_inputs=program.example_inputs, constants=program.constants, verifiers=[program.verifier])
        assert rebuilt.dialect == program.dialect
        got = rebuilt.module()(*copy.deepcopy(case.args2))
        assert consumers.max_difference(consumers.eager(case, second=True), got) < 1e-5


def test_graphcaps_verifier_classes_become_torchs_of_the_same_dialect():
    from graphcap.program import InferenceVerifier, Verifier
    ep = graphcap_program(_tiny("tiny_mlp"))
    core = ep.run_decompositions()
    again = core._update(core.graph_module, core.graph_signature, verifiers=[InferenceVerifier])
    assert again.verifier is core.verifier and again.dialect == "ATEN"
    assert ep._update(ep.graph_module, ep.graph_signature, verifiers=[Verifier]).verifier is ep.verifier


def test_torchs_methods_on_graphcaps_program_are_graphcaps():
    """The methods consumers call (module, run_decompositions, validate) are graphcap's own code."""
    ep = graphcap_program(_tiny("tiny_mlp"))
    assert type(ep.module()).__module__.startswith(("graphcap", "torch.fx"))
    assert type(ep.run_decompositions()) is graphcap.ExportedProgram
    ep.validate()
    for name in ("module", "run_decompositions", "validate", "_update", "__str__", "graph_signature", "verifier"):
        assert name in vars(graphcap.ExportedProgram), name


# -- a program whose outputs hold a class graphcap flattens by its attributes -------

class KVState:
    """Neither a registered pytree node nor a dataclass (like transformers' DynamicCache):
    graphcap flattens it by its attributes; torch.export refuses it."""

    def __init__(self, keys, values, dtype):
        self.keys, self.values, self.dtype, self.step = keys, values, dtype, 1


class ReturnsState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        return h.relu(), KVState([h * 2, h + 1], [h - 1, h * h], h.dtype)


def _state_case(dynamic: bool = False) -> consumers.Case:
    torch.manual_seed(0)
    spec = ({0: torch.export.Dim("batch", min=1, max=32)},) if dynamic else None
    return consumers.Case("returns_state", ReturnsState().eval(), (torch.randn(3, 8),), {}, spec,
                          (torch.randn(5, 8),), {})


@pytest.fixture
def unregistered_state():
    """KVState out of torch's registry before and after the test (the hand-over registers it)."""
    from graphcap.torch_private import pytree as private_pytree
    assert KVState not in private_pytree.pytree_registry_snapshot()["nodes"]
    yield
    if KVState in private_pytree.pytree_registry_snapshot()["nodes"]:
        private_pytree.deregister_python_node(KVState)


def _registered(cls) -> bool:
    from graphcap.torch_private import pytree as private_pytree
    return cls in private_pytree.pytree_registry_snapshot()["nodes"]


@pytest.fixture
def dynamic_cache_not_handed_over():
    """transformers' DynamicCache out of torch's registry, as in a process where no program was
    handed over yet (an earlier test's hand-over is undone; a registration that is not
    graphcap's, e.g. transformers' own export support, fails the test: it could not check anything)."""
    from transformers.cache_utils import DynamicCache

    from graphcap import auto_flatten
    from graphcap.torch_private import pytree as private_pytree

    def undo_hand_over():
        if _registered(DynamicCache) and auto_flatten.registered_as_own(DynamicCache):
            private_pytree.deregister_python_node(DynamicCache)

    undo_hand_over()
    assert not _registered(DynamicCache), ("DynamicCache is registered with torch's pytree by code that is "
                                           "not graphcap's: this test cannot start from a process without it")
    yield DynamicCache
    undo_hand_over()


@NEEDS_EXECUTORCH
@pytest.mark.usefixtures("unregistered_state")
@pytest.mark.parametrize("consumer", ["et_portable", "et_xnnpack"])
def test_a_program_returning_a_class_graphcap_flattens_reaches_executorch(consumer):
    """ExecuTorch's emitter rebuilds the output structure with torch's pytree (placeholder leaves)
    and writes it as text: the hand-over registers the class, and its context (a dtype) is written."""
    from graphcap.torch_private import pytree as private_pytree
    case = _state_case(dynamic=consumer == "et_xnnpack")
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(case.model), case.args, dynamic_shapes=case.dynamic_shapes)
    assert KVState not in private_pytree.pytree_registry_snapshot()["nodes"]  # export registers nothing
    with quiet_warnings():
        diff = consumers.CONSUMERS[consumer](ep, case, "graphcap")
    assert diff < 1e-5
    assert KVState in private_pytree.pytree_registry_snapshot()["nodes"]  # handed over to torch


def _aoti_runs(ep, case: consumers.Case) -> list:
    """AOTInductor's recipe on the program as is: compile, package, load, run at each size."""
    import tempfile
    with tempfile.TemporaryDirectory() as d, quiet_warnings():
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(Path(d) / "model.pt2"))
        runner = torch._inductor.aoti_load_package(path)
        return [(second, runner(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
                for second in consumers.sizes(case) for args, kwargs in [consumers.inputs_of(case, second)]]


@pytest.mark.usefixtures("unregistered_state")
def test_a_program_returning_a_class_graphcap_flattens_reaches_aoti_as_is():
    """AOTInductor reads only ``ep.module()`` and writes its output spec with torch's pytree
    into the package: that read hands the structure over, and the loaded package rebuilds the
    class (with its dtype and step) at both sizes of a dynamic batch."""
    case = _state_case(dynamic=True)
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(case.model), case.args, dynamic_shapes=case.dynamic_shapes)
    assert not _registered(KVState)
    for second, (out, state) in _aoti_runs(ep, case):
        assert isinstance(state, KVState) and state.dtype == torch.float32 and state.step == 1
        assert out.shape[0] == (5 if second else 3)
        assert consumers.max_difference(consumers.eager(case, second), (out, state)) < 1e-5
    assert _registered(KVState)  # handed over to torch, as docs/consumers.md says


@pytest.mark.usefixtures("unregistered_state")
def test_a_program_returning_a_class_graphcap_flattens_saves_with_torch():
    case = _state_case()
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(case.model), case.args)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    loaded = torch.export.load(io.BytesIO(buf.getvalue()))
    out, state = loaded.module()(*copy.deepcopy(case.args))
    assert isinstance(state, KVState) and state.dtype == torch.float32 and state.step == 1
    assert consumers.max_difference(consumers.eager(case), consumers.flat_values((out, state))) < 1e-6


@pytest.mark.usefixtures("unregistered_state")
def test_graphcaps_own_calls_do_not_hand_the_program_over():
    """export, module() and running it, run_decompositions, graphcap.save / load, printing and
    unflatten read the structure graphcap's way: nothing is registered with torch until code
    other than graphcap's reads the program's module_call_graph or call_spec."""
    from graphcap.torch_private import pytree as private_pytree
    case = _state_case(dynamic=True)
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(case.model), case.args, dynamic_shapes=case.dynamic_shapes)
        ep.module()(*case.args2)
        core = ep.run_decompositions()
        core.module()(*case.args)
        buf = io.BytesIO()
        graphcap.save(core, buf)
        graphcap.load(io.BytesIO(buf.getvalue())).module()(*case.args)
        str(ep)
        graphcap.unflatten(ep)(*case.args)
        module = ep.module()
        module.print_readable(print_output=False)
        copy.deepcopy(module)(*case.args)
        module.recompile()
        torch.fx.GraphModule(module, module.graph)(*case.args2)  # what pt2e's prepare and convert build
    assert KVState not in private_pytree.pytree_registry_snapshot()["nodes"]
    assert ep.call_spec.out_spec.children()[1].type is KVState
    assert KVState in private_pytree.pytree_registry_snapshot()["nodes"]


@pytest.mark.usefixtures("unregistered_state")
def test_a_rebuilt_instance_flattens_to_the_spec_it_was_built_from():
    """torch's tools rebuild the structure from placeholder leaves (ExecuTorch: integers) and
    flatten it again: the same spec comes back though no attribute holds a tensor."""
    import torch.utils._pytree as torch_pytree
    case = _state_case()
    with quiet_warnings():
        ep = graphcap.export(copy.deepcopy(case.model), case.args)
    out_spec = ep.call_spec.out_spec
    rebuilt = torch_pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)
    leaves, spec = torch_pytree.tree_flatten(rebuilt)
    assert spec == out_spec and leaves == list(range(out_spec.num_leaves))
    assert torch_pytree.treespec_loads(torch_pytree.treespec_dumps(out_spec)) == out_spec


@NEEDS_EXECUTORCH
@pytest.mark.slow
def test_gpt2_returning_its_cache_reaches_executorch():
    """The zoo's GPT-2 returning its DynamicCache (torch.export refuses it) through XNNPACK."""
    assert hand_over("et_xnnpack", "hf_gpt2_cache") < 1e-3


@pytest.mark.slow
def test_gpt2_returning_its_cache_reaches_aoti_as_is(dynamic_cache_not_handed_over):
    """GPT-2 returning its DynamicCache (torch.export refuses it), with a dynamic batch and
    sequence, handed to AOTInductor as is in a process where nothing handed it over before:
    the loaded package returns the cache, and matches eager at both sizes."""
    case = case_of("hf_gpt2_cache_dynamic")
    ep = graphcap_program(case)
    assert not _registered(dynamic_cache_not_handed_over)
    runs = _aoti_runs(ep, case)
    assert [second for second, _ in runs] == [False, True]
    for second, got in runs:
        assert isinstance(got.past_key_values, dynamic_cache_not_handed_over)
        batch, length = (3, 24) if second else (2, 16)
        assert got.last_hidden_state.shape[:2] == (batch, length)
        assert consumers.max_difference(consumers.eager(case, second), got) < 1e-4


@NEEDS_EXECUTORCH
@pytest.mark.slow
def test_gpt2_cache_through_executorch_then_aoti():
    """ExecuTorch lowering a copy of a dynamic program leaves the program's shapes as they were:
    AOTInductor then compiles it for the whole batch range (it returned batch 2 for a batch-3
    input when the copies shared one ShapeEnv, issue 22)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    case = case_of("hf_gpt2_cache_dynamic")
    ep = graphcap_program(case)
    ranges = {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()}
    with quiet_warnings():
        to_edge_transform_and_lower(copy.deepcopy(ep), partitioner=[XnnpackPartitioner()]).to_executorch()
        assert {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()} == ranges
        for second in (False, True):
            args, kwargs = consumers.inputs_of(case, second)
            got = ep.module()(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            assert consumers.max_difference(consumers.eager(case, second), got) < 1e-4
        assert consumers.aoti(ep, case, "graphcap") < 1e-3  # both sizes, after the ExecuTorch lowering


# -- Model Explorer: graphcap's program shown as torch.export's ----------------

def _model_explorer_view(ep) -> list:
    """What Model Explorer's PyTorch adapter shows of a program, node by node: the label, the layer
    (from ``nn_module_stack``), the attributes (a weight's first values among them), the output
    metadata, and which node's output each input edge comes from (by position: node names are
    not compared, consumers do not read them)."""
    nodes = _through_model_explorer(ep)["graphs"][0].nodes
    position = {node.id: i for i, node in enumerate(nodes)}

    def pairs(attrs: list) -> list:  # the adapter writes some attributes as KeyValue, some as dicts
        return [(a["key"], a["value"]) if isinstance(a, dict) else (a.key, a.value) for a in attrs]
    return [(node.label, node.namespace, pairs(node.attrs), [pairs(m.attrs) for m in node.outputsMetadata],
             [(position[e.sourceNodeId], e.sourceNodeOutputId, e.targetNodeInputId) for e in node.incomingEdges])
            for node in nodes]


@NEEDS_MODEL_EXPLORER
@pytest.mark.parametrize("name", ["tiny_conv_dynamic", "custom_dict_list_io", "custom_buffer_inplace"])
def test_model_explorer_shows_graphcaps_program_as_torchs(name):
    """Model Explorer's graph of graphcap's program is the one it draws for torch.export's program
    of the same model: the same nodes in the same layers, with the same shapes and edges."""
    case = case_of(name)
    views = {}
    for exporter in ("torch", "graphcap"):
        with quiet_warnings():
            views[exporter] = _model_explorer_view(consumers.export_case(exporter, case))
    assert len(views["graphcap"]) == len(views["torch"])
    for mine, torchs in zip(views["graphcap"], views["torch"]):
        assert mine == torchs


# -- a program a consumer cannot take -----------------------------------------

@torch.library.custom_op("graphcap_consumer_test::shuffle", mutates_args=())
def shuffle(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1).clone()


@shuffle.register_fake
def _(x):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_consumer_test.shuffle(x) + 1


def _failure(consumer_call, ep):
    with quiet_warnings(), pytest.raises(Exception) as info:
        consumer_call(ep)
    return info


def _to_executorch(ep):
    from executorch.exir import to_edge
    return to_edge(ep).to_executorch()


def _to_onnx(ep):
    return torch.onnx.export(ep, verbose=False)


@pytest.mark.parametrize("consumer", [pytest.param(_to_executorch, marks=NEEDS_EXECUTORCH, id="executorch"),
                                      pytest.param(_to_onnx, marks=NEEDS_ONNX, id="onnx")])
def test_a_program_a_consumer_cannot_take_fails_in_the_consumer(consumer):
    """An operator the consumer has no lowering for fails in the consumer, with the consumer's
    message, exactly as torch.export's program of the same model does: graphcap's hand-over adds
    no error of its own and hides none."""
    args = (torch.randn(2, 4),)
    programs = {"graphcap": graphcap.export(UsesCustomOp(), args), "torch": torch.export.export(UsesCustomOp(), args)}
    errors = {k: _failure(consumer, ep) for k, ep in programs.items()}
    got, want = errors["graphcap"], errors["torch"]
    assert not isinstance(got.value, GraphcapError)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
    raising_file = traceback.extract_tb(got.tb)[-1].filename
    assert "/graphcap/" not in raising_file, raising_file


# An operator with a shape function but no kernel for the CPU: export and AOTInductor's compile
# take it (the package calls it through torch's dispatcher), the package's run cannot.
_NO_KERNEL_LIB = torch.library.Library("graphcap_consumer_test", "FRAGMENT")
_NO_KERNEL_LIB.define("no_cpu_kernel(Tensor x) -> Tensor")


@torch.library.register_fake("graphcap_consumer_test::no_cpu_kernel", lib=_NO_KERNEL_LIB)
def _(x):
    return torch.empty_like(x)


class UsesKernelLessOp(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_consumer_test.no_cpu_kernel(x) * 2


def _through_aoti(ep):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(Path(d) / "model.pt2"))
        return torch._inductor.aoti_load_package(path)(torch.randn(2, 4))


def _through_model_explorer(ep):
    from model_explorer.consts import DEFAULT_SETTINGS
    from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl
    return PytorchExportedProgramAdapterImpl(ep, dict(DEFAULT_SETTINGS)).convert()


class FlattensByItsBatch(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1) + 1  # a size read: an operator node whose value is a SymInt


BAD_INPUTS = {  # consumer: (the model it cannot take, that model's export arguments)
    "aoti": (UsesKernelLessOp, {}),
    # Model Explorer's adapter shows tensor values only (a SymInt output is its ValueError)
    "model_explorer": (FlattensByItsBatch, {"dynamic_shapes": ({0: torch.export.Dim("batch", min=2, max=8)},)}),
}


def _programs_of(model_class, options: dict) -> dict:
    args = (torch.randn(2, 4),)
    with quiet_warnings():
        return {"graphcap": graphcap.export(model_class(), args, **options),
                "torch": torch.export.export(model_class(), args, **options)}


@pytest.mark.parametrize("consumer", [pytest.param(_through_aoti, id="aoti"),
                                      pytest.param(_through_model_explorer, marks=NEEDS_MODEL_EXPLORER,
                                                   id="model_explorer")])
def test_a_program_aoti_or_model_explorer_cannot_take_fails_there(consumer):
    """AOTInductor: an operator without a CPU kernel compiles and packages (its call goes through
    torch's dispatcher) and fails when the loaded package runs, with the dispatcher's message.
    Model Explorer: a graph with a size read fails in its adapter. Both exactly as for
    torch.export's program of the same model; nothing of graphcap's raises or hides it."""
    model_class, options = BAD_INPUTS["aoti" if consumer is _through_aoti else "model_explorer"]
    errors = {k: _failure(consumer, ep) for k, ep in _programs_of(model_class, options).items()}
    got, want = errors["graphcap"], errors["torch"]
    assert not isinstance(got.value, GraphcapError)
    # the first line: the dispatcher's message goes on with a C++ backtrace (addresses, temporary paths)
    first_line = str(got.value).splitlines()[0]
    assert type(got.value) is type(want.value) and first_line == str(want.value).splitlines()[0]
    if consumer is _through_aoti:  # the dispatcher's message; torch 2.10's runner raises its own line
        assert "Could not run 'graphcap_consumer_test::no_cpu_kernel'" in first_line \
            or "API call failed" in first_line, first_line
    else:
        assert "Unsupported output type" in first_line
    package = str(Path(graphcap.__file__).resolve().parent)
    assert not any(frame.filename.startswith(package) for frame in traceback.extract_tb(got.tb)), \
        traceback.format_tb(got.tb)


def test_merging_runs_keeps_a_reruns_cell_in_place_of_the_earlier_one(tmp_path):
    """``bench/consumers.py --merge``: a cell of a later file replaces the earlier file's (a rerun),
    keeping its row's place, so neither the .json nor the failure list keeps the stale cell."""
    import json
    first, rerun = tmp_path / "first.json", tmp_path / "rerun.json"
    first.write_text(json.dumps([["m1", "aoti", "graphcap", "FAIL NotImplementedError: stale"],
                                 ["m1", "aoti", "torch", "ok 1.0e-06 (1s)"],
                                 ["m2", "aoti", "graphcap", "ok 2.0e-06 (1s)"]]))
    rerun.write_text(json.dumps([["m1", "aoti", "graphcap", "ok 1.4e-06 (2s)"]]))
    out = tmp_path / "matrix.md"
    consumers.main(["--consumers", "aoti", "--merge", f"{first},{rerun}", "--out", str(out)])
    cells = json.loads(out.with_suffix(".json").read_text())
    assert cells == [["m1", "aoti", "graphcap", "ok 1.4e-06 (2s)"], ["m1", "aoti", "torch", "ok 1.0e-06 (1s)"],
                     ["m2", "aoti", "graphcap", "ok 2.0e-06 (1s)"]]
    text = out.read_text()
    assert "stale" not in text and "| m1 | ok 1.4e-06 / ok 1.0e-06 |" in text
