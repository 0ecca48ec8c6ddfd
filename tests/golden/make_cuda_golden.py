"""Write ``saved_on_cuda.pt2``: a program exported and saved on a CUDA GPU.

Run on a machine with a GPU (``python tests/golden/make_cuda_golden.py [folder]``; the
device check in docs/torch-versions.md#gpu runs it) and commit the two files it writes:

    saved_on_cuda.pt2              the program, every tensor and device in it on cuda:0
    saved_on_cuda_io.safetensors   inputs at two sizes and the outputs eager gave on the GPU

``tests/unit/test_load_map_location.py`` loads it on any machine with
``map_location="cpu"`` and compares with those outputs: the proof that a file
written on a GPU opens where there is none.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import graphcap

HERE = Path(__file__).resolve().parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE


class OnDevice(torch.nn.Module):
    """Parameters, a persistent and a non-persistent buffer, and a tensor made in forward
    on the input's device (a device argument in the graph)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, padding=1)
        self.lin = torch.nn.Linear(6, 3)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 3))
        self.register_buffer("shift", torch.arange(3.0), persistent=False)

    def forward(self, x):
        h = torch.relu(self.conv(x)).mean(-1)
        ramp = torch.arange(x.shape[0], device=x.device, dtype=x.dtype).unsqueeze(1)
        return self.lin(h) * self.scale + self.shift + ramp


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("make_cuda_golden.py needs a CUDA GPU")
    torch.manual_seed(0)
    model = OnDevice().eval().cuda()
    first, second = torch.randn(2, 4, 8, device="cuda"), torch.randn(5, 4, 8, device="cuda")
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = graphcap.export(model, (first,), dynamic_shapes=({0: batch},))
    with torch.no_grad():
        outputs = {"out_first": model(first), "out_second": model(second)}
    OUT.mkdir(parents=True, exist_ok=True)
    graphcap.save(ep, OUT / "saved_on_cuda.pt2")
    tensors = {"first": first, "second": second, **outputs}
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
              str(OUT / "saved_on_cuda_io.safetensors"),
              metadata={"torch": torch.__version__, "device": torch.cuda.get_device_name()})
    print(f"wrote {OUT / 'saved_on_cuda.pt2'} on {torch.cuda.get_device_name()}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
