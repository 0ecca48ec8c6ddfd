"""Multi-method programs audit: ``graphcap.export_methods`` on real use.

torch.export has no multi-method program; the reference for each method is torch.export of
that method alone (a wrapper module whose forward calls it) and eager. Each case is a small
seeded model, the example inputs of its methods, optional dynamic_shapes, and a call
sequence (method, args, kwargs) that eager and each graphcap form run in turn from the
model's initial state; outputs and the final buffers are compared.

Forms per case: ``module()``, ``run_decompositions().module()``, save/load, each method's
``unflatten(progs, method=...)`` (one call from a fresh state), ExecuTorch ``.pte`` (where
the case asks), ``strict=True`` (where the case asks), and ``torch.export`` of each method
through a wrapper (does it export? does its module match eager for that method's first call?).

    case | form: = / what differs / exception's class and first line

Run: PYTHONPATH=src python bench/probes/multi_method_audit.py [case-substring ...]
"""
from __future__ import annotations

import copy
import os
import sys
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import graphcap

warnings.filterwarnings("ignore")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.is_floating_point:
            return torch.allclose(a, b, atol=1e-5, rtol=1e-4, equal_nan=True)
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


@dataclass
class Case:
    name: str
    make: Callable[[], torch.nn.Module]
    inputs: dict
    calls: list  # (method, args, kwargs)
    dynamic_shapes: Any = None
    executorch: bool = False
    et_init: tuple = ()
    strict: bool = False
    notes: list = field(default_factory=list)


def _run_calls(call: Callable[[str, tuple, dict], Any], calls: list) -> list:
    import torch.utils._pytree as pytree
    return [pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, call(m, a, k))
            for m, a, k in calls]


def _buffers(mod: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in mod.named_buffers()}


def _compare_seq(label: str, want: list, got: list) -> str:
    for i, (w, g) in enumerate(zip(want, got)):
        if not _close(w, g):
            return f"call {i} differs"
    return "="


# ---------------------------------------------------------------------- models
class Seq2Seq(torch.nn.Module):
    """encode writes the memory buffer; decode_step reads it, writes the KV cache at pos; reset_cache."""

    def __init__(self, vocab=11, dim=8, max_len=12):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, dim)
        self.enc = torch.nn.Linear(dim, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, vocab)
        self.register_buffer("memory", torch.zeros(1, max_len, dim))
        self.register_buffer("mem_len", torch.zeros((), dtype=torch.long))
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("pos", torch.zeros((), dtype=torch.long))
        self.max_len = max_len

    def encode(self, src):
        h = torch.tanh(self.enc(self.emb(src)))
        n = src.shape[1]
        self.memory.zero_()
        self.memory[:, :n] = h
        self.mem_len.fill_(n)
        return h.mean(1)

    def decode_step(self, tok):
        q, k, v = self.qkv(self.emb(tok)).chunk(3, -1)
        self.k_cache.index_copy_(1, self.pos.view(1), k)
        self.v_cache.index_copy_(1, self.pos.view(1), v)
        self.pos.add_(1)
        idx = torch.arange(self.max_len)
        self_mask = idx < self.pos
        mem_mask = idx < self.mem_len
        s = (q @ self.k_cache.transpose(1, 2)).masked_fill(~self_mask, float("-inf")).softmax(-1) @ self.v_cache
        c = (q @ self.memory.transpose(1, 2)).masked_fill(~mem_mask, float("-inf")).softmax(-1) @ self.memory
        return self.out(s + c)

    def reset_cache(self):
        self.k_cache.zero_()
        self.v_cache.zero_()
        self.pos.zero_()
        return self.pos.clone()


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("total", torch.zeros(3))
        self.register_buffer("n", torch.zeros((), dtype=torch.long))
        self.lin = torch.nn.Linear(3, 3)

    def add(self, x):
        self.total.add_(x)
        self.n.add_(1)
        return self.total.clone()

    def mean(self, scale):
        return self.lin(self.total / self.n.clamp(min=1)) * scale

    def reset(self):
        self.total.zero_()
        self.n.zero_()
        return self.n + 0


