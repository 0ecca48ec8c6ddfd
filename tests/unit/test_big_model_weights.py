"""Exporting what does not fit: export on the meta device, save the structure, attach weights at load.

The path a 70B model takes (bench/llama70b_bench.py), on a small Llama: built
on the meta device, exported with a dynamic sequence length, saved without
weights; real random weights written by transformers' ``save_pretrained`` as
several shards; the program loaded with those weights attached must give the
eager transformers model's logits. Then every way a checkpoint can fail to
match the program (missing, extra, wrong shape, wrong dtype, tied) on a small
module, each an error naming the tensor.
"""
from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch.export import Dim

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import SerializationError, UnsupportedError
from graphcap.serialize import archive, schema
from graphcap.torch_private.fake import EMBEDDING_OF_META_WEIGHTS_SINCE, embedding_takes_meta_weights

_NEEDS_META_EMBEDDING = pytest.mark.skipif(
    TORCH_LINE < (2, 13), reason="meta weights with real indices need torch 2.13 (an older one refuses them: "
                                 "test_big_model_weights.py::test_meta_weights_with_real_indices_need_their_release)")


def tiny_llama_config(tie: bool):
    return transformers.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, vocab_size=128, max_position_embeddings=128,
                                    tie_word_embeddings=tie)


def meta_llama(config):
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    # the rotary table is a non-persistent buffer, in no checkpoint: computed for real, saved with the structure
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    return model


def export_llama(model):
    ids = torch.zeros(1, 8, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, (ids,), {"use_cache": False},
                               dynamic_shapes={"input_ids": {1: Dim("seq", min=2, max=64)}, "use_cache": None})


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def llama_case(request, tmp_path_factory):
    tie = request.param
    config = tiny_llama_config(tie)
    ep = export_llama(meta_llama(config))
    root = tmp_path_factory.mktemp("llama_tied" if tie else "llama")
    structure = root / "structure.pt2"
    graphcap.save(ep, structure, weights=False)
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(config).eval()
    checkpoint = root / "checkpoint"
    eager.save_pretrained(checkpoint, max_shard_size="40KB")
    return ep, structure, checkpoint, eager


@_NEEDS_META_EMBEDDING
def test_meta_export_keeps_weights_on_meta_and_the_sequence_dynamic(llama_case):
    ep, *_ = llama_case
    assert ep.state_dict and all(t.device.type == "meta" for t in ep.state_dict.values())
    assert ep.constants["model.rotary_emb.inv_freq"].device.type == "cpu"
    assert any(r.upper >= 64 for r in ep.range_constraints.values())
    assert "seq" not in str(ep.graph_signature)  # inputs by name; the symbol is in range_constraints
    decomposed = ep.run_decompositions()  # the rest of the pipeline takes meta weights too
    assert all(t.device.type == "meta" for t in decomposed.state_dict.values())


@_NEEDS_META_EMBEDDING
def test_structure_file_holds_metadata_not_weights(llama_case):
    ep, structure, *_ = llama_case
    entries = archive.read_entries(structure)
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    weights = program["state"]["weights"]
    assert set(weights) == set(ep.state_dict)
    for name, described in weights.items():
        if "alias_of" in described:
            continue
        assert described["storage"] is None
        t = ep.state_dict[name]
        assert described["shape"] == list(t.shape) and described["stride"] == list(t.stride())
        assert described["dtype"] == str(t.dtype) and described["requires_grad"] is True
    weight_bytes = sum(t.numel() * t.element_size() for t in ep.state_dict.values())
    assert len(entries[schema.WEIGHTS_ENTRY]) < 1000 < weight_bytes
    # the rotary table had data: it is kept
    assert program["state"]["constants"]["model.rotary_emb.inv_freq"]["storage"] is not None


@_NEEDS_META_EMBEDDING
def test_sharded_checkpoint_attaches_and_matches_eager(llama_case):
    ep, structure, checkpoint, eager = llama_case
    shards = [f for f in os.listdir(checkpoint) if f.endswith(".safetensors")]
    assert len(shards) > 2 and (checkpoint / "model.safetensors.index.json").exists()
    loaded = graphcap.load(structure, weights=checkpoint)
    for name, t in loaded.state_dict.items():
        assert t.device.type == "cpu" and isinstance(t, torch.nn.Parameter), name
    if eager.config.tie_word_embeddings:
        assert loaded.state_dict["lm_head.weight"] is loaded.state_dict["model.embed_tokens.weight"]
    runnable = loaded.module()
    for seq in (5, 23):  # the dynamic sequence length
        ids = torch.randint(0, 128, (1, seq))
        with torch.no_grad():
            got = runnable(ids, use_cache=False).logits
            want = eager(ids, use_cache=False).logits
        torch.testing.assert_close(got, want)


