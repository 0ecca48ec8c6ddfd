"""graphcap.load(f, map_location=...): a program saved on a GPU loads on a machine without one.

The files here are saved on CPU and then rewritten to name ``cuda:0`` wherever the program
names its device (state, constants, example inputs, fake values, device arguments), which is
what a save on a GPU writes; ``tests/golden/saved_on_cuda.pt2`` is such a file written on a
real GPU (``tests/golden/make_cuda_golden.py``).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import graphcap
from conftest import program_devices
from graphcap.errors import SerializationError
from graphcap.serialize.archive import read_entries, write_archive
from graphcap.serialize.schema import PROGRAM_ENTRY

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "saved_on_cuda.pt2"


class PlacesTensors(torch.nn.Module):
    """State of every kind, and a tensor made in forward on the input's device."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("table", torch.arange(3.0), persistent=False)

    def forward(self, x):
        ramp = torch.arange(x.shape[0], device=x.device, dtype=x.dtype).unsqueeze(1)
        return self.lin(x) * self.scale + self.table + ramp


def _as_saved_on(ep, device: str, weights: bool = True) -> bytes:
    """``ep``'s file as a save on ``device`` writes it (program.json names that device)."""
    buf = io.BytesIO()
    graphcap.save(ep, buf, weights=weights)
    entries = read_entries(io.BytesIO(buf.getvalue()))
    text = entries[PROGRAM_ENTRY].decode()
    assert '"cpu"' in text
    entries[PROGRAM_ENTRY] = text.replace('"cpu"', json.dumps(device)).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    return out.getvalue()


@pytest.fixture
def gpu_file():
    model = PlacesTensors().eval()
    x = torch.randn(5, 4)
    dims = ({0: torch.export.Dim("rows", min=2, max=16)},)
    ep = graphcap.export(model, (x,), dynamic_shapes=dims)
    return model, _as_saved_on(ep, "cuda:0")


@pytest.mark.parametrize("location", ["cpu", torch.device("cpu"), {"cuda:0": "cpu"}, {"cuda": "cpu"}])
def test_program_saved_on_gpu_loads_on_cpu(gpu_file, location):
    model, data = gpu_file
    ep = graphcap.load(io.BytesIO(data), map_location=location)
    assert program_devices(ep) == {"cpu"}
    assert isinstance(ep.state_dict["lin.weight"], torch.nn.Parameter)
    assert all(t.device.type == "cpu" for t in ep.example_inputs[0])
    for rows in (3, 9):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(ep.module()(x), model(x))
    again = graphcap.load(io.BytesIO(data), map_location=location)  # the same file, read again the same way
    torch.testing.assert_close(again.module()(x), ep.module()(x))


@pytest.mark.skipif(torch.cuda.is_available(), reason="cuda:0, where the file was saved, exists on this machine")
def test_without_map_location_the_missing_device_is_named_with_the_fix(gpu_file):
    _, data = gpu_file
    with pytest.raises(SerializationError) as info:
        graphcap.load(io.BytesIO(data))
    assert "cuda:0" in info.value.what
    assert "map_location='cpu'" in info.value.fix


def test_a_mapping_leaves_devices_it_does_not_name(gpu_file):
    """Mapping another device than the one saved on loads as saved: on a CPU-only machine that is
    still the clear refusal, and with a GPU the program stays on it."""
    _, data = gpu_file
    if torch.cuda.is_available():
        ep = graphcap.load(io.BytesIO(data), map_location={"cuda:1": "cpu"})
        assert program_devices(ep) == {"cuda"}
    else:
        with pytest.raises(SerializationError, match="cuda:0"):
            graphcap.load(io.BytesIO(data), map_location={"cuda:1": "cpu"})


def test_structure_only_keeps_its_stand_ins_on_meta(gpu_file):
    _, data = gpu_file
    ep = graphcap.load(io.BytesIO(data), weights=False, map_location="cpu")
    assert all(t.device.type == "meta" for t in ep.state_dict.values())
    assert type(ep).__name__ == "StructureOnlyProgram"
    vals = [n.meta["val"] for n in ep.graph.nodes if n.op == "call_function"]
    assert {v.device.type for v in vals if isinstance(v, torch.Tensor)} == {"cpu"}


def test_weights_attached_from_a_checkpoint_are_placed_too():
    model = PlacesTensors().eval()
    ep = graphcap.export(model, (torch.randn(5, 4),))
    data = _as_saved_on(ep, "cuda:0", weights=False)
    checkpoint = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loaded = graphcap.load(io.BytesIO(data), weights=checkpoint, map_location="cpu")
    assert program_devices(loaded) == {"cpu"}
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded.module()(x), model(x))


def test_multi_method_program_moves_every_method_over_one_state(tmp_path):
    class TwoWays(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

        def twice(self, x):
            return self.lin(self.lin(x))

    model = TwoWays()
    progs = graphcap.export_methods(model, {"forward": (torch.randn(2, 4),), "twice": (torch.randn(2, 4),)})
    buf = io.BytesIO()
    graphcap.save(progs, buf)
    entries = read_entries(io.BytesIO(buf.getvalue()))
    rewritten = {name: (data.decode().replace('"cpu"', '"cuda:0"').encode() if name.endswith(".json") else data)
                 for name, data in entries.items()}
    out = io.BytesIO()
    write_archive(out, rewritten)
    loaded = graphcap.load(io.BytesIO(out.getvalue()), map_location="cpu")
    assert loaded["forward"].state_dict["lin.weight"] is loaded["twice"].state_dict["lin.weight"]
    assert all(program_devices(ep) == {"cpu"} for ep in loaded.values())
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded["twice"].module()(x), model.twice(x))


@pytest.mark.parametrize("bad", ["nowhere", 3, {"cuda:0": "nowhere"}])
def test_a_location_that_is_not_a_device_is_refused(gpu_file, bad):
    _, data = gpu_file
    with pytest.raises(SerializationError, match="map_location"):
        graphcap.load(io.BytesIO(data), map_location=bad)


def test_a_file_saved_on_a_real_gpu_loads_on_cpu():
    """The golden file: a small model exported and saved on CUDA (tests/golden/make_cuda_golden.py),
    with inputs at two sizes and the outputs eager gave on the GPU beside it."""
    from safetensors.torch import load_file
    io_tensors = load_file(str(GOLDEN.with_name("saved_on_cuda_io.safetensors")))
    ep = graphcap.load(GOLDEN, map_location="cpu")
    assert program_devices(ep) == {"cpu"}
    for size in ("first", "second"):
        torch.testing.assert_close(ep.module()(io_tensors[size]), io_tensors[f"out_{size}"], rtol=1e-4, atol=1e-4)
    if not torch.cuda.is_available():
        with pytest.raises(SerializationError, match="map_location='cpu'"):
            graphcap.load(GOLDEN)
