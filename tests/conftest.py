"""Shared test helpers: the model zoo (built and exported once per session), its
parametrization, output comparison, the save/load round trip and warning filters.

Zoo models and their exports are shared by every test file that uses them
(``zoo_case``, ``zoo_export``): a model is built once, exported once per
(static, dynamic) setting, and each test works on copies (``run_eager_and_exported``
deep-copies the model, ``ep.module()`` and the inputs), so sharing changes nothing
a test asserts and the default run does not rebuild the same models file after file.

The zoo is the public one in ``../shared/zoo`` when it sits beside the repository; a clone alone
gets the small models of ``small_models.py`` (the ones the default run needs); a test that needs
the public zoo itself is marked ``skipif(not HAVE_SHARED_ZOO)`` with a reason naming ../shared/zoo.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# the installed torch's (major, minor): a test of a feature an older supported line lacks is marked
# skipif(TORCH_LINE < (2, 13), reason="... torch 2.13 ...") (docs/torch-versions.md lists each)
TORCH_LINE = tuple(int(p) for p in torch.__version__.split(".")[:2])
ZOO_DIR = ROOT.parent / "shared" / "zoo"
HAVE_SHARED_ZOO = (ZOO_DIR / "zoo.py").is_file()
# PyTorch's own export tests (../shared/torch_suite): only the ratchet's tests read them
HAVE_SHARED_SUITE = (ROOT.parent / "shared" / "torch_suite" / "test_hop.py").is_file()
if HAVE_SHARED_ZOO and str(ZOO_DIR) not in sys.path:
    sys.path.insert(0, str(ZOO_DIR))


def zoo_module():
    import zoo  # lives in ../shared/zoo
    return zoo


def zoo_names() -> list[str]:
    """The whole public zoo when ../shared is there, else the small models of ``small_models.py``."""
    if HAVE_SHARED_ZOO:
        return list(zoo_module().REGISTRY)
    from small_models import BUILDERS
    return list(BUILDERS)


def build_zoo(name: str):
    """A fresh build of zoo model ``name`` (seeded, so the same weights every time): from ../shared/zoo
    when it is there, else from the repository's ``small_models.py``."""
    if HAVE_SHARED_ZOO:
        builder = zoo_module().REGISTRY[name].builder
    else:
        from small_models import BUILDERS
        if name not in BUILDERS:
            raise LookupError(f"zoo model {name!r} is only in the public zoo, ../shared/zoo, absent beside this "
                              f"clone: add a builder to tests/small_models.py, or mark the test "
                              f"skipif(not HAVE_SHARED_ZOO) with a reason naming ../shared/zoo")
        builder = BUILDERS[name]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return builder()


@functools.cache
def zoo_case(name: str):
    """Zoo model ``name``, built once per session: copy the model and inputs before changing them."""
    return build_zoo(name)


@functools.cache
def zoo_export(name: str, dynamic: bool = False):
    """``graphcap.export`` of the shared ``zoo_case(name)`` (with its dynamic spec if ``dynamic``), once per
    session. Read it, run ``ep.module()`` copies, derive new programs from it: never change it in place."""
    built = zoo_case(name)
    with quiet_warnings():
        model = copy.deepcopy(built.model)  # export may not see (or leave) the shared model's state
        if dynamic:
            return graphcap_export(model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes)
        return graphcap_export(model, built.args, built.kwargs)


def graphcap_export(*args, **kwargs):
    import graphcap
    return graphcap.export(*args, **kwargs)


def zoo_params(default) -> list:
    """Every zoo model name as a parameter; those not in ``default`` (names, or name prefixes as a
    tuple of strings) are marked ``slow``, out of the default run."""
    def in_default(name: str) -> bool:
        return name.startswith(default) if isinstance(default, tuple) else name in default
    return [pytest.param(n, marks=() if in_default(n) else pytest.mark.slow) for n in zoo_names()]


@contextlib.contextmanager
def quiet_warnings():
    """Silence warnings (transformers' and torch's deprecation chatter, graphcap's auto-flatten note)
    where a test does not assert on them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def save_load(ep, **load_kwargs):
    """``ep`` saved to memory and loaded back (the .pt2 round trip)."""
    import graphcap
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return graphcap.load(io.BytesIO(buf.getvalue()), **load_kwargs)


def program_json_edited(data: bytes, edit) -> io.BytesIO:
    """The saved file ``data`` with ``edit(program)`` applied to its parsed program.json: a crafted
    or damaged file for the loader's checks."""
    import json

    from graphcap.serialize import schema
    from graphcap.serialize.archive import read_entries, write_archive
    entries = read_entries(io.BytesIO(data))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    edit(program)
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    out.seek(0)
    return out