@_NEEDS_META_EMBEDDING
def test_structure_only_file_needs_weights(llama_case):
    ep, structure, *_ = llama_case
    with pytest.raises(SerializationError, match="saved with weights=False"):
        graphcap.load(structure)
    shell = graphcap.load(structure, weights=False)
    assert "p_model_embed_tokens_weight" in str(shell)
    with pytest.raises(SerializationError, match="weights=False"):
        shell.module()


@_NEEDS_META_EMBEDDING
def test_saving_meta_weights_needs_weights_false(llama_case, tmp_path):
    ep, *_ = llama_case
    with pytest.raises(SerializationError, match=r"(?s)no data .*weights=False"):
        graphcap.save(ep, tmp_path / "full.pt2")
    assert not (tmp_path / "full.pt2").exists()


# ---------------------------------------------------------------------------
# a small module: every way a checkpoint can fail to match
# ---------------------------------------------------------------------------

class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.proj = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, ids):
        return self.head(self.proj(self.embed(ids)) * self.scale)


@pytest.fixture(scope="module")
def tied_structure(tmp_path_factory):
    with torch.device("meta"):
        model = Tied()
    ep = graphcap.export(model, (torch.zeros(3, dtype=torch.long, device="meta"),))
    path = tmp_path_factory.mktemp("tied") / "tied.pt2"
    graphcap.save(ep, path, weights=False)
    return path


def real_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    model = Tied()
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k != "head.weight"}


def test_mapping_attaches_tied_weight_under_either_name(tied_structure):
    sd = real_weights()
    for tied_name in ("embed.weight", "head.weight"):
        weights = dict(sd)
        weights[tied_name] = weights.pop("embed.weight")
        ep = graphcap.load(tied_structure, weights=weights)
        assert ep.state_dict["head.weight"] is ep.state_dict["embed.weight"]
        ids = torch.tensor([1, 2, 3])
        want = torch.nn.functional.linear(
            torch.nn.functional.linear(weights[tied_name][ids], sd["proj.weight"], sd["proj.bias"]) * sd["scale"],
            weights[tied_name])
        torch.testing.assert_close(ep.module()(ids), want)


def test_one_tensor_under_both_tied_names_is_accepted(tied_structure):
    sd = real_weights()
    ep = graphcap.load(tied_structure, weights={**sd, "head.weight": sd["embed.weight"]})
    assert ep.state_dict["head.weight"] is ep.state_dict["embed.weight"]


def test_two_tensors_for_tied_names_are_refused(tied_structure):
    sd = real_weights()
    with pytest.raises(SerializationError, match=r"tied in the program.*'embed.weight' and 'head.weight'") as info:
        graphcap.load(tied_structure, weights={**sd, "head.weight": sd["embed.weight"].clone()})
    assert "one of them only" in info.value.fix


def test_missing_tensor_is_named(tied_structure):
    sd = real_weights()
    del sd["proj.bias"]
    with pytest.raises(SerializationError, match=r"missing from the mapping: 'proj.bias'") as info:
        graphcap.load(tied_structure, weights=sd)
    assert "FQN" in info.value.fix


def test_missing_tied_weight_names_both_names(tied_structure):
    sd = real_weights()
    del sd["embed.weight"]
    with pytest.raises(SerializationError, match=r"'embed.weight' = 'head.weight'"):
        graphcap.load(tied_structure, weights=sd)


def test_extra_tensor_is_named_with_the_closest_name(tied_structure):
    sd = real_weights()
    sd["proj.weights"] = sd.pop("proj.weight")
    with pytest.raises(SerializationError) as info:
        graphcap.load(tied_structure, weights=sd)
    assert "missing from the mapping: 'proj.weight'" in info.value.what
    assert "not in the program: 'proj.weights'" in info.value.what
    assert "closest name to 'proj.weights' is 'proj.weight'" in info.value.fix


def test_wrong_shape_is_named(tied_structure, tmp_path):
    sd = real_weights()
    sd["proj.weight"] = torch.zeros(4, 5)
    save_file(sd, tmp_path / "w.safetensors")
    with pytest.raises(SerializationError, match=r"'proj.weight' has shape \[4, 5\] in .*w.safetensors, \[4, 4\]"):
        graphcap.load(tied_structure, weights=tmp_path / "w.safetensors")


