"""export_methods: several methods of one module over one shared state (issue 27)."""
import copy

import pytest
import torch

import graphcap
from graphcap.errors import ExportInputError
from graphcap.multi_method import MultiMethodProgram


class TinyDecoder(torch.nn.Module):
    """One attention layer over a static KV cache; prefill fills it, decode appends one step."""

    def __init__(self, vocab=13, dim=8, max_len=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("pos", torch.zeros((), dtype=torch.long))
        self.max_len = max_len

    def _attend(self, q, upto):
        mask = torch.arange(self.max_len) < upto
        scores = (q @ self.k_cache.transpose(1, 2)).masked_fill(~mask, float("-inf"))
        return self.head(scores.softmax(-1) @ self.v_cache)

    def prefill(self, ids):
        q, k, v = self.qkv(self.emb(ids)).chunk(3, -1)
        n = ids.shape[1]
        self.k_cache[:, :n] = k
        self.v_cache[:, :n] = v
        self.pos.fill_(n)
        return self._attend(q[:, -1:], self.pos)

    def decode(self, tok):
        q, k, v = self.qkv(self.emb(tok)).chunk(3, -1)
        self.k_cache.index_copy_(1, self.pos.view(1), k)
        self.v_cache.index_copy_(1, self.pos.view(1), v)
        self.pos.add_(1)
        return self._attend(q, self.pos)


def _generate(prefill, decode, ids, steps):
    tokens, logits = [], []
    with torch.no_grad():
        out = prefill(ids)
        for _ in range(steps):
            logits.append(out)
            tok = out.argmax(-1)
            tokens.append(tok.item())
            out = decode(tok)
    return tokens, logits


def _export(model):
    return graphcap.export_methods(
        model, {"prefill": (torch.tensor([[1, 2, 3]]),), "decode": (torch.tensor([[4]]),)},
        dynamic_shapes={"prefill": ({1: graphcap.Dim("seq", max=15)},)})


@pytest.fixture(scope="module")
def decoder_and_progs():
    torch.manual_seed(0)
    model = TinyDecoder()
    return model, _export(model)


def test_each_method_is_a_program_over_the_same_state(decoder_and_progs):
    model, progs = decoder_and_progs
    assert isinstance(progs, MultiMethodProgram) and progs.methods == ["prefill", "decode"]
    assert set(progs) == {"prefill", "decode"} and len(progs) == 2
    prefill, decode = progs["prefill"], progs["decode"]
    assert isinstance(prefill, graphcap.ExportedProgram)
    for fqn in ("emb.weight", "qkv.weight", "k_cache", "pos"):
        assert prefill.state_dict[fqn] is decode.state_dict[fqn] is progs.state_dict[fqn]
    assert decode.state_dict["head.weight"] is decode.state_dict["emb.weight"]  # tied stays tied
    # the FQNs are the model's own
    assert set(progs.state_dict) == set(model.state_dict())
    with pytest.raises(KeyError, match="'prefill', 'decode'"):
        progs["generate"]


def test_module_shares_the_kv_cache_between_methods(decoder_and_progs):
    model, progs = decoder_and_progs
    eager = copy.deepcopy(model)
    m = progs.module()
    ids = torch.tensor([[5, 1, 7, 2, 9]])
    want_tokens, want_logits = _generate(eager.prefill, eager.decode, ids, 6)
    got_tokens, got_logits = _generate(m.prefill, m.decode, ids, 6)
    assert got_tokens == want_tokens
    for a, b in zip(got_logits, want_logits):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(m.k_cache, eager.k_cache)
    assert m.pos.item() == ids.shape[1] + 6 == eager.pos.item()
    # each tensor once in the module's state, under the model's FQNs; tied stays tied
    assert list(m.state_dict()) == list(model.state_dict()) or set(m.state_dict()) == set(model.state_dict())
    assert m.head.weight is m.emb.weight
    # the module holds the programs' state, which is the model's: updated as eager's
    assert progs.state_dict["pos"] is m.pos
    assert progs.state_dict["pos"].item() == model.pos.item() == eager.pos.item()


def test_the_decode_reads_what_prefill_wrote():
    """Without sharing, decode would read an empty cache: its output differs from eager's."""
    torch.manual_seed(1)
    model = TinyDecoder()
    m = _export(model).module()
    eager, fresh = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        m.prefill(torch.tensor([[3, 4, 5, 6]]))
        eager.prefill(torch.tensor([[3, 4, 5, 6]]))
        cold = fresh.decode(torch.tensor([[2]]))
        got, want = m.decode(torch.tensor([[2]])), eager.decode(torch.tensor([[2]]))
    torch.testing.assert_close(got, want)
    assert not torch.allclose(cold, want)


def test_module_after_to_and_load_state_dict():
    """``.to()`` and ``load_state_dict(assign=True)`` replace the module's tensors; every method
    follows. (Parameters are shared with the program, as ``ep.module()``'s are, so ``.to()``
    converts the program's too: a fresh export here.)"""
    torch.manual_seed(2)
    model = TinyDecoder()
    progs = _export(model)
    m2 = progs.module()
    m2.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    eager = copy.deepcopy(model)
    ids = torch.tensor([[1, 2]])
    assert _generate(m2.prefill, m2.decode, ids, 3)[0] == _generate(eager.prefill, eager.decode, ids, 3)[0]
    # assign=True gave m2 tensors of its own: the programs' state is left as it was
    assert m2.k_cache.abs().sum() > 0 and progs.state_dict["k_cache"].abs().sum() == 0
    m = progs.module().to(torch.float64)
    eager = copy.deepcopy(model).to(torch.float64)
    ids = torch.tensor([[1, 2]])
    got, want = _generate(m.prefill, m.decode, ids, 3), _generate(eager.prefill, eager.decode, ids, 3)
    assert got[0] == want[0] and got[1][-1].dtype == torch.float64
    torch.testing.assert_close(got[1][-1], want[1][-1])


class Replacer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def add(self, x):
        self.total = self.total + x  # a new tensor object, not an in-place write
        return self.total * 1

    def read(self, y):
        return self.total + y

    def forward(self, x):
        return x * 2


def test_a_method_replacing_a_buffer_still_shares_it():
    progs = graphcap.export_methods(Replacer(), {"add": (torch.ones(3),), "read": (torch.ones(3),),
                                                 "forward": (torch.ones(3),)})
    m = progs.module()
    m.add(torch.full((3,), 2.0))
    m.add(torch.full((3,), 1.0))
    torch.testing.assert_close(m.read(torch.zeros(3)), torch.full((3,), 3.0))
    torch.testing.assert_close(m(torch.ones(3)), torch.full((3,), 2.0))


def test_kwargs_inputs_and_errors_name_the_method():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.scale = 2.0

        def scaled(self, x, *, factor):
            return self.lin(x) * factor

    progs = graphcap.export_methods(M(), {"scaled": ((torch.ones(1, 2),), {"factor": torch.ones(1)})})
    assert progs.module().scaled(torch.ones(1, 2), factor=torch.ones(1)).shape == (1, 2)
    with pytest.raises(ExportInputError, match="M has no method 'decode'") as e:
        graphcap.export_methods(M(), {"decode": (torch.ones(1, 2),)})
    assert "'scaled'" in e.value.fix
    with pytest.raises(ExportInputError, match="M.lin is a submodule, not a method"):
        graphcap.export_methods(M(), {"lin": (torch.ones(1, 2),)})
    with pytest.raises(ExportInputError, match="M.scale is float, not a method"):
        graphcap.export_methods(M(), {"scale": (torch.ones(1, 2),)})
    with pytest.raises(ExportInputError, match="at least one method"):
        graphcap.export_methods(M(), {})
    with pytest.raises(ExportInputError, match="spec for method 'forward', which has no example inputs"):
        graphcap.export_methods(M(), {"scaled": ((torch.ones(1, 2),), {"factor": torch.ones(1)})},
                                dynamic_shapes={"forward": ({0: graphcap.Dim("b")},)})
    with pytest.raises(ExportInputError, match="method 'scaled' are a Tensor, not a tuple"):
        graphcap.export_methods(M(), {"scaled": torch.ones(1, 2)})


def test_a_failing_method_is_named():
    class Grow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.zeros(2))

        def grow(self, x):
            self.c = torch.cat([self.c, x])
            return self.c.sum()

    with pytest.raises(graphcap.UnsupportedError) as e:
        graphcap.export_methods(Grow(), {"grow": (torch.ones(2),)})
    assert "buffer 'c'" in str(e.value) and any("method 'grow'" in n for n in e.value.__notes__)