class Reassign(torch.nn.Module):
    """Methods assigning new tensors to buffers (not in place)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(2, 4))

    def push(self, x):
        self.state = self.state * 0.5 + x
        return self.state.sum()

    def peek(self, y):
        return self.state @ y


class NonPersistent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scratch", torch.zeros(4), persistent=False)
        self.register_buffer("scale", torch.full((4,), 2.0), persistent=False)
        self.w = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))

    def write(self, x):
        self.scratch.copy_(x * self.scale)
        return x @ self.w

    def read(self, y):
        return (y + self.scratch) @ self.w


class DynShapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 6)
        self.register_buffer("last", torch.zeros(6))

    def batch(self, x):          # dim 0 dynamic
        y = self.lin(x)
        self.last.copy_(y.mean(0))
        return y

    def seq(self, x):            # dim 1 dynamic, 3-d
        return self.lin(x).sum(1) + self.last

    def pair(self, a, b):        # a shared Dim
        return self.lin(a) + self.lin(b)


class Kwargs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("acc", torch.zeros(4))

    def step(self, x, *, mask=None, alpha=1.0):
        y = self.lin(x)
        if mask is not None:
            y = y * mask
        self.acc.add_(y.sum(0) * alpha)
        return y

    def score(self, x, bias=None):
        out = self.lin(x) @ self.acc
        return out if bias is None else out + bias


class Pytree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.register_buffer("mem", torch.zeros(4))

    def put(self, batch):
        self.mem.copy_(batch["x"].sum(0) + batch["pair"][0].sum(0) - batch["pair"][1].sum(0))
        return {"ax": self.a(batch["x"]), "parts": [self.b(p) for p in batch["pair"]]}

    def get(self, xs):
        return tuple(self.a(x) + self.mem for x in xs), {"m": self.mem * 2}


class Cond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("flag", torch.zeros((), dtype=torch.long))

    def arm(self, v):
        self.flag.copy_(v)
        return self.flag + 0

    def run(self, x):
        return torch.cond(self.flag > 0, lambda x: self.lin(x).relu(), lambda x: -self.lin(x), (x,))


class CondOnInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("hits", torch.zeros(4))

    def run(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x) * 2, lambda x: self.lin(x) - 1, (x,))

    def bump(self, x):
        self.hits.add_(x.sum(0))
        return self.hits.clone()


class CallsOther(torch.nn.Module):
    """One method calls another method (and both write)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def inner(self, x):
        self.calls.add_(1)
        return self.lin(x)

    def outer(self, x):
        return self.inner(self.inner(x)) + self.calls

    def forward(self, x):
        return self.lin(x) * 3


class SubmoduleState(torch.nn.Module):
    """A submodule holds the buffer; one method writes it through the submodule."""

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", torch.zeros(4))

        def update(self, x):
            self.running.mul_(0.9).add_(x.mean(0) * 0.1)

    def __init__(self):
        super().__init__()
        self.norm = self.Norm()
        self.bn = torch.nn.BatchNorm1d(4)
        self.bn.eval()

    def observe(self, x):
        self.norm.update(x)
        return x - self.norm.running

    def apply(self, x):
        return self.bn(x) + self.norm.running

    def apply_norm(self, x):
        return self.bn(x) + self.norm.running


