"""graphcap's list of torch's engine files is torch's own, built without importing what it names."""
from __future__ import annotations

import os
import subprocess
import sys

from torch.fx.experimental.symbolic_shapes import uninteresting_files

from conftest import TORCH_LINE
from graphcap.torch_private.engine_files import engine_files


def test_engine_files_equal_torchs_list():
    ours, torchs = set(engine_files()), set(uninteresting_files())
    assert torchs <= ours, sorted(torchs - ours)
    extra = ours - torchs
    if TORCH_LINE >= (2, 11):
        assert not extra, sorted(extra)
    else:  # torch 2.10's list lacks the higher-order operators' files; graphcap skips them on every line
        assert extra and all(os.path.join("torch", "_higher_order_ops", "") in f for f in extra), sorted(extra)


def test_a_plain_export_does_not_import_torchs_exporter():
    """The first exports in a process (static, dynamic) leave torch.export's tracer and AOTAutograd unimported."""
    code = (
        "import sys, torch, graphcap\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
        "graphcap.export(m, (torch.randn(2, 4),))\n"
        "graphcap.export(m, (torch.randn(2, 4),), dynamic_shapes=({0: graphcap.Dim('b')},))\n"
        "print(sorted(n for n in ('torch.export._trace', 'torch._functorch.aot_autograd', 'networkx')"
        " if n in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
