"""Write the golden .pt2 file of the current format version.

Run once per released format version (``python tests/golden/make_golden.py``)
and commit the two files it writes; never regenerate an old version's files:
they are the proof that files written by that release keep loading.

    format_v<N>.pt2              the program
    format_v<N>_io.safetensors   inputs and the eager outputs to compare with

The model covers what the format must carry: convolution + batch norm
(buffers), tied weights, a buffer viewing another, a non-contiguous buffer, a
non-persistent buffer, a lifted constant, keyword and list inputs, a nested
dict/tuple output, a dynamic batch dimension and a torch.cond subgraph; from
format 4 on, a tensor-subclass buffer (torch's ``TwoTensor``) and the user's
annotations (``torch.fx.traceback.annotate``, the graph module's ``meta["custom"]``);
from format 5 on, operator-set versions (``aten`` and a user namespace, ``golden``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch.testing._internal.two_tensor import TwoTensor

import graphcap

HERE = Path(__file__).resolve().parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE


class Golden(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.proj = torch.nn.Linear(4, 4)
        self.back = torch.nn.Linear(4, 4, bias=False)
        self.back.weight = self.proj.weight
        self.register_buffer("table", torch.linspace(-1, 1, 16))
        self.register_buffer("window", self.table[4:8])
        self.register_buffer("mix", torch.randn(4, 4).t())
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64), persistent=False)
        self.offset = torch.tensor([0.25, -0.5, 1.0, 2.0])
        self.register_buffer("pair", TwoTensor(torch.randn(4), torch.randn(4)))

    def forward(self, images, extras, *, gain):
        h = self.bn(self.conv(images)).relu().mean((2, 3))
        h = self.proj(h) + self.window + self.offset + self.pair.b
        with torch.fx.traceback.annotate({"part": "head"}):
            h = torch.cond(h.sum() > 0, lambda t: self.back(t) @ self.mix, lambda t: t * 2 - 1, (h,))
        return {"out": h * gain, "aux": ((extras[0] + extras[1]) * h.shape[0], h.std())}


def example(batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(batch, 3, 8, 8, generator=g), [torch.randn(batch, 4, generator=g),
                                                        torch.randn(4, generator=g)]),
            {"gain": torch.randn(4, generator=g)})


def main() -> None:
    torch.manual_seed(0)
    model = Golden().eval()
    batch = graphcap.Dim("batch", min=2, max=32)
    args, kwargs = example(3, 1)
    with torch.fx.traceback.preserve_node_meta():
        ep = graphcap.export(model, args, kwargs,
                             dynamic_shapes={"images": {0: batch}, "extras": [{0: batch}, None], "gain": None})
    ep.graph_module.meta["custom"] = {"golden": True}
    version = graphcap.FORMAT_VERSION
    graphcap.save(ep, OUT / f"format_v{version}.pt2", opset_version={"golden": 1})
    tensors = {}
    for i, (a, k) in enumerate((example(3, 1), example(5, 2))):
        with torch.no_grad():
            out = model(*a, **k)
        tensors.update({f"case{i}.images": a[0], f"case{i}.extras0": a[1][0], f"case{i}.extras1": a[1][1],
                        f"case{i}.gain": k["gain"], f"case{i}.out": out["out"],
                        f"case{i}.aux0": out["aux"][0], f"case{i}.aux1": out["aux"][1]})
    save_file(tensors, OUT / f"format_v{version}_io.safetensors")
    print(f"wrote format_v{version}.pt2 and format_v{version}_io.safetensors", file=sys.stderr)


if __name__ == "__main__":
    main()