class AliasOut(torch.nn.Module):
    """A method returns a buffer itself; the other writes that buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def view(self):
        return self.buf

    def write(self, x):
        self.buf.add_(x)
        return x * 2


class ConstAttr(torch.nn.Module):
    """A plain tensor attribute (lifted constant) read by both methods; a scalar input."""

    def __init__(self):
        super().__init__()
        self.table = torch.arange(8.0).reshape(2, 4)
        self.register_buffer("off", torch.zeros(4))

    def first(self, x, k: int):
        self.off.add_(self.table[0] * k)
        return x + self.table[0]

    def second(self, x):
        return x * self.table[1] + self.off


class InputMutation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def fill(self, out):
        out.add_(self.seen + 1)
        self.seen.add_(1)
        return out.sum()

    def peek(self):
        return self.seen * 1


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(9, 4)
        self.head = torch.nn.Linear(4, 9, bias=False)
        self.head.weight = self.emb.weight

    def embed(self, ids):
        return self.emb(ids)

    def logits(self, h):
        return self.head(h)


class GRUStep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.cell = torch.nn.GRUCell(4, 4)
        self.register_buffer("h", torch.zeros(1, 4))

    def step(self, x):
        self.h.copy_(self.cell(x, self.h))
        return self.h.clone()

    def peek(self):
        return self.h + 0

    def set_state(self, h):
        self.h.copy_(h)
        return h.sum()


class DtypeBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hist", torch.zeros(5, dtype=torch.int32))
        self.register_buffer("mask", torch.zeros(5, dtype=torch.bool))
        self.register_buffer("halfs", torch.zeros(5, dtype=torch.float16))

    def record(self, idx):
        self.hist.index_add_(0, idx, torch.ones_like(idx, dtype=torch.int32))
        self.mask.index_fill_(0, idx, True)
        self.halfs.add_(torch.ones(5, dtype=torch.float16))
        return self.hist.sum()

    def query(self, x):
        return (x * self.mask + self.hist.float()) + self.halfs.float()


class QuantTwo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 16)
        self.register_buffer("acc", torch.zeros(16))

    def encode(self, x):
        y = self.l2(torch.relu(self.l1(x)))
        self.acc.add_(y.sum(0))
        return y

    def project(self, x):
        return self.l1(x) + self.acc.sum()


class ParamWrite(torch.nn.Module):
    """One method updates a parameter under no_grad (an online update); the other reads it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("lr", torch.tensor(0.1))

    def learn(self, x, target):
        with torch.no_grad():
            err = x @ self.w - target
            self.w.sub_(self.lr * x.t() @ err)
        return err.pow(2).mean()

    def predict(self, x):
        return x @ self.w


class Misc(torch.nn.Module):
    """Non-tensor outputs, defaults left out, None in outputs, a shape read."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def stats(self, x, scale=2.0, extra=None):
        self.count.add_(x.shape[0])
        y = self.lin(x) * scale
        return y, None, x.shape[0], (y if extra is None else y + extra)

    def total(self):
        return self.count * 1


class Grow(torch.nn.Module):
    """A method that grows a buffer (refused by the export, as documented)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("hist", torch.zeros(1, 4))

    def push(self, x):
        self.hist = torch.cat([self.hist, x])
        return self.hist.sum()

    def peek(self):
        return self.hist.sum()


