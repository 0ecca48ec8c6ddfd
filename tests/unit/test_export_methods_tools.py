"""unflatten, verify and the report per method of a multi-method program (issue 27)."""
import copy

import pytest
import torch
from test_export_methods import TinyDecoder, _export

import graphcap
from graphcap.errors import ExportInputError

TOK = torch.tensor([[4]])
PROMPT = torch.tensor([[5, 1, 7, 2]])


@pytest.fixture(scope="module")
def decoder_and_progs():
    torch.manual_seed(0)
    model = TinyDecoder()
    return model, _export(copy.deepcopy(model))


def test_unflatten_rebuilds_each_methods_module_tree(decoder_and_progs):
    model, progs = decoder_and_progs
    for name in progs:
        tree = graphcap.unflatten(progs, method=name)
        assert [n for n, _ in tree.named_children()] == ["emb", "qkv", "head"]
        torch.testing.assert_close(tree.qkv.weight, model.qkv.weight)
    eager = copy.deepcopy(model)
    prefill = graphcap.unflatten(progs["prefill"])
    torch.testing.assert_close(prefill(PROMPT), eager.prefill(PROMPT))
    torch.testing.assert_close(prefill.k_cache, eager.k_cache)  # the method's writes land on its buffers


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_verify_checks_a_stateful_method_against_the_models_method(decoder_and_progs, name):
    model, progs = decoder_and_progs
    eager = copy.deepcopy(model)
    before = {k: v.clone() for k, v in eager.state_dict().items()}
    result = graphcap.verify(progs, eager, method=name, samples=2)
    assert result.passed, result.summary()
    written = {c.name for s in result.input_sets for c in s.outputs if "(written)" in c.name}
    assert {"buffer k_cache (written)", "buffer pos (written)"} <= written  # compared, not skipped
    for k, v in eager.state_dict().items():  # the model's buffers are restored
        assert torch.equal(v, before[k]), k
    same = graphcap.verify(progs[name], getattr(eager, name), samples=2)  # the bound method itself
    assert same.passed, same.summary()


def test_verify_sees_a_method_that_writes_the_wrong_buffer_value(decoder_and_progs):
    model, progs = decoder_and_progs

    class OffByOne(TinyDecoder):
        def decode(self, tok):
            out = super().decode(tok)
            self.pos.add_(1)  # eager steps twice; the program once
            return out
    eager = OffByOne()
    eager.load_state_dict(model.state_dict())
    result = graphcap.verify(progs, eager, method="decode", samples=1, check_refusals=False)
    assert not result.passed and "pos" in result.summary()


def test_report_describes_the_method_named(decoder_and_progs, tmp_path):
    _, progs = decoder_and_progs
    page = graphcap.report(progs, tmp_path / "decode.html", method="decode")
    text = page.read_text()
    assert "method decode" in text and "index_copy" in text


@pytest.mark.parametrize("tool", ["unflatten", "verify", "report"])
def test_a_multi_method_program_without_method_is_refused_naming_the_methods(decoder_and_progs, tool, tmp_path):
    model, progs = decoder_and_progs
    call = {"unflatten": lambda **kw: graphcap.unflatten(progs, **kw),
            "verify": lambda **kw: graphcap.verify(progs, model, **kw),
            "report": lambda **kw: graphcap.report(progs, tmp_path / "r.html", **kw)}[tool]
    with pytest.raises(ExportInputError, match="'prefill', 'decode'") as info:
        call()
    assert "method='prefill'" in str(info.value)
    with pytest.raises(ExportInputError, match="no method 'forward'"):
        call(method="forward")
    with pytest.raises(ExportInputError, match="one program"):
        {"unflatten": lambda: graphcap.unflatten(progs["decode"], method="decode"),
         "verify": lambda: graphcap.verify(progs["decode"], model.decode, method="decode"),
         "report": lambda: graphcap.report(progs["decode"], tmp_path / "r.html", method="decode")}[tool]()
