"""Multi-method files and the load options of one program: weights=<checkpoint>, weights=False saves,
import_modules and stand_ins (issue 27)."""
import io

import pytest
import torch
from safetensors.torch import save_file
from test_export_methods import TinyDecoder, _export, _generate
from test_serialize_classes import fresh

import graphcap
from graphcap.errors import SerializationError

PROMPT = torch.tensor([[5, 1, 7, 2]])


@pytest.fixture(scope="module")
def progs():
    torch.manual_seed(0)
    return _export(TinyDecoder())


def _checkpoint_model():
    torch.manual_seed(1)
    return TinyDecoder()


def _assert_generates_as(loaded, model):
    m = loaded.module()
    got, want = _generate(m.prefill, m.decode, PROMPT, 4), _generate(model.prefill, model.decode, PROMPT, 4)
    assert got[0] == want[0]
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b)


def _saved(progs, **kwargs):
    buf = io.BytesIO()
    graphcap.save(progs, buf, **kwargs)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("source", ["mapping", "safetensors folder"])
def test_a_checkpoint_replaces_every_methods_weights_and_keeps_them_shared(progs, source, tmp_path):
    other = _checkpoint_model()
    weights = {k: v for k, v in other.state_dict().items() if k != "head.weight"}  # tied: one name is enough
    if source == "safetensors folder":
        save_file({k: v.contiguous() for k, v in weights.items()}, tmp_path / "model.safetensors")
        weights = tmp_path
    loaded = graphcap.load(_saved(progs), weights=weights)
    prefill, decode = loaded["prefill"], loaded["decode"]
    assert prefill.state_dict["qkv.weight"] is decode.state_dict["qkv.weight"]
    assert decode.state_dict["head.weight"] is prefill.state_dict["emb.weight"]  # the tie kept
    torch.testing.assert_close(decode.state_dict["qkv.weight"], other.qkv.weight)
    _assert_generates_as(loaded, other)


def test_a_structure_only_file_takes_its_weights_from_a_checkpoint(progs, tmp_path):
    structure = _saved(progs, weights=False).getvalue()
    full = _saved(progs).getvalue()
    state_bytes = sum(t.numel() * t.element_size() for t in {id(t): t for t in progs.state_dict.values()}.values())
    assert len(full) - len(structure) >= state_bytes - 1024  # the weights are not in it
    with pytest.raises(SerializationError, match="without its weights"):
        graphcap.load(io.BytesIO(structure))
    shapes = graphcap.load(io.BytesIO(structure), weights=False)
    assert shapes["decode"].state_dict["qkv.weight"].device.type == "meta"
    other = _checkpoint_model()
    _assert_generates_as(graphcap.load(io.BytesIO(structure), weights=other.state_dict()), other)


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_fqns(progs):
    weights = dict(_checkpoint_model().state_dict())
    weights.pop("qkv.bias")
    weights["qkv.weight"] = torch.zeros(3, 3)
    weights["adapter.weight"] = torch.zeros(2)
    with pytest.raises(SerializationError) as info:
        graphcap.load(_saved(progs, weights=False), weights=weights)
    text = str(info.value)
    assert "'qkv.bias'" in text and "adapter.weight" in text and "'qkv.weight' has shape [3, 3]" in text


def test_mmap_load_of_a_multi_method_file(progs, tmp_path):
    graphcap.save(progs, tmp_path / "decoder.pt2")
    loaded = graphcap.load(tmp_path / "decoder.pt2", mmap=True)
    assert loaded["prefill"].state_dict["emb.weight"] is loaded["decode"].state_dict["emb.weight"]


def test_import_modules_and_stand_ins_reach_every_method(tmp_path):
    (tmp_path / "pair_types.py").write_text(
        "import collections\nPair = collections.namedtuple('Pair', ['lo', 'hi'])\n")
    code = """
        import sys, torch, graphcap
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("total", torch.zeros(2))
            def low(self, x):
                import pair_types
                self.total.add_(x)
                return pair_types.Pair(self.total - 1, x)
            def high(self, x):
                import pair_types
                return pair_types.Pair(x, self.total + 1)
        if sys.argv[1] == "save":
            progs = graphcap.export_methods(M(), {"low": (torch.zeros(2),), "high": (torch.zeros(2),)})
            graphcap.save(progs, "pairs.pt2")
        elif sys.argv[1] == "refused":
            try:
                graphcap.load("pairs.pt2")
            except graphcap.SerializationError as e:
                print("REFUSED", "pair_types.Pair" in str(e))
        elif sys.argv[1] == "stand-in":
            m = graphcap.load("pairs.pt2", stand_ins=True).module()
            a, b = m.low(torch.ones(2)), m.high(torch.ones(2))
            print("OUT", type(a).__name__, type(a).__module__, a.lo.tolist(), b.hi.tolist(),
                  "pair_types" in sys.modules)
        else:
            m = graphcap.load("pairs.pt2", import_modules=["pair_types"]).module()
            a = m.low(torch.ones(2))
            print("OUT", type(a) is sys.modules["pair_types"].Pair, m.high(torch.ones(2)).hi.tolist())
    """
    out = fresh(code, tmp_path, "save")
    assert out.returncode == 0, out.stderr
    out = fresh(code, tmp_path, "refused")
    assert out.returncode == 0, out.stderr
    assert "REFUSED True" in out.stdout
    out = fresh(code, tmp_path, "stand-in")
    assert out.returncode == 0, out.stderr
    assert "OUT Pair graphcap.stand_in [0.0, 0.0] [2.0, 2.0] False" in out.stdout
    out = fresh(code, tmp_path, "import")
    assert out.returncode == 0, out.stderr
    assert "OUT True [2.0, 2.0]" in out.stdout