class BNTrain(torch.nn.Module):
    """fit runs batch norm in training mode (running stats and the batch counter written); infer
    normalizes with the running stats; a submodule shared under two names."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.bn = torch.nn.BatchNorm1d(4)
        self.proj = torch.nn.Linear(4, 4)
        self.proj_alias = self.proj

    def fit(self, x):
        return self.proj(self.bn(x))

    def infer(self, x):
        y = torch.nn.functional.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight,
                                           self.bn.bias, training=False)
        return self.proj_alias(y) + self.bn.num_batches_tracked

    def window(self):
        return self.bn.running_mean[:2]


class Hooked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def encode(self, x):
        return self.lin(x)

    def forward(self, x):
        self.calls.add_(1)
        return self.lin(x) + self.calls


def make_hooked():
    m = Hooked()
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 10,))
    m.register_forward_hook(lambda mod, args, out: out - 1)
    return m


def make_quant_dyn():
    m = QuantTwo()
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    quantize_(m, Int8DynamicActivationInt8WeightConfig())
    return m


_PT2E: dict = {}


class PT2ETwo(torch.nn.Module):
    """Two methods over a pt2e-quantized (XNNPACKQuantizer, per-channel) body, a buffer between them."""

    def __init__(self, body):
        super().__init__()
        self.body = body
        self.register_buffer("last", torch.zeros(2, 8))

    def encode(self, x):
        y = self.body(x)
        self.last.copy_(y)
        return y

    def refine(self, x):
        return self.body(x + self.last)


def make_pt2e():
    if "q" not in _PT2E:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        torch.manual_seed(0)
        body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).eval()
        ep = graphcap.export(body, (torch.randn(2, 8),))
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(ep.module(), quantizer)
        with torch.no_grad():
            for _ in range(3):
                prepared(torch.randn(2, 8, generator=torch.Generator().manual_seed(_)))
        _PT2E["q"] = convert_pt2e(prepared)
    return PT2ETwo(_PT2E["q"])


def make_quant():
    m = QuantTwo()
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    quantize_(m, Int8WeightOnlyConfig())
    return m


def make_hf_seq2seq():
    from transformers import BartConfig, BartForConditionalGeneration
    cfg = BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                     attn_implementation="eager")
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(cfg).eval()

    class EncDec(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def encode(self, input_ids):
            return self.m.get_encoder()(input_ids=input_ids).last_hidden_state

        def decode(self, decoder_input_ids, encoder_hidden_states):
            return self.m(encoder_outputs=(encoder_hidden_states,), decoder_input_ids=decoder_input_ids,
                          use_cache=False).logits
    return EncDec(bart)


# ---------------------------------------------------------------------- cases
T = torch.tensor
R = torch.Generator().manual_seed(3)


def rn(*s):
    return torch.randn(*s, generator=R)


s2s_calls = [("encode", (T([[1, 2, 3]]),), {}), ("decode_step", (T([[4]]),), {}), ("decode_step", (T([[5]]),), {}),
             ("reset_cache", (), {}), ("decode_step", (T([[6]]),), {}), ("encode", (T([[7, 8, 9, 1, 2]]),), {}),
             ("decode_step", (T([[3]]),), {})]
cnt_calls = [("add", (rn(3),), {}), ("mean", (T(2.0),), {}), ("add", (rn(3),), {}), ("mean", (T(0.5),), {}),
             ("reset", (), {}), ("mean", (T(1.0),), {}), ("add", (rn(3),), {}), ("mean", (T(1.0),), {})]
seq = graphcap.Dim("seq", max=10)
b = graphcap.Dim("b", max=16)

CASES = [
    Case("seq2seq", Seq2Seq, {"encode": (T([[1, 2, 3]]),), "decode_step": (T([[4]]),), "reset_cache": ()},
         s2s_calls, dynamic_shapes={"encode": ({1: seq},)}, executorch=True,
         et_init=("memory", "mem_len", "k_cache", "v_cache", "pos")),
    Case("seq2seq_strict", Seq2Seq, {"encode": (T([[1, 2, 3]]),), "decode_step": (T([[4]]),), "reset_cache": ()},
         s2s_calls, dynamic_shapes={"encode": ({1: seq},)}, strict=True),
    Case("seq2seq_reverse_order", Seq2Seq, {"reset_cache": (), "decode_step": (T([[4]]),), "encode": (T([[1, 2, 3]]),)},
         [("decode_step", (T([[2]]),), {}), ("encode", (T([[1, 2]]),), {}), ("decode_step", (T([[4]]),), {}),
          ("reset_cache", (), {}), ("encode", (T([[3, 3, 3, 3]]),), {}), ("decode_step", (T([[1]]),), {})],
         dynamic_shapes={"encode": ({1: seq},)}),
    Case("counter", Counter, {"add": (rn(3),), "mean": (T(1.0),), "reset": ()}, cnt_calls, executorch=True,
         et_init=("total", "n")),
    Case("counter_strict", Counter, {"add": (rn(3),), "mean": (T(1.0),), "reset": ()}, cnt_calls, strict=True),
    Case("reassign", Reassign, {"push": (rn(2, 4),), "peek": (rn(4),)},
         [("push", (rn(2, 4),), {}), ("peek", (rn(4),), {}), ("push", (rn(2, 4),), {}), ("peek", (rn(4),), {})],
         executorch=True, et_init=("state",)),
    Case("non_persistent", NonPersistent, {"write": (rn(4),), "read": (rn(4),)},
         [("read", (rn(4),), {}), ("write", (rn(4),), {}), ("read", (rn(4),), {})], executorch=True,
         et_init=("scratch", "scale")),
    Case("dyn_shapes", DynShapes, {"batch": (rn(3, 6),), "seq": (rn(2, 5, 6),), "pair": (rn(4, 6), rn(4, 6))},
         [("batch", (rn(7, 6),), {}), ("seq", (rn(2, 9, 6),), {}), ("batch", (rn(2, 6),), {}),
          ("seq", (rn(2, 3, 6),), {}), ("pair", (rn(9, 6), rn(9, 6)), {})],
         dynamic_shapes={"batch": ({0: b},), "seq": ({1: seq},), "pair": ({0: b}, {0: b})}),
    Case("kwargs", Kwargs, {"step": ((rn(2, 4),), {"mask": rn(2, 4), "alpha": 0.5}),
                            "score": ((rn(3, 4),), {"bias": rn(3)})},
         [("step", (rn(2, 4),), {"mask": rn(2, 4), "alpha": 0.5}), ("score", (rn(3, 4),), {"bias": rn(3)}),
          ("step", (rn(2, 4),), {"mask": rn(2, 4), "alpha": 0.5}), ("score", (rn(3, 4),), {"bias": rn(3)})]),
    Case("pytree", Pytree, {"put": ({"x": rn(2, 4), "pair": (rn(2, 4), rn(2, 4))},), "get": ([rn(1, 4), rn(3, 4)],)},
         [("put", ({"x": rn(2, 4), "pair": (rn(2, 4), rn(2, 4))},), {}), ("get", ([rn(1, 4), rn(3, 4)],), {}),
          ("put", ({"x": rn(2, 4), "pair": (rn(2, 4), rn(2, 4))},), {}), ("get", ([rn(1, 4), rn(3, 4)],), {})]),
    Case("cond_on_buffer", Cond, {"arm": (T(1),), "run": (rn(2, 4),)},
         [("run", (rn(2, 4),), {}), ("arm", (T(1),), {}), ("run", (rn(2, 4),), {}), ("arm", (T(0),), {}),
          ("run", (rn(2, 4),), {})], executorch=True, et_init=("flag",)),
    Case("cond_on_buffer_strict", Cond, {"arm": (T(1),), "run": (rn(2, 4),)},
         [("run", (rn(2, 4),), {}), ("arm", (T(1),), {}), ("run", (rn(2, 4),), {})], strict=True),
    Case("cond_on_input", CondOnInput, {"run": (rn(2, 4),), "bump": (rn(2, 4),)},
         [("run", (rn(2, 4).abs(),), {}), ("bump", (rn(2, 4),), {}), ("run", (-rn(2, 4).abs(),), {})]),
    Case("calls_other_and_forward", CallsOther, {"inner": (rn(2, 4),), "outer": (rn(2, 4),), "forward": (rn(2, 4),)},
         [("outer", (rn(2, 4),), {}), ("inner", (rn(2, 4),), {}), ("forward", (rn(2, 4),), {}),
          ("outer", (rn(2, 4),), {})]),
    Case("submodule_state", SubmoduleState, {"observe": (rn(3, 4),), "apply_norm": (rn(3, 4),)},
         [("observe", (rn(3, 4),), {}), ("apply_norm", (rn(3, 4),), {}), ("observe", (rn(3, 4),), {}),
          ("apply_norm", (rn(3, 4),), {})], executorch=True, et_init=("norm.running",)),
    Case("alias_out", AliasOut, {"view": (), "write": (rn(3),)},
         [("view", (), {}), ("write", (rn(3),), {}), ("view", (), {}), ("write", (rn(3),), {}), ("view", (), {})]),
    Case("const_attr_int", ConstAttr, {"first": (rn(4), 2), "second": (rn(4),)},
         [("first", (rn(4), 2), {}), ("second", (rn(4),), {}), ("first", (rn(4), 2), {}), ("second", (rn(4),), {})]),
    Case("input_mutation", InputMutation, {"fill": (torch.zeros(3),), "peek": ()},
         [("fill", (torch.zeros(3),), {}), ("peek", (), {}), ("fill", (torch.ones(3),), {}), ("peek", (), {})]),
    Case("tied", Tied, {"embed": (T([[1, 2]]),), "logits": (rn(1, 2, 4),)},
         [("embed", (T([[3, 4]]),), {}), ("logits", (rn(1, 2, 4),), {})], executorch=True),
    Case("gru_state", GRUStep, {"step": (rn(1, 4),), "peek": (), "set_state": (rn(1, 4),)},
         [("step", (rn(1, 4),), {}), ("peek", (), {}), ("set_state", (rn(1, 4),), {}), ("step", (rn(1, 4),), {}),
          ("peek", (), {})], executorch=True, et_init=("h",)),
    Case("dtype_buffers", DtypeBuffers, {"record": (T([1, 3]),), "query": (rn(5),)},
         [("record", (T([1, 3]),), {}), ("query", (rn(5),), {}), ("record", (T([0, 3]),), {}), ("query", (rn(5),), {})],
         executorch=True, et_init=("hist", "mask", "halfs")),
    Case("quant_int8wo", make_quant, {"encode": (rn(2, 16),), "project": (rn(2, 16),)},
         [("encode", (rn(2, 16),), {}), ("project", (rn(2, 16),), {}), ("encode", (rn(2, 16),), {})]),
    Case("quant_int8dyn", make_quant_dyn, {"encode": (rn(2, 16),), "project": (rn(2, 16),)},
         [("encode", (rn(2, 16),), {}), ("project", (rn(2, 16),), {}), ("encode", (rn(2, 16),), {})]),
    Case("param_write", ParamWrite, {"learn": (rn(3, 4), rn(3, 4)), "predict": (rn(2, 4),)},
         [("predict", (rn(2, 4),), {}), ("learn", (rn(3, 4), rn(3, 4)), {}), ("predict", (rn(2, 4),), {}),
          ("learn", (rn(3, 4), rn(3, 4)), {}), ("predict", (rn(2, 4),), {})], executorch=True, et_init=("w",)),
    Case("misc_outputs", Misc, {"stats": ((rn(3, 4),), {"extra": rn(3, 4)}), "total": ()},
         [("stats", (rn(3, 4),), {"extra": rn(3, 4)}), ("total", (), {}), ("stats", (rn(3, 4),), {"extra": rn(3, 4)}),
          ("total", (), {})]),
    Case("misc_outputs_strict", Misc, {"stats": ((rn(3, 4),), {"extra": rn(3, 4)}), "total": ()},
         [("stats", (rn(3, 4),), {"extra": rn(3, 4)}), ("total", (), {})], strict=True),
    Case("pytree_strict", Pytree, {"put": ({"x": rn(2, 4), "pair": (rn(2, 4), rn(2, 4))},),
                                   "get": ([rn(1, 4), rn(3, 4)],)},
         [("put", ({"x": rn(2, 4), "pair": (rn(2, 4), rn(2, 4))},), {}), ("get", ([rn(1, 4), rn(3, 4)],), {})],
         strict=True),
    Case("kwargs_strict", Kwargs, {"step": ((rn(2, 4),), {"mask": rn(2, 4), "alpha": 0.5}),
                                   "score": ((rn(3, 4),), {"bias": rn(3)})},
         [("step", (rn(2, 4),), {"mask": rn(2, 4), "alpha": 0.5}), ("score", (rn(3, 4),), {"bias": rn(3)})],
         strict=True),
    Case("grow_refused", Grow, {"push": (rn(1, 4),), "peek": ()}, [("push", (rn(1, 4),), {}), ("peek", (), {})]),
    Case("bn_train_shared_submodule", BNTrain, {"fit": (rn(5, 4),), "infer": (rn(2, 4),), "window": ()},
         [("window", (), {}), ("fit", (rn(5, 4),), {}), ("infer", (rn(2, 4),), {}), ("window", (), {}),
          ("fit", (rn(5, 4),), {}), ("infer", (rn(2, 4),), {}), ("window", (), {})], executorch=True,
         et_init=("running", "num_batches")),
    Case("pt2e_xnnpack", make_pt2e, {"encode": (rn(2, 8),), "refine": (rn(2, 8),)},
         [("encode", (rn(2, 8),), {}), ("refine", (rn(2, 8),), {}), ("encode", (rn(2, 8),), {}),
          ("refine", (rn(2, 8),), {})]),
    Case("forward_with_hooks", make_hooked, {"encode": (rn(2, 4),), "forward": (rn(2, 4),)},
         [("forward", (rn(2, 4),), {}), ("encode", (rn(2, 4),), {}), ("forward", (rn(2, 4),), {})]),
    Case("hf_bart", make_hf_seq2seq, {"encode": (T([[3, 4, 5, 6]]),), "decode": (T([[2, 7]]), rn(1, 4, 16))},
         [("encode", (T([[3, 4, 5, 6]]),), {}), ("decode", (T([[2, 7, 9]]), rn(1, 4, 16)), {})],
         dynamic_shapes={"decode": ({1: graphcap.Dim("tgt", max=32)}, None)}),
]


# ---------------------------------------------------------------------- forms
def eager_run(case: Case) -> tuple[list, dict]:
    m = case.make()
    outs = _run_calls(lambda n, a, k: _method(m, n)(*copy.deepcopy(a), **copy.deepcopy(k)), case.calls)
    return outs, _buffers(m)


def module_run(mod) -> Callable:
    return lambda n, a, k: _method(mod, n)(*copy.deepcopy(a), **copy.deepcopy(k))


def _method(mod, name):
    """``forward`` is the module's call (its hooks run); the other methods are called by name."""
    return mod if name == "forward" else getattr(mod, name)


