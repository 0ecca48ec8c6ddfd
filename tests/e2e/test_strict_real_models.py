"""strict=True on every zoo model with its dynamic spec: the program matches eager at the example
and at the zoo's second sizes, after ``run_decompositions()`` and after a save/load round trip, and
lists its inputs as the non-strict program does (bench/probes/strict_zoo_audit.py; docs/torch-suite.md,
"strict=True on real models audit").

GPT-2 returning its ``DynamicCache`` is refused in strict mode, as torch.export's strict mode refuses
it (dynamo cannot return the object); non-strict exports it. The custom models run by default, the
rest are ``slow``.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from conftest import (
    HAVE_SHARED_ZOO,
    assert_same_outputs,
    quiet_warnings,
    run_eager_and_exported,
    save_load,
    zoo_case,
    zoo_export,
    zoo_params,
)
from graphcap.errors import StrictCaptureError

REFUSED_IN_STRICT = {"hf_gpt2_cache"}


def _signature(ep):
    return [(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.input_specs]


@pytest.mark.parametrize("name", zoo_params(("custom_",)))
def test_strict_zoo_dynamic(name):
    built = zoo_case(name)
    with quiet_warnings():
        if name in REFUSED_IN_STRICT:
            with pytest.raises(StrictCaptureError, match="strict=False"):
                graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                                strict=True)
            return
        ep = graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                             strict=True)
    assert _signature(ep) == _signature(zoo_export(name, dynamic=True))
    programs = {"ep": ep, "decomposed": ep.run_decompositions(), "loaded": save_load(ep)}
    for stage, program in programs.items():
        for args, kwargs in ((built.args, built.kwargs), (built.args2, built.kwargs2)):
            expected, got = run_eager_and_exported(built.model, program, args, kwargs)
            try:
                assert_same_outputs(expected, got)
            except AssertionError as e:
                raise AssertionError(f"{stage}: {e}") from None


@pytest.mark.skipif(not HAVE_SHARED_ZOO, reason="needs the public zoo in ../shared/zoo (a transformers BERT)")
def test_bert_spec_names_flags_passed_through_kwargs():
    """transformers 5's BertModel takes ``output_hidden_states`` through ``**kwargs``; a spec naming it at
    the top level is read as torch 2.14 reads it (nested under ``kwargs``)."""
    built = zoo_case("hf_bert")
    kwargs = dict(built.kwargs, output_hidden_states=True, return_dict=False)
    kwargs2 = dict(built.kwargs2, output_hidden_states=True, return_dict=False)
    spec = dict(built.dynamic_shapes, output_hidden_states=None, return_dict=None)
    with quiet_warnings():
        ep = graphcap.export(built.model, (), kwargs, dynamic_shapes=spec)
    expected, got = run_eager_and_exported(built.model, ep, (), kwargs2)
    assert_same_outputs(expected, got)
    assert len(got) == 3 and len(got[2]) == 3  # hidden states of the embeddings and both layers
    with pytest.raises(Exception, match="65|batch"):
        ep.module()(**dict(kwargs2, input_ids=torch.zeros(65, 24, dtype=torch.long),
                           attention_mask=torch.ones(65, 24, dtype=torch.long)))
