"""The whole public zoo in strict mode, static and dynamic (slow: kept out of the default run).

Each model exports with strict=True, its program matches eager on the
example and, when the spec is dynamic, at the zoo's second set of sizes; and it
is the program non-strict gives (signature, operators, range constraints).
"""
from __future__ import annotations

import collections
import warnings

import pytest

import graphcap
from conftest import assert_same_outputs, build_zoo, run_eager_and_exported, zoo_names


def _ops(ep):
    return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_in_strict_mode(name, dynamic):
    built = build_zoo(name)
    spec = built.dynamic_shapes if dynamic else None
    assert not dynamic or spec is not None, f"the zoo gives no dynamic spec for {name}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strict = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=spec, strict=True)
        non_strict = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=spec)
    expected, got = run_eager_and_exported(built.model, strict, built.args, built.kwargs)
    assert_same_outputs(expected, got)
    if dynamic and built.args2 is not None:
        expected, got = run_eager_and_exported(built.model, strict, built.args2, built.kwargs2 or {})
        assert_same_outputs(expected, got)
    assert str(strict.graph_signature) == str(non_strict.graph_signature)
    # the same operators; their counts may differ where dynamo legitimately reuses a value the
    # Python computes twice (transformers' mask code builds one arange twice)
    assert set(_ops(strict)) == set(_ops(non_strict))
    assert {str(k): str(v) for k, v in strict.range_constraints.items()} == \
        {str(k): str(v) for k, v in non_strict.range_constraints.items()}