def seq_check(case: Case, want: list, want_bufs: dict, mod) -> str:
    try:
        got = _run_calls(module_run(mod), case.calls)
    except Exception as e:
        return _first_line(e)
    r = _compare_seq(case.name, want, got)
    if r != "=":
        return r
    bufs = _buffers(mod)
    for k, v in want_bufs.items():
        if k in bufs and not _close(v, bufs[k]):
            return f"buffer {k} differs"
    return "="


_DIMS: dict = {}


def _torch_dim(v):
    if not isinstance(v, graphcap.Dim):
        return v
    if v.__name__ not in _DIMS:
        _DIMS[v.__name__] = torch.export.Dim(v.__name__, min=max(v.min, 2), max=v.max)
    return _DIMS[v.__name__]


def te_per_method(case: Case) -> str:
    """torch.export of each method alone through a wrapper; its first call vs eager's."""
    import torch.export as te
    res = []
    for name, example in case.inputs.items():
        model = case.make()

        class Wrap(torch.nn.Module):
            def __init__(self, inner, meth):
                super().__init__()
                self.inner = inner
                self.meth = meth

            def forward(self, *args, **kwargs):
                return _method(self.inner, self.meth)(*args, **kwargs)
        args, kwargs = (example if (isinstance(example, tuple) and len(example) == 2 and isinstance(example[0], tuple)
                                    and isinstance(example[1], dict)) else (example, {}))
        ds = (case.dynamic_shapes or {}).get(name)
        if ds is not None:
            ds = tuple(None if s is None else {d: _torch_dim(v)
                                               for d, v in s.items()} for s in ds)
            ds = {"args": ds}
        try:
            ep = te.export(Wrap(model, name), copy.deepcopy(args), copy.deepcopy(kwargs), dynamic_shapes=ds,
                           strict=case.strict)
            first = next(((a, k) for n, a, k in case.calls if n == name), None)
            if first is not None:
                want = _method(case.make(), name)(*copy.deepcopy(first[0]), **copy.deepcopy(first[1]))
                got = ep.module()(*copy.deepcopy(first[0]), **copy.deepcopy(first[1]))
                res.append(f"{name}:{'=' if _close(want, got) else 'DIFF'}")
            else:
                res.append(f"{name}:ok")
        except Exception as e:
            res.append(f"{name}:{_first_line(e)[:100]}")
    return " ".join(res)