def test_methods_that_disagree_about_a_state_tensor():
    model = Replacer()
    a = graphcap.export(model.add, (torch.ones(3),))
    model.register_buffer("total", torch.zeros(4))  # the state changed between the two traces
    b = graphcap.export(model.read, (torch.ones(4),))
    with pytest.raises(ExportInputError, match=r"'add' and 'read' disagree about the state 'total'") as e:
        MultiMethodProgram({"add": a, "read": b})
    assert "float32[3]" in str(e.value) and "float32[4]" in str(e.value)
    assert "method 'read', state 'total'" in e.value.where
    c = graphcap.export(Replacer().read, (torch.ones(3),))
    with pytest.raises(ExportInputError, match="hold different tensors under the state 'total'"):
        MultiMethodProgram({"add": a, "read": c})


def test_a_method_named_like_a_module_attribute_is_refused_by_module():
    class M(torch.nn.Module):
        def to_list(self, x):
            return x + 1

        def half(self, x):  # shadows nn.Module.half
            return x / 2

    progs = graphcap.export_methods(M(), {"to_list": (torch.ones(2),), "half": (torch.ones(2),)})
    torch.testing.assert_close(progs["half"].module()(torch.ones(2)), torch.full((2,), 0.5))
    with pytest.raises(ExportInputError, match="Method 'half' cannot be a method of the module"):
        progs.module()