def printed_as_loaded(ep) -> str:
    """``str(ep)`` with control-flow operands as lists: the one change load makes to a program
    (as torch's load makes it; graphcap.node_facts.operand_sequences_as)."""
    from graphcap.node_facts import operand_sequences_as
    copied = copy.deepcopy(ep)
    for gm in copied.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            for node in gm.graph.nodes:
                node.args, node.kwargs = operand_sequences_as(list, node.target, node.args, dict(node.kwargs))
            gm.recompile()
    return str(copied)


def assert_same_outputs(expected, got, rtol=1e-4, atol=1e-4):
    """Same pytree structure (same classes), dtypes, shapes, values within tolerance.

    Flattened as graphcap sees outputs: classes it flattens by attributes (a
    ``DynamicCache``) are torch pytree nodes only while it traces.
    """
    from graphcap.auto_flatten import flatten
    le, se = flatten(expected)
    lg, sg = flatten(got)
    assert type(expected) is type(got), f"output class {type(got)} != eager {type(expected)}"
    assert se == sg, f"output structure differs:\n eager {se}\n   got {sg}"
    for i, (a, b) in enumerate(zip(le, lg)):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor), f"leaf {i}: expected a tensor, got {type(b)}"
            assert a.dtype == b.dtype, f"leaf {i}: dtype {b.dtype} != eager {a.dtype}"
            assert a.shape == b.shape, f"leaf {i}: shape {tuple(b.shape)} != eager {tuple(a.shape)}"
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol, msg=lambda m, i=i: f"leaf {i}: {m}")
        else:
            assert a == b, f"leaf {i}: {b!r} != eager {a!r}"


def program_devices(ep) -> set[str]:
    """Every device type a program uses: its state and constants, and its graph's device
    arguments and fake values (where the device tests look for where a program runs)."""
    found = {t.device.type for t in (*ep.state_dict.values(), *ep.constants.values())
             if isinstance(t, torch.Tensor)}
    for node in ep.graph.nodes:
        found.update(v.type for v in (*node.args, *node.kwargs.values()) if isinstance(v, torch.device))
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            found.add(val.device.type)
    return found


def run_eager_and_exported(model, ep, args, kwargs, *, with_inputs=False):
    """Eager and ep.module() on the same inputs, each on its own copy of the model and inputs.

    With ``with_inputs``, also the two input copies after the calls (to compare
    writes to inputs).
    """
    eager_model = copy.deepcopy(model)
    runnable = copy.deepcopy(ep.module())
    a1, k1 = copy.deepcopy((args, kwargs))
    a2, k2 = copy.deepcopy((args, kwargs))
    with torch.no_grad():
        expected = eager_model(*a1, **k1)
        got = runnable(*a2, **k2)
    if with_inputs:
        return expected, got, (a1, k1), (a2, k2)
    return expected, got


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_leaked_buffer_registration_hooks():
    """torch 2.10's non-strict export registers a buffer-assignment hook on every nn.Module and
    removes it only when the export succeeds (torch/export/_trace.py): a test whose reference
    torch.export call raises left it behind, and a later strict capture in the same process failed
    on it ("Attempted to call function marked as skipped"). Hooks a test leaves are removed."""
    hooks = torch.nn.modules.module._global_buffer_registration_hooks
    before = set(hooks)
    yield
    for key in set(hooks) - before:
        del hooks[key]


# The consumer packages are installed on the torch line ExecuTorch pairs with (2.14); elsewhere these
# consumers are not there to try (docs/consumers.md, "torch lines").
NEEDS_EXECUTORCH = pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                                      reason="executorch not installed (the consumers extra, torch 2.14 line)")
NEEDS_TORCHAO = pytest.mark.skipif(importlib.util.find_spec("torchao") is None,
                                   reason="torchao not installed (the consumers extra, torch 2.14 line)")
NEEDS_ONNX = pytest.mark.skipif(importlib.util.find_spec("onnxscript") is None
                                or importlib.util.find_spec("onnxruntime") is None,
                                reason="onnxscript or onnxruntime not installed (the consumers extra, torch 2.14 line)")
NEEDS_COREMLTOOLS = pytest.mark.skipif(importlib.util.find_spec("coremltools") is None,
                                       reason="coremltools not installed (the consumers extra, torch 2.14 line)")