def unflatten_check(case: Case, progs) -> str:
    res = []
    for name in progs.methods:
        first = next(((a, k) for n, a, k in case.calls if n == name), None)
        if first is None:
            continue
        try:
            tree = graphcap.unflatten(progs, method=name)
            tree = copy.deepcopy(tree)  # one fresh call per method
            got = tree(*copy.deepcopy(first[0]), **copy.deepcopy(first[1]))
            # eager, fresh, just this call
            want = _method(case.make(), name)(*copy.deepcopy(first[0]), **copy.deepcopy(first[1]))
            if not _close(want, got):
                res.append(f"{name}:DIFF")
        except Exception as e:
            res.append(f"{name}:{_first_line(e)[:100]}")
    return " ".join(res) or "="


def save_load_check(case: Case, progs, want, want_bufs) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.pt2")
        try:
            graphcap.save(progs, path)
            loaded = graphcap.load(path)
        except Exception as e:
            return _first_line(e)
        # sharing: the same tensor object under every method's FQN
        for fqn in {*loaded.state_dict, *loaded.constants}:
            objs = {id(ep.state_dict.get(fqn, ep.constants.get(fqn))) for ep in loaded.values()
                    if fqn in ep.state_dict or fqn in ep.constants}
            if len(objs) > 1:
                return f"{fqn} not shared after load"
        return seq_check(case, want, want_bufs, loaded.module())


