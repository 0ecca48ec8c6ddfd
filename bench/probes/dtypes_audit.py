"""dtypes through export, module(), run_decompositions and save/load, graphcap beside torch.export.

bf16 / fp16 / f64 weights, autocast in forward, complex inputs and FFTs, integer and bool
arithmetic, a dtype among the outputs; each at batch 3 (the example), 1 and 7 over
Dim("b", min=1, max=16), then decomposed (batch 5), then (graphcap) saved and loaded.
Run: PYTHONPATH=src .venv/bin/python bench/probes/dtypes_audit.py
"""
import io

import torch
from torch.export import Dim

import graphcap


class Lin(torch.nn.Module):
    def __init__(self, dt):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4).to(dt)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x))


class Autocast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return y.float() + 1


class Spectra(torch.nn.Module):
    def forward(self, x):
        whole = torch.view_as_real(torch.fft.fft(x.to(torch.complex64))).sum(-1)
        return torch.fft.rfft(x).abs().sum(-1, keepdim=True) + whole


class ComplexIn(torch.nn.Module):
    def forward(self, z):
        return (z * z.conj()).real + torch.angle(z), z * 2j


class Ints(torch.nn.Module):
    def forward(self, x, m):
        return (x // 3 + (x % 5)) * m.to(x.dtype), (x > 2) & m, x.to(torch.int8) >> 1


class HalfSoftmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1).to(torch.float32) @ torch.ones(8, 2)


class Promote(torch.nn.Module):
    def forward(self, x, s: float):
        return x * s + torch.tensor(2, dtype=torch.int64), (x.half() + 1.5).dtype


CASES = {
    "bf16 linear": (Lin(torch.bfloat16), lambda b: (torch.randn(b, 8, dtype=torch.bfloat16),)),
    "fp16 linear": (Lin(torch.float16), lambda b: (torch.randn(b, 8, dtype=torch.float16),)),
    "f64 linear": (Lin(torch.float64), lambda b: (torch.randn(b, 8, dtype=torch.float64),)),
    "autocast": (Autocast(), lambda b: (torch.randn(b, 8),)),
    "complex fft": (Spectra(), lambda b: (torch.randn(b, 8),)),
    "complex in": (ComplexIn(), lambda b: (torch.randn(b, 8, dtype=torch.complex64),)),
    "ints": (Ints(), lambda b: (torch.randint(0, 9, (b, 8)), torch.rand(b, 8) > 0.5)),
    "half softmax": (HalfSoftmax(), lambda b: (torch.randn(b, 8, dtype=torch.float16),)),
    "dtype output": (Promote(), lambda b: (torch.randn(b, 8), 0.5)),
}


def same(got, want):
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            if g.dtype != w.dtype or not torch.allclose(torch.view_as_real(g) if g.is_complex() else g.double(),
                                                        torch.view_as_real(w) if w.is_complex() else w.double(),
                                                        atol=1e-2, equal_nan=True):
                return False
        elif g != w:
            return False
    return True


def run(lib, model, make):
    row = []
    args = make(3)
    spec = tuple({0: Dim("b", min=1, max=16)} if isinstance(a, torch.Tensor) else None for a in args)
    ep = lib.export(model, args, dynamic_shapes=spec)
    for batch in (3, 1, 7):
        a = make(batch)
        row.append("=" if same(ep.module()(*a), model(*a)) else "WRONG")
    decomposed = ep.run_decompositions()
    a = make(5)
    row.append("d=" if same(decomposed.module()(*a), model(*a)) else "d WRONG")
    if lib is graphcap:
        f = io.BytesIO()
        graphcap.save(decomposed, f)
        f.seek(0)
        loaded = graphcap.load(f)
        row.append("s=" if same(loaded.module()(*a), model(*a)) else "s WRONG")
    return row


def main():
    torch.manual_seed(0)
    for name, (model, make) in CASES.items():
        model.eval()
        for lib in (torch.export, graphcap):
            try:
                row = run(lib, model, make)
            except Exception as e:
                row = [f"{type(e).__name__}: {str(e).splitlines()[0][:110]}"]
            print(f"{name:14s} {lib.__name__:13s} {' '.join(row)}")


if __name__ == "__main__":
    main()