def test_save_and_load_store_each_tensor_once(tmp_path):
    torch.manual_seed(3)
    model = TinyDecoder(vocab=1000, dim=64)  # weights (about 300 kB) outweigh the graphs
    progs = _export(model)
    path = tmp_path / "methods.pt2"
    graphcap.save(progs, path, extra_files={"notes.txt": "v1"})
    single = tmp_path / "prefill.pt2"
    graphcap.save(progs["prefill"], single)
    state_bytes = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                       for t in progs.state_dict.values()}.values())
    # the state once: the second method adds its graph, not another copy of the weights
    assert state_bytes < path.stat().st_size < single.stat().st_size + state_bytes // 4
    for mmap in (False, True):
        extra = {"notes.txt": None}
        loaded = graphcap.load(path, mmap=mmap, extra_files=extra)
        assert extra["notes.txt"] == "v1"
        assert isinstance(loaded, MultiMethodProgram) and loaded.methods == ["prefill", "decode"]
        a, b = loaded["prefill"], loaded["decode"]
        for fqn in ("emb.weight", "k_cache", "pos"):
            assert a.state_dict[fqn] is b.state_dict[fqn]
            torch.testing.assert_close(a.state_dict[fqn], progs.state_dict[fqn])
        assert a.state_dict["head.weight"] is a.state_dict["emb.weight"]
        m, eager = loaded.module(), copy.deepcopy(model)
        ids = torch.tensor([[2, 3, 4]])
        assert _generate(m.prefill, m.decode, ids, 4) [0] == _generate(eager.prefill, eager.decode, ids, 4)[0]
    # a single program still loads as one
    assert isinstance(graphcap.load(single), graphcap.ExportedProgram)
    with open(path, "rb") as fh:
        assert isinstance(graphcap.load(fh), MultiMethodProgram)
    structure = graphcap.load(path, weights=False)
    assert structure["decode"].state_dict["k_cache"].device.type == "meta"


def test_a_bound_method_with_a_dynamic_dim_exports():
    """The input-size reads a dynamic dim adds run outside any submodule call of a bound method:
    they get the empty module stack (the verifier refused the program when they had none)."""
    model = TinyDecoder()
    ep = graphcap.export(model.prefill, (torch.tensor([[1, 2, 3]]),),
                         dynamic_shapes=({1: graphcap.Dim("seq", max=15)},))
    assert all("nn_module_stack" in n.meta for n in ep.graph.nodes if n.op == "call_function")
    ids = torch.tensor([[4, 5, 6, 7, 8]])
    eager = copy.deepcopy(model)  # before the run: the program updates the model's own cache
    torch.testing.assert_close(ep.module()(ids), eager.prefill(ids))


def test_run_decompositions_keeps_the_sharing(decoder_and_progs):
    model, progs = decoder_and_progs
    core = progs.run_decompositions()
    assert core["prefill"].dialect == "ATEN" and core.methods == progs.methods
    assert core["prefill"].state_dict["k_cache"] is core["decode"].state_dict["k_cache"]
    m, eager = core.module(), copy.deepcopy(model)
    ids = torch.tensor([[6, 2, 8]])
    assert _generate(m.prefill, m.decode, ids, 4)[0] == _generate(eager.prefill, eager.decode, ids, 4)[0]


def test_a_damaged_shared_state_never_loads_silently(tmp_path):
    """The one state entry is checked as a single program's weights are: with and without mmap."""
    from graphcap.serialize.archive import ArchiveReader
    from graphcap.serialize.multi_method import STATE_ENTRY
    path = tmp_path / "methods.pt2"
    graphcap.save(_export(TinyDecoder(vocab=50, dim=16)), path)
    reader = ArchiveReader(str(path))
    loc = reader.location(STATE_ENTRY)
    reader.release()
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.size - 7] ^= 0x10  # inside the last storage's bytes
    path.write_bytes(bytes(data))
    for mmap in (False, True):
        with pytest.raises(graphcap.SerializationError) as info:
            graphcap.load(path, mmap=mmap)
        assert STATE_ENTRY in str(info.value)
