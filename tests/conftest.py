"""Shared test helpers: the public model zoo and output comparison."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = ROOT.parent / "shared" / "zoo"
if str(ZOO_DIR) not in sys.path:
    sys.path.insert(0, str(ZOO_DIR))


def zoo_module():
    import zoo  # noqa: WPS433 (lives in ../shared/zoo)
    return zoo


def zoo_names() -> list[str]:
    return list(zoo_module().REGISTRY)


def build_zoo(name: str):
    return zoo_module().REGISTRY[name].builder()


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
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol, msg=lambda m: f"leaf {i}: {m}")
        else:
            assert a == b, f"leaf {i}: {b!r} != eager {a!r}"


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
