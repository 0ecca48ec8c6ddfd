"""Printed program audit: graphcap's printed program against torch.export's.

Each probe is a small module in the style of PyTorch's export tests. It is exported by graphcap
and by torch.export (strict=False; strict=True too for probes marked ``strict``), and each
program is decomposed with ``run_decompositions()``. For each stage the texts users and tools
read are compared: ``graph_module.code`` (node names, operators, order, argument formatting,
placeholders, outputs, sym_size and assert nodes), ``str(graph_signature)``, the range
constraints, and ``print_readable`` (the annotated forward, ``# File:`` comments left out).
Prints one line per probe and mode:

    name [mode] | same | code: 3 lines differ, signature ...

Run: PYTHONPATH=src python bench/probes/printed_audit.py [name-substring ...] [-v] [--strict]
(-v prints each difference as a unified diff.)
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
import re
import sys
import warnings
from collections import namedtuple
from typing import Any, Callable

import torch
import torch.export as te
import torch.nn.functional as F
from _compare import error_line
from torch.export import Dim

import graphcap


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], torch.nn.Module]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None = None
    dynamic_shapes: Any = None
    strict: bool = False  # also compared with strict=True


PROBES: list[Probe] = []


def probe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None,
          strict: bool = False) -> Callable[[Any], Any]:
    def add(cls: Any) -> Any:
        PROBES.append(Probe(name, cls, args, kwargs, dynamic_shapes, strict))
        return cls
    return add


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# --- arithmetic -------------------------------------------------------------------------------
@probe("add_mul", (r(3), r(3)), strict=True)
class AddMul(torch.nn.Module):
    def forward(self, x, y):
        return x + y * 2, x * y


@probe("scalar_ops", (r(3),), strict=True)
class ScalarOps(torch.nn.Module):
    def forward(self, x):
        return (x + 1) / 3 - x ** 2, torch.clamp(x, min=-0.5, max=0.5), x.sum(dim=0, keepdim=True)


@probe("int_float_inputs", (r(3), 4, 2.5))
class IntFloat(torch.nn.Module):
    def forward(self, x, n, s):
        return x * n + s


@probe("same_op_many", (r(4),), strict=True)
class SameOp(torch.nn.Module):
    def forward(self, x):
        a = x.sin()
        b = a.sin()
        c = b.sin()
        return a + b + c


@probe("input_named_like_op", (r(3), r(3)))
class InputNamedLikeOp(torch.nn.Module):
    def forward(self, add, mul_1):
        return add + mul_1, add * mul_1


@probe("builtin_input_names", (r(3), r(3)))
class BuiltinNames(torch.nn.Module):
    def forward(self, input, sum):
        return input + sum


@probe("return_input_and_none", (r(3),))
class ReturnInput(torch.nn.Module):
    def forward(self, x):
        return x, None, x + 1, 3


@probe("output_twice", (r(3),))
class OutputTwice(torch.nn.Module):
    def forward(self, x):
        y = x.cos()
        return y, y


@probe("matmul_linear_fn", (r(2, 3), r(4, 3), r(4)), strict=True)
class MatmulFn(torch.nn.Module):
    def forward(self, x, w, b):
        return F.linear(x, w, b) @ w, torch.mm(x, w.t())


@probe("comparison_where", (r(5),))
class Where(torch.nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, torch.zeros_like(x)), (x == 0).any()


@probe("dtype_cast", (r(3),))
class Cast(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.float16), x.int(), x.double().float()


@probe("tensor_factory", (r(3),))
class Factory(torch.nn.Module):
    def forward(self, x):
        return x + torch.ones(3), torch.arange(3) * x, torch.full((3,), 2.0), torch.empty_like(x).fill_(1)


# --- views, slicing, indexing ----------------------------------------------------------------
@probe("views_reshape", (r(2, 3, 4),), strict=True)
class Views(torch.nn.Module):
    def forward(self, x):
        return x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 1).contiguous(), x.flatten(1)


@probe("slicing", (r(4, 5),), strict=True)
class Slicing(torch.nn.Module):
    def forward(self, x):
        return x[1:3], x[:, ::2], x[..., -1], x[None, 0], x[-2:, 1:-1]


@probe("index_tensor", (r(5, 3), torch.tensor([0, 2, 4])))
class IndexTensor(torch.nn.Module):
    def forward(self, x, idx):
        return x[idx], x[idx, 1], x[:, torch.tensor([0, 2])]


@probe("setitem", (r(4, 4),), strict=True)
class SetItem(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y[0] = 1.0
        y[1:3, 2] = x[0, 0]
        return y


@probe("split_chunk_unbind", (r(6, 4),))
class Split(torch.nn.Module):
    def forward(self, x):
        a, b = x.split(3)
        c, d = x.chunk(2, dim=1)
        return a + b, c * d, x.unbind(0)[2]


@probe("cat_stack_expand", (r(2, 3), r(1, 3)))
class CatStack(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, y]), torch.stack([x, x], dim=1), y.expand(4, 3), x.unsqueeze(0).squeeze()


@probe("index_put_masked_fill", (r(4, 3),))
class MaskedFill(torch.nn.Module):
    def forward(self, x):
        return x.masked_fill(x > 0, 0.0), x.index_put((torch.tensor([0, 1]),), torch.ones(2, 3))


# --- state -----------------------------------------------------------------------------------
@probe("param_buffer", (r(3),), strict=True)
class ParamBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3))
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x):
        return x * self.weight + self.scale


@probe("buffer_mutated", (r(3),), strict=True)
class BufferMutated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))
        self.register_buffer("other", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        self.other.copy_(x)
        return x + self.count


@probe("buffer_reassigned", (r(3),))
class BufferReassigned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(3))

    def forward(self, x):
        self.state = self.state + x
        return self.state * 2


@probe("nonpersistent_buffer", (r(3),))
class NonPersistent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("tmp", torch.ones(3), persistent=False)

    def forward(self, x):
        self.tmp.mul_(2)
        return x + self.tmp


@probe("constant_tensor_attr", (r(3),), strict=True)
class ConstAttr(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.const = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x):
        return x + self.const


@probe("constant_lifted_in_forward", (r(3),))
class ConstInForward(torch.nn.Module):
    def forward(self, x):
        return x + torch.tensor([1.0, 2.0, 3.0]), x * torch.tensor(5.0)


@probe("nested_submodule_state", (r(2, 3),))
class NestedState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
        self.register_buffer("block_0_weight", torch.ones(1))

    def forward(self, x):
        return self.block(x) + self.block_0_weight


@probe("submodule_twice", (r(2, 3),), strict=True)
class SubTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(self.lin(x))


@probe("shared_param_two_names", (r(2, 3),))
class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3, bias=False)
        self.b = torch.nn.Linear(3, 3, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.a(x) + self.b(x)


@probe("param_named_like_input", (r(3),))
class ParamLikeInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.x = torch.nn.Parameter(torch.ones(3))

    def forward(self, p_x):
        return p_x + self.x


@probe("moduledict_modulelist", (r(2, 4),))
class Containers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 2), "reg": torch.nn.Linear(4, 1)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["cls"](x), self.heads["reg"](x)


# --- nn layers ---------------------------------------------------------------------------------
@probe("linear_relu", (r(2, 4),), strict=True)
class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


@probe("conv_bn_train", (r(1, 2, 6, 6),), strict=True)
class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


@probe("conv_bn_eval", (r(1, 2, 6, 6),))
class ConvBNEval(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4).eval()

    def forward(self, x):
        return self.bn(self.conv(x))


@probe("layernorm_gelu_dropout", (r(2, 5, 8),))
class LN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(8)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(F.gelu(self.ln(x)))


@probe("embedding", (torch.tensor([[0, 2, 5]]),), strict=True)
class Emb(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.emb(ids).sum(-1)


@probe("pool_softmax", (r(1, 3, 8, 8),))
class Pool(torch.nn.Module):
    def forward(self, x):
        return F.softmax(F.max_pool2d(x, 2), dim=-1), F.adaptive_avg_pool2d(x, 1)


@probe("multihead_attention", (r(2, 4, 8),))
class MHA(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


@probe("sdpa", (r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)))
class SDPA(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@probe("lstm_cell", (r(2, 3),))
class LSTMCell(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.GRUCell(3, 4)

    def forward(self, x):
        return self.cell(x)


# --- inputs ------------------------------------------------------------------------------------
@probe("kwargs_inputs", (r(3),), {"y": r(3), "scale": 2.0})
class Kwargs(torch.nn.Module):
    def forward(self, x, *, y, scale=1.0):
        return x * scale + y


@probe("dict_list_inputs", ({"a": r(3), "b": [r(3), r(3)]},))
class DictList(torch.nn.Module):
    def forward(self, inp):
        return inp["a"] + inp["b"][0] * inp["b"][1]


Point = namedtuple("Point", ["px", "py"])


@probe("namedtuple_input", (Point(r(2), r(2)),))
class NT(torch.nn.Module):
    def forward(self, pt):
        return pt.px - pt.py


@probe("varargs", (r(2), r(2), r(2)))
class VarArgs(torch.nn.Module):
    def forward(self, *xs):
        return sum(xs)


@probe("kwargs_dict_forward", (r(2),), {"extra": r(2), "more": r(2)})
class KwDict(torch.nn.Module):
    def forward(self, x, **kw):
        return x + kw["extra"] * kw["more"]


@probe("optional_none_input", (r(2), None))
class OptNone(torch.nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask


# --- in-place on inputs ------------------------------------------------------------------------
@probe("inplace_input", (r(3), r(3)), strict=True)
class InplaceInput(torch.nn.Module):
    def forward(self, x, y):
        x.add_(y)
        y.mul_(2)
        return x + y


@probe("inplace_view_of_input", (r(3, 3),))
class InplaceView(torch.nn.Module):
    def forward(self, x):
        x[0].zero_()
        x[:, 1].add_(1)
        return x.sum()


@probe("inplace_intermediate", (r(3),))
class InplaceIntermediate(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.relu_()
        y += 1
        return y


@probe("out_variant_copy", (r(3), r(3)))
class OutCopy(torch.nn.Module):
    def forward(self, x, out):
        out.copy_(x.sin())
        return out


# --- dynamic shapes ----------------------------------------------------------------------------
B = Dim("batch", min=2, max=64)
S = Dim("seq", max=128)


@probe("dim_batch", (r(4, 3),), dynamic_shapes={"x": {0: B}}, strict=True)
class DimBatch(torch.nn.Module):
    def forward(self, x):
        return x.sum(0) + x.shape[0]


@probe("dim_two_inputs_shared", (r(4, 3), r(4, 3)), dynamic_shapes={"x": {0: B}, "y": {0: B}})
class DimShared(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@probe("dim_view_sym_size", (r(4, 6),), dynamic_shapes={"x": {0: B, 1: S}}, strict=True)
class DimView(torch.nn.Module):
    def forward(self, x):
        b, s = x.shape
        return x.view(b * s), x.reshape(b, -1), x.new_zeros(b, 2)


@probe("derived_dim", (r(4), r(8)), dynamic_shapes=(lambda d: {"x": {0: d}, "y": {0: 2 * d}})(Dim("d", max=30)))
class Derived(torch.nn.Module):
    def forward(self, x, y):
        return x.repeat(2) + y


@probe("derived_dim_offset", (r(5), r(6)), dynamic_shapes=(lambda d: {"x": {0: d}, "y": {0: d + 1}})(Dim("n")))
class DerivedOff(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, x[:1]]) * y


@probe("dim_auto", (r(4, 3),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}})
class DimAuto(torch.nn.Module):
    def forward(self, x):
        return x.mean(0), x.shape[1] * 2


@probe("dim_guard_branch", (r(6),), dynamic_shapes={"x": {0: Dim("k", min=5, max=20)}})
class DimGuard(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x[:4] * 2
        return x


@probe("dim_slice_to_size", (r(6, 3), r(2, 3)), dynamic_shapes={"x": {0: Dim("n1")}, "y": {0: Dim("n2")}})
class DimSlice(torch.nn.Module):
    def forward(self, x, y):
        return x[: y.shape[0]] + y


@probe("dim_int_output", (r(5, 2),), dynamic_shapes={"x": {0: Dim("rows")}})
class DimIntOut(torch.nn.Module):
    def forward(self, x):
        return x.shape[0] + 1, x.size(0) // 2, x.numel()


@probe("dim_arange_expand", (r(5, 3),), dynamic_shapes={"x": {0: Dim("len")}})
class DimArange(torch.nn.Module):
    def forward(self, x):
        return torch.arange(x.shape[0]).unsqueeze(1) + x, torch.ones(x.shape[0], 1).expand(-1, 3)


# --- data-dependent ----------------------------------------------------------------------------
@probe("item_check", (torch.tensor(4), r(10)))
class ItemCheck(torch.nn.Module):
    def forward(self, n, x):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 10)
        return x[:k], torch.zeros(k)


@probe("nonzero", (torch.tensor([1.0, 0.0, 2.0]),))
class Nonzero(torch.nn.Module):
    def forward(self, x):
        return x.nonzero(), x[x > 0]


@probe("tolist_split", (torch.tensor([2, 3]), r(5)))
class TolistSplit(torch.nn.Module):
    def forward(self, sizes, x):
        a, b = sizes.tolist()
        torch._check_is_size(a)
        torch._check_is_size(b)
        torch._check(a + b == x.shape[0])
        return x.split([a, b])


@probe("check_is_size", (torch.tensor(3),))
class CheckIsSize(torch.nn.Module):
    def forward(self, n):
        k = n.item()
        torch._check_is_size(k)
        return torch.ones(k) * 2


# --- control flow ------------------------------------------------------------------------------
@probe("cond_simple", (r(3),), strict=True)
class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


@probe("cond_with_params", (r(2, 3),))
class CondParams(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("buf", torch.ones(3))

    def forward(self, x):
        def t(x):
            return self.lin(x) + self.buf

        def f(x):
            return x - self.buf

        return torch.cond(x.shape[0] > 1, t, f, (x,)) if False else torch.cond(x.sum() > 0, t, f, (x,))


@probe("cond_dynamic", (r(4, 3),), dynamic_shapes={"x": {0: Dim("b")}})
class CondDyn(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 2, lambda t: t + t.shape[0], lambda t: t * 2, (x,))


@probe("cond_nested", (r(3), r(3)))
class CondNested(torch.nn.Module):
    def forward(self, x, y):
        def inner_t(a, b):
            return a + b

        def inner_f(a, b):
            return a - b

        def t(a, b):
            return torch.cond(b.sum() > 0, inner_t, inner_f, (a, b))

        def f(a, b):
            return a * b

        return torch.cond(x.sum() > 0, t, f, (x, y))


@probe("map_fn", (r(3, 2), r(2)))
class MapFn(torch.nn.Module):
    def forward(self, xs, y):
        from torch._higher_order_ops.map import map as hop_map
        return hop_map(lambda x, y: x * y + 1, xs, y)


@probe("while_loop", (torch.tensor(0), r(3)))
class While(torch.nn.Module):
    def forward(self, i, x):
        return torch._higher_order_ops.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (i, x))


@probe("scan", (r(4, 2),))
class Scan(torch.nn.Module):
    def forward(self, xs):
        from torch._higher_order_ops.scan import scan

        def combine(carry, x):
            nxt = carry + x
            return nxt, nxt.clone()

        return scan(combine, torch.zeros(2), xs)


# --- regions -----------------------------------------------------------------------------------
@probe("no_grad_region", (r(3),))
class NoGrad(torch.nn.Module):
    def forward(self, x):
        a = x + 1
        with torch.no_grad():
            b = a * 2
        return a + b


@probe("enable_grad_in_no_grad", (r(3),))
class EnableGrad(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x.sin()
            with torch.enable_grad():
                z = y.cos()
        return z + y


@probe("autocast_region", (r(4, 4),))
class Autocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x
        return y.float() + 1


# --- assorted torch-suite patterns ------------------------------------------------------------
@probe("sym_size_and_assert", (r(4, 6),), dynamic_shapes={"x": {0: Dim("a"), 1: Dim("c")}})
class SymAssert(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[1] >= x.shape[0])
        return x.sum(1) * x.shape[1]


@probe("functional_layers", (r(2, 3, 8),))
class FunctionalLayers(torch.nn.Module):
    def forward(self, x):
        return F.layer_norm(x, (8,)), F.normalize(x, dim=-1), F.pad(x, (1, 1)), F.interpolate(x, scale_factor=2.0)


@probe("random_ops", (r(3),))
class Random(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x) * 0, torch.randn(3).shape


@probe("method_and_fn_same_op", (r(3),))
class MethodFn(torch.nn.Module):
    def forward(self, x):
        return torch.add(x, 1), x.add(2), x.add(x, alpha=2), torch.sub(x, 1, alpha=3)


@probe("list_output_dict_output", (r(3),))
class DictOut(torch.nn.Module):
    def forward(self, x):
        return {"s": x.sin(), "c": [x.cos(), x.tan()]}


@probe("complex_arg_formatting", (r(2, 3),))
class ArgFormat(torch.nn.Module):
    def forward(self, x):
        return (x.sum(dim=[0, 1]), x.to(dtype=torch.float64, memory_format=torch.contiguous_format),
                torch.full((2,), float("inf")), x.new_tensor([1.5, -2.0]), x.masked_fill(x > 0, float("-inf")))


@probe("type_as_and_device", (r(3), torch.ones(3, dtype=torch.int64)))
class TypeAs(torch.nn.Module):
    def forward(self, x, y):
        return y.type_as(x) + x, x.to("cpu"), torch.zeros(2, device=x.device)


@probe("buffer_and_input_same_name", (r(3),))
class BufInputName(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b_x", torch.ones(3))
        self.register_buffer("x", torch.ones(3))

    def forward(self, b_x):
        return b_x + self.b_x + self.x


@probe("deep_fqn_names", (r(2, 2),))
class DeepFQN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Module()
        self.encoder.layer = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
        self.encoder.layer[0].register_buffer("running_thing", torch.zeros(2))

    def forward(self, x):
        lay = self.encoder.layer[0]
        lay.running_thing.add_(x.mean(0))
        return lay(x) + lay.running_thing


# --- comparison --------------------------------------------------------------------------------
_FILE_COMMENT = re.compile(r"^\s*# (File|No stacktrace).*$", re.M)


def _texts(ep: Any) -> dict[str, str]:
    readable = ep.graph_module.print_readable(print_output=False, include_stride=False, include_device=False,
                                              colored=False)
    return {
        "code": ep.graph_module.code.strip(),
        "signature": str(ep.graph_signature),
        "ranges": str({str(k): (str(v.lower), str(v.upper)) for k, v in ep.range_constraints.items()}),
        "readable": _FILE_COMMENT.sub("", readable).replace("\n\n", "\n"),
    }


def _export(side: str, p: Probe, strict: bool) -> Any:
    export = graphcap.export if side == "gc" else te.export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = p.make()
        return export(model, copy.deepcopy(p.args), copy.deepcopy(p.kwargs), dynamic_shapes=p.dynamic_shapes,
                      strict=strict)


def compare(p: Probe, strict: bool, verbose: bool) -> tuple[str, dict[str, int]]:
    progs: dict[str, Any] = {}
    for side in ("gc", "te"):
        try:
            progs[side] = _export(side, p, strict)
        except Exception as e:
            progs[side] = e
    if any(isinstance(v, Exception) for v in progs.values()):
        return " / ".join(f"{s} fails: {error_line(v, 90)}" for s, v in progs.items() if isinstance(v, Exception)), {}
    notes: list[str] = []
    counts: dict[str, int] = {}
    for stage in ("ep", "decomp"):
        texts = {}
        for side, ep in progs.items():
            try:
                texts[side] = _texts(ep if stage == "ep" else ep.run_decompositions())
            except Exception as e:
                notes.append(f"{stage} {side} fails: {error_line(e, 90)}")
        if len(texts) < 2:
            continue
        for key in texts["gc"]:
            a, b = texts["te"][key].splitlines(), texts["gc"][key].splitlines()
            if a == b:
                continue
            diff = [d for d in difflib.unified_diff(a, b, "torch", "graphcap", lineterm="", n=0)
                    if not d.startswith(("---", "+++", "@@"))]
            counts[f"{stage}.{key}"] = counts.get(f"{stage}.{key}", 0) + 1
            notes.append(f"{stage}.{key}: {sum(d.startswith('+') for d in diff)} lines differ")
            if verbose:
                print(f"  --- {p.name} {stage}.{key} (- torch, + graphcap)")
                for d in diff:
                    print("   ", d)
    return ("same" if not notes else "; ".join(notes)), counts


def main() -> None:
    logging.getLogger("torch").setLevel(logging.CRITICAL)  # dynamo logs a refused guard with its traceback
    verbose = "-v" in sys.argv
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    total: dict[str, int] = {}
    n = same = 0
    for p in PROBES:
        if only and not any(o in p.name for o in only):
            continue
        for strict in ([False, True] if p.strict or "--strict" in sys.argv else [False]):
            verdict, counts = compare(p, strict, verbose)
            n += 1
            same += verdict == "same"
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
            print(f"{p.name} [{'strict' if strict else 'non-strict'}] | {verdict}", flush=True)
    print(f"\n{n} exports, {same} print the same; differing texts: "
          + (", ".join(f"{k} {v}" for k, v in sorted(total.items())) or "none"))


if __name__ == "__main__":
    main()
