"""A multi-method program as one ExecuTorch .pte whose methods share their mutable state (issue 27).

ExecuTorch lowers a dict method name -> ExportedProgram into one program with
several methods; ``MemoryPlanningPass(share_mutable_buffers=True)`` places
every mutable buffer that several methods name by one FQN in one allocation,
so the KV cache prefill writes in the runtime is the one decode reads.
"""
import copy
import importlib.util

import pytest
import torch
from test_export_methods import TinyDecoder, _export, _generate

pytestmark = pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                                reason="executorch not installed (the consumers extra, torch 2.14 line)")

PROMPT = torch.tensor([[5, 1, 7, 2]])


def lower_to_pte(progs, initialized=()):
    """One .pte with every method of ``progs``, their mutable buffers shared; ``initialized``: FQN
    patterns of buffers whose initial value the file keeps (ExecuTorch leaves the others unset)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    edge = to_edge_transform_and_lower(dict(progs))
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(list(initialized))] if initialized else [],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True)
    return edge.to_executorch(config).buffer


def load_methods(pte):
    """Every method of the .pte, all loaded before the first call: loading a method sets the shared
    buffers it initializes to their initial value again."""
    from executorch.runtime import Runtime
    program = Runtime.get().load_program(pte)
    return {name: program.load_method(name) for name in sorted(program.method_names)}


def _runtime_calls(methods):
    def call(name):
        return lambda *args: methods[name].execute(list(args))[0]
    return call("prefill"), call("decode")


@pytest.fixture(scope="module")
def decoder_progs_and_pte():
    torch.manual_seed(0)
    model = TinyDecoder()
    eager = copy.deepcopy(model)
    progs = _export(model)
    before = {name: (str(ep.graph), sorted(ep.state_dict), sorted(ep.constants)) for name, ep in progs.items()}
    pte = lower_to_pte(progs, initialized=["k_cache", "v_cache", "pos"])
    after = {name: (str(ep.graph), sorted(ep.state_dict), sorted(ep.constants)) for name, ep in progs.items()}
    assert after == before, "lowering edited the multi-method program it was given"
    return eager, progs, pte


def test_one_pte_holds_every_method(decoder_progs_and_pte):
    _, progs, pte = decoder_progs_and_pte
    methods = load_methods(pte)
    assert sorted(methods) == sorted(progs.methods) == ["decode", "prefill"]


def test_prefill_then_decode_in_the_runtime_equals_eager(decoder_progs_and_pte):
    eager, _, pte = decoder_progs_and_pte
    want_tokens, want_logits = _generate(eager.prefill, eager.decode, PROMPT, 6)
    prefill, decode = _runtime_calls(load_methods(pte))
    tokens, logits = _generate(prefill, decode, PROMPT, 6)
    assert tokens == want_tokens
    for got, want in zip(logits, want_logits):
        torch.testing.assert_close(got, want)


def test_decode_reads_the_cache_prefill_wrote_in_the_runtime(decoder_progs_and_pte):
    """The same decode call after two different prompts: its result follows the prompt, as eager's."""
    eager, _, pte = decoder_progs_and_pte
    tok = torch.tensor([[4]])
    results = []
    for prompt in (PROMPT, torch.tensor([[9, 9, 3]])):
        prefill, decode = _runtime_calls(load_methods(pte))  # a fresh program: its own state
        reference = copy.deepcopy(eager)
        prefill(prompt)
        reference.prefill(prompt)
        got = decode(tok)
        torch.testing.assert_close(got, reference.decode(tok))
        results.append(got)
    assert not torch.allclose(results[0], results[1])


def test_the_program_still_runs_in_python_after_lowering(decoder_progs_and_pte):
    eager, progs, _ = decoder_progs_and_pte
    m = progs.module()
    reference = copy.deepcopy(eager)
    want = _generate(reference.prefill, reference.decode, PROMPT, 3)
    got = _generate(m.prefill, m.decode, PROMPT, 3)
    assert got[0] == want[0]
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b)
