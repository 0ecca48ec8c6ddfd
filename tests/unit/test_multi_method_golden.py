"""The multi-method file written by layout 1 (tests/golden/multi_method_layout1.pt2) keeps loading:
its methods run over one state as when it was written (a cache prefill fills and decode reads),
tied weights stay one tensor, and the dynamic sequence length of prefill stays dynamic."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import graphcap

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("mmap", [False, True])
def test_layout_1_file_loads_and_generates_as_when_written(mmap):
    progs = graphcap.load(GOLDEN / "multi_method_layout1.pt2", mmap=mmap)
    io = load_file(str(GOLDEN / "multi_method_layout1_io.safetensors"))
    assert progs.methods == ["prefill", "decode"]
    prefill, decode = progs["prefill"], progs["decode"]
    assert prefill.state_dict["emb.weight"] is decode.state_dict["emb.weight"]  # one tensor for both
    assert prefill.state_dict["cache"] is decode.state_dict["cache"]
    m = progs.module()
    with torch.no_grad():
        torch.testing.assert_close(m.prefill(io["ids"]), io["out_prefill"])
        for i in range(2):
            torch.testing.assert_close(m.decode(io[f"tok{i}"], torch.tensor([5 + i])), io[f"out_decode{i}"])


def test_layout_1_file_keeps_prefills_dynamic_length():
    progs = graphcap.load(GOLDEN / "multi_method_layout1.pt2")
    m = progs.module()
    with torch.no_grad():
        assert m.prefill(torch.zeros(1, 9, dtype=torch.long)).shape == (1, 9, 16)
    with pytest.raises(graphcap.GraphcapError):
        m.prefill(torch.zeros(1, 13, dtype=torch.long))  # beyond seq's max of 12: refused before computing