def test_wrong_dtype_is_named(tied_structure, tmp_path):
    sd = real_weights()
    sd["scale"] = sd["scale"].to(torch.bfloat16)
    save_file(sd, tmp_path / "w.safetensors")
    with pytest.raises(SerializationError, match=r"'scale' is torch.bfloat16 .*torch.float32 in the program") as info:
        graphcap.load(tied_structure, weights=tmp_path / "w.safetensors")
    assert "dtype" in info.value.fix


def test_safetensors_file_is_mapped_privately(tied_structure, tmp_path):
    sd = real_weights()
    path = tmp_path / "w.safetensors"
    save_file(sd, path)
    ep = graphcap.load(tied_structure, weights=path)
    torch.testing.assert_close(ep.state_dict["proj.weight"].detach(), sd["proj.weight"])
    with torch.no_grad():
        ep.state_dict["proj.weight"].add_(1.0)  # a weight written in memory never writes the checkpoint
    torch.testing.assert_close(load_file(path)["proj.weight"], sd["proj.weight"])


def test_checkpoint_replaces_the_weights_of_a_full_file(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    ep = graphcap.export(model, (torch.randn(1, 3),))
    full = tmp_path / "full.pt2"
    graphcap.save(ep, full)
    other = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    loaded = graphcap.load(full, weights=other)
    torch.testing.assert_close(loaded.module()(torch.ones(1, 3)), torch.full((1, 2), 3.0))


@pytest.mark.parametrize("bad, message", [
    ("missing.safetensors", "does not exist"),
    ("model.bin", "pickle-based"),
    ("folder", "neither model.safetensors.index.json nor model.safetensors"),
])
def test_unusable_weight_paths(tied_structure, tmp_path, bad, message):
    (tmp_path / "model.bin").write_bytes(b"\x80\x04")
    (tmp_path / "folder").mkdir()
    with pytest.raises(SerializationError, match=message):
        graphcap.load(tied_structure, weights=tmp_path / bad)


def test_index_naming_a_shard_outside_its_folder_is_refused(tied_structure, tmp_path):
    save_file(real_weights(), tmp_path / "outside.safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    index = {"metadata": {}, "weight_map": {k: "../outside.safetensors" for k in real_weights()}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SerializationError, match="outside the checkpoint's folder"):
        graphcap.load(tied_structure, weights=folder)


def test_index_and_shard_disagreeing_is_refused(tied_structure, tmp_path):
    sd = real_weights()
    save_file({k: v for k, v in sd.items() if k != "scale"}, tmp_path / "model-1.safetensors")
    index = {"weight_map": {k: "model-1.safetensors" for k in sd}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SerializationError, match="places 'scale' in model-1.safetensors"):
        graphcap.load(tied_structure, weights=tmp_path)


def test_mapping_of_meta_tensors_is_refused(tied_structure):
    weights = {k: v.to("meta") for k, v in real_weights().items()}
    with pytest.raises(SerializationError, match="without data"):
        graphcap.load(tied_structure, weights=weights)


def test_weights_argument_of_another_kind_is_refused(tied_structure):
    with pytest.raises(SerializationError, match="True, False, a path or a mapping"):
        graphcap.load(tied_structure, weights=3)


def test_fake_weights_export_and_save_structure(tmp_path):
    from graphcap.torch_private.fake import FakeTensorMode
    with FakeTensorMode():
        model = torch.nn.Linear(4, 3)
        x = torch.randn(2, 4)
    ep = graphcap.export(model, (x,), dynamic_shapes=({0: Dim("b")},))
    graphcap.save(ep, tmp_path / "fake.pt2", weights=False)
    loaded = graphcap.load(tmp_path / "fake.pt2", weights={"weight": torch.eye(3, 4), "bias": torch.zeros(3)})
    torch.testing.assert_close(loaded.module()(torch.ones(5, 4)), torch.eye(3, 4).sum(1).expand(5, 3))


class MetaEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        with torch.device("meta"):
            self.embed = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.embed(ids) * 2


def test_meta_weights_with_real_indices_need_their_release():
    """Weights on meta, indices on the CPU: exported (weights kept on meta) where torch's fake
    tensors take the two devices, else refused naming the torch release that does."""
    ids = torch.zeros(2, 3, dtype=torch.long)
    if embedding_takes_meta_weights():
        ep = graphcap.export(MetaEmbedding(), (ids,))
        assert ep.state_dict["embed.weight"].device.type == "meta"
        return
    with pytest.raises(UnsupportedError) as info:
        graphcap.export(MetaEmbedding(), (ids,))
    assert f"torch {EMBEDDING_OF_META_WEIGHTS_SINCE} or newer" in info.value.what
    assert "meta device" in info.value.what and "self.embed(ids)" in (info.value.where or "")
