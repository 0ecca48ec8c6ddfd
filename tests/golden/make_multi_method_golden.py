"""Write the golden multi-method file of the current layout version (``serialize/multi_method.py``).

Run once per layout version (``python tests/golden/make_multi_method_golden.py``) and
commit the two files it writes; never regenerate an old layout's files: they are the
proof that files written by that release keep loading.

    multi_method_layout<N>.pt2             prefill and decode over one state
    multi_method_layout<N>_io.safetensors  the calls' inputs and eager's outputs

The model covers what the layout must carry: two methods lifting one state by FQN,
a buffer one method writes and the other reads (a cache), tied weights, a
non-persistent buffer, and a dynamic sequence length in one method's spec.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import graphcap
from graphcap.serialize.multi_method import LAYOUT_VERSION

HERE = Path(__file__).resolve().parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE


class TinyDecoder(torch.nn.Module):
    """prefill fills ``cache`` for the prompt; decode reads it and appends one step."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("cache", torch.zeros(1, 12, 8))
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)

    def prefill(self, ids):
        h = self.emb(ids)
        self.cache[:, : ids.shape[1]].copy_(h)
        return self.head(h * self.scale)

    def decode(self, tok, pos):
        h = self.emb(tok)
        context = self.cache.sum(1, keepdim=True) + h
        self.cache.index_copy_(1, pos, h)
        return self.head(context * self.scale)


def calls():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 16, (1, 5), generator=g)
    toks = [torch.randint(0, 16, (1, 1), generator=g) for _ in range(2)]
    return ids, toks


def main() -> None:
    torch.manual_seed(0)
    model = TinyDecoder()
    ids, toks = calls()
    seq = graphcap.Dim("seq", min=2, max=12)
    progs = graphcap.export_methods(model, {"prefill": (ids,), "decode": (toks[0], torch.tensor([5]))},
                                    dynamic_shapes={"prefill": {"ids": {1: seq}}})
    eager = TinyDecoder()
    eager.load_state_dict(model.state_dict())
    io = {"ids": ids}
    with torch.no_grad():
        io["out_prefill"] = eager.prefill(ids)
        for i, tok in enumerate(toks):
            io[f"tok{i}"] = tok
            io[f"out_decode{i}"] = eager.decode(tok, torch.tensor([5 + i]))
    graphcap.save(progs, OUT / f"multi_method_layout{LAYOUT_VERSION}.pt2")
    save_file({k: v.contiguous() for k, v in io.items()}, str(OUT / f"multi_method_layout{LAYOUT_VERSION}_io.safetensors"))


if __name__ == "__main__":
    main()
