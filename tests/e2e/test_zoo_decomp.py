"""Every public-zoo model through run_decompositions: core ATen only, same outputs.

Per model: export with graphcap, decompose with the default table, then check
that only core ATen operators remain (no mutation, no aliasing: the inference
verifier ran inside run_decompositions and runs again here), that the
signature and metadata survived, and that ``module()`` of the decomposed
program matches both eager and the training-IR program.
"""
from __future__ import annotations

import pytest
import torch

from conftest import assert_same_outputs, run_eager_and_exported, zoo_case, zoo_export, zoo_params
from graphcap.ir_checks import is_inference_ir, verify
from graphcap.signature import InputKind, OutputKind
from graphcap.trace.mutations import written_placeholders

# Decompositions reorder float arithmetic (matmul as bmm, attention by its
# math form), so outputs agree to 1e-3 rather than bit for bit.
_TOL = {"rtol": 1e-3, "atol": 1e-3}


# One model per family and source in the default run (about a minute on the
# shared 2-core machine); the rest of the zoo runs with the slow tests.
DEFAULT_RUN = {"tv_resnet18", "timm_vit_tiny_patch16_224", "hf_bert", "hf_gpt2", "hf_llama", "hf_t5",
               "custom_buffer_inplace", "custom_dict_list_io", "custom_kwargs_only"}


@pytest.mark.parametrize("name", zoo_params(DEFAULT_RUN))
def test_zoo_model_decomposes(name):
    built, ep = zoo_case(name), zoo_export(name)
    dep = ep.run_decompositions()

    assert is_inference_ir(dep)
    verify(dep)
    ops = {n.target for n in dep.graph.nodes if n.op == "call_function"}
    # runtime assertions stay, as in torch's core IR (_assert_tensor_metadata before each .to)
    asserts = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default}
    not_core = sorted(str(op) for op in ops
                      if isinstance(op, torch._ops.OpOverload) and torch.Tag.core not in op.tags
                      and op not in asserts)
    assert not not_core, f"non-core operators left: {not_core}"
    assert not any(getattr(op, "_schema", None) is not None and op._schema.is_mutable for op in ops)

    # the signature keeps its inputs; the buffers the training IR writes in place (its graph's
    # in-place operators, as in torch's training IR) become mutation outputs, listed first
    assert [(s.kind, s.target) for s in dep.graph_signature.input_specs] == \
        [(s.kind, s.target) for s in ep.graph_signature.input_specs]
    written = set(written_placeholders(ep.graph))
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    kind_of_write = {InputKind.BUFFER: OutputKind.BUFFER_MUTATION, InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION,
                     InputKind.USER_INPUT: OutputKind.USER_INPUT_MUTATION}
    expected_writes = sorted((kind_of_write[s.kind].name, s.target if s.kind is not InputKind.USER_INPUT else n.name)
                             for s, n in zip(ep.graph_signature.input_specs, placeholders) if n in written)
    assert not ep.graph_signature.buffers_to_mutate
    mutation_kinds = [s.kind for s in dep.graph_signature.output_specs
                      if s.kind is not OutputKind.USER_OUTPUT]
    assert sorted((s.kind.name, s.target) for s in dep.graph_signature.output_specs
                  if s.kind is not OutputKind.USER_OUTPUT) == expected_writes
    assert [s.kind for s in dep.graph_signature.output_specs] == \
        mutation_kinds + [s.kind for s in ep.graph_signature.output_specs]
    assert dep.range_constraints == ep.range_constraints

    # operator nodes carry the user's source information
    with_trace = [n for n in dep.graph.nodes if n.op == "call_function" and n.meta.get("stack_trace")]
    assert with_trace, "no decomposed node kept a stack_trace"

    expected, got = run_eager_and_exported(built.model, dep, built.args, built.kwargs)
    assert_same_outputs(expected, got, **_TOL)
    _, from_training = run_eager_and_exported(built.model, ep, built.args, built.kwargs)
    assert_same_outputs(from_training, got, **_TOL)