def executorch_check(case: Case, progs, want) -> str:
    try:
        from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
        from executorch.exir.passes import MemoryPlanningPass
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
        from executorch.runtime import Runtime
        edge = to_edge_transform_and_lower(dict(progs))
        cfg = ExecutorchBackendConfig(
            passes=[InitializedMutableBufferPass(list(case.et_init))] if case.et_init else [],
            memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True), emit_mutable_buffer_names=True)
        pte = edge.to_executorch(cfg).buffer
        program = Runtime.get().load_program(pte)
        methods = {n: program.load_method(n) for n in sorted(program.method_names)}
        import torch.utils._pytree as pytree
        for i, (n, a, k) in enumerate(case.calls):
            flat = pytree.tree_leaves((copy.deepcopy(a), copy.deepcopy(k)))
            got = methods[n].execute(flat)
            w = pytree.tree_leaves(want[i])
            if len(got) != len(w) or not all(_close(x, y) for x, y in zip(w, got)):
                return f"call {i} ({n}) differs"
        return "="
    except Exception as e:
        return _first_line(e)


def run_case(case: Case) -> dict:
    out: dict[str, str] = {}
    want, want_bufs = eager_run(case)
    model = case.make()
    try:
        progs = graphcap.export_methods(model, case.inputs, dynamic_shapes=case.dynamic_shapes, strict=case.strict)
    except Exception as e:
        out["export"] = _first_line(e)
        if os.environ.get("TB"):
            traceback.print_exc()
        out["torch.export per method"] = te_per_method(case)
        return out
    out["export"] = "ok"

    def fresh():  # module() writes the program's state (as ep.module() does): a new export per form
        return graphcap.export_methods(case.make(), case.inputs, dynamic_shapes=case.dynamic_shapes,
                                       strict=case.strict)
    out["module"] = seq_check(case, want, want_bufs, progs.module())
    progs = fresh()
    try:
        dec = progs.run_decompositions()
        out["run_decompositions"] = seq_check(case, want, want_bufs, dec.module())
    except Exception as e:
        out["run_decompositions"] = _first_line(e)
    out["save/load"] = save_load_check(case, fresh(), want, want_bufs)
    try:
        out["decomposed save/load"] = save_load_check(case, fresh().run_decompositions(), want, want_bufs)
    except Exception as e:
        out["decomposed save/load"] = _first_line(e)
    try:
        with tempfile.TemporaryDirectory() as d:
            graphcap.save(fresh(), os.path.join(d, "p.pt2"))
            loaded = graphcap.load(os.path.join(d, "p.pt2"))
            out["load then run_decompositions"] = seq_check(case, want, want_bufs, loaded.run_decompositions().module())
            if case.executorch:
                out["load then executorch"] = executorch_check(case, graphcap.load(os.path.join(d, "p.pt2")), want)
    except Exception as e:
        out["load then run_decompositions"] = _first_line(e)
    out["unflatten"] = unflatten_check(case, fresh())
    if case.executorch:
        out["executorch"] = executorch_check(case, fresh(), want)
    out["torch.export per method"] = te_per_method(case)
    return out


def main(argv: list[str]) -> None:
    picks = [a for a in argv if not a.startswith("-")]
    for case in CASES:
        if picks and not any(p in case.name for p in picks):
            continue
        try:
            res = run_case(case)
        except Exception as e:
            res = {"probe": _first_line(e)}
            if os.environ.get("TB"):
                traceback.print_exc()
        print(f"## {case.name}")
        for k, v in res.items():
            print(f"   {k}: {v}")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
