"""export_methods on an encoder-decoder (transformers T5 built from a config): ``encode`` and ``decode``
share the weights; greedy generation through the program equals eager's (issue 27)."""
import io
import warnings
import zipfile

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration

import graphcap

SOURCES = [torch.tensor([[5, 9, 3, 17, 2]]), torch.tensor([[8, 30, 4, 4, 11, 6, 21, 7, 2]])]
STEPS = 6


class EncodeDecode(torch.nn.Module):
    """T5 with two entry points: the encoder's states once per source, the decoder's logits per step."""

    def __init__(self, t5):
        super().__init__()
        self.t5 = t5

    def encode(self, input_ids):
        return self.t5.encoder(input_ids=input_ids).last_hidden_state

    def decode(self, decoder_input_ids, encoder_hidden_states):
        return self.t5(encoder_outputs=(encoder_hidden_states,), decoder_input_ids=decoder_input_ids,
                       use_cache=False).logits


def _tiny_t5():
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=48, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, attn_implementation="eager")
    return T5ForConditionalGeneration(cfg).eval()


def _greedy(encode, decode, source):
    """Tokens and each step's last logits: the decoder reruns over the tokens so far (no cache)."""
    with torch.no_grad():
        states = encode(source)
        ids, logits = torch.zeros(1, 1, dtype=torch.long), []
        for _ in range(STEPS):
            last = decode(ids, states)[:, -1]
            logits.append(last)
            ids = torch.cat([ids, last.argmax(-1, keepdim=True)], dim=1)
    return ids, logits


@pytest.fixture(scope="module")
def t5_and_progs():
    model = EncodeDecode(_tiny_t5())
    src_len = graphcap.Dim("src_len", max=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation chatter
        progs = graphcap.export_methods(
            model, {"encode": (SOURCES[0],),
                    "decode": (torch.tensor([[0, 4]]), torch.randn(1, SOURCES[0].shape[1], 32))},
            dynamic_shapes={"encode": ({1: src_len},),
                            "decode": ({1: graphcap.Dim("tgt_len", max=32)}, {1: src_len})})
    return model, progs


def test_encoder_and_decoder_share_the_weights(t5_and_progs):
    model, progs = t5_and_progs
    encode, decode = progs["encode"], progs["decode"]
    shared = encode.state_dict["t5.shared.weight"]
    assert decode.state_dict["t5.shared.weight"] is shared  # one tensor for both methods
    assert decode.state_dict["t5.decoder.embed_tokens.weight"] is shared  # tied weights stay tied
    assert decode.state_dict["t5.lm_head.weight"] is shared
    assert encode.state_dict["t5.encoder.block.0.layer.0.SelfAttention.q.weight"] is \
        decode.state_dict["t5.encoder.block.0.layer.0.SelfAttention.q.weight"]
    assert set(progs.state_dict) == set(model.state_dict())


@pytest.mark.parametrize("source", SOURCES, ids=["src5", "src9"])
def test_greedy_generation_through_the_program_equals_eager(t5_and_progs, source):
    model, progs = t5_and_progs
    want_ids, want_logits = _greedy(model.encode, model.decode, source)
    m = progs.module()
    got_ids, got_logits = _greedy(m.encode, m.decode, source)
    assert torch.equal(got_ids, want_ids)
    for got, want in zip(got_logits, want_logits):
        torch.testing.assert_close(got, want)
    # and transformers' own generate (with its cache) picks the same tokens
    with torch.no_grad():
        generated = model.t5.generate(source, max_new_tokens=STEPS, do_sample=False, min_new_tokens=STEPS)
    assert torch.equal(got_ids, generated)


def test_the_file_stores_the_weights_once_and_generates_as_eager(t5_and_progs):
    model, progs = t5_and_progs
    buf = io.BytesIO()
    graphcap.save(progs, buf)
    unique = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in progs.state_dict.values()}
    state_bytes = sum(unique.values())
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as archive:
        assert state_bytes <= archive.getinfo("state.safetensors").file_size < state_bytes + 16384  # each once
        methods = [name for name in archive.namelist() if name.startswith("methods/")]
        assert len(methods) == 2
        for name in methods:  # each method's entry holds its graph, not the weights
            with zipfile.ZipFile(io.BytesIO(archive.read(name))) as entry:
                assert entry.getinfo("weights.safetensors").file_size < 1024
    buf.seek(0)
    loaded = graphcap.load(buf)
    assert loaded["encode"].state_dict["t5.shared.weight"] is loaded["decode"].state_dict["t5.lm_head.weight"]
    m = loaded.module()
    want_ids, want_logits = _greedy(model.encode, model.decode, SOURCES[1])
    got_ids, got_logits = _greedy(m.encode, m.decode, SOURCES[1])
    assert torch.equal(got_ids, want_ids)
    for got, want in zip(got_logits, want_logits):
        torch.testing.assert_close(got, want)
