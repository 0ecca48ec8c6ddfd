"""Where does AOTInductor's loader fail on a GPU image? Each step in a process of its own.

The first GPU run (docs/torch-versions.md#gpu) saw ``aoti_load_package`` segfault for
torch.export's own resnet18 program, so the failure is the image's or torch's, not the
program's. This narrows it down without graphcap in the way: a one-layer program exported by
torch.export, compiled and packaged, then loaded on the CPU and on the GPU, in the compiling
process and in a fresh one, and the compiler toolchain it used. Each step's exit code and
output (with Python's faulthandler trace on a crash) go to ``<out>/aoti_probe.log``.

    python bench/probes/aoti_gpu_probe.py OUT_DIR
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile

COMPILE = textwrap.dedent("""
    import sys, torch
    device, path = sys.argv[1], sys.argv[2]
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).to(device).eval()
    x = torch.randn(3, 8, device=device)
    ep = torch.export.export(model, (x,))
    torch._inductor.aoti_compile_and_package(ep, package_path=path)
    torch.save((model.state_dict(), x.cpu()), path + ".ref")
    print("packaged", path)
    if len(sys.argv) > 3:
        runner = torch._inductor.aoti_load_package(path)
        print("loaded in the compiling process; max diff",
              (runner(x) - model(x)).abs().max().item())
""")

LOAD = textwrap.dedent("""
    import sys, torch
    device, path = sys.argv[1], sys.argv[2]
    state, x = torch.load(path + ".ref")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).to(device).eval()
    model.load_state_dict(state)
    x = x.to(device)
    runner = torch._inductor.aoti_load_package(path)
    print("loaded in a fresh process; max diff", (runner(x) - model(x)).abs().max().item())
""")

FACTS = textwrap.dedent("""
    import torch, sys
    from torch._inductor import config
    print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
    print("cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)
    print("cpp compiler", config.cpp.cxx)
    from torch.utils import cpp_extension
    print("CUDA_HOME", cpp_extension.CUDA_HOME)
""")


def _step(log, title, argv, timeout=150):
    log.write(f"\n=== {title}: {' '.join(argv[2:])}\n")
    log.flush()
    env = dict(os.environ, TORCH_SHOW_CPP_STACKTRACES="1", PYTHONFAULTHANDLER="1")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        log.write(done.stdout[-6000:] + done.stderr[-6000:])
        log.write(f"--- exit {done.returncode}\n")
        return done.returncode
    except subprocess.TimeoutExpired:
        log.write(f"--- timed out after {timeout} s\n")
        return None
    finally:
        log.flush()


def _describe_package(log, path: str, unpacked: str) -> None:
    """The package's files and what its compiled library links against."""
    with zipfile.ZipFile(path) as archive:
        log.write("\n".join(archive.namelist()) + "\n")
        archive.extractall(unpacked)
    for root, _, files in os.walk(unpacked):
        for name in files:
            if name.endswith(".so"):
                linked = subprocess.run(["ldd", os.path.join(root, name)], capture_output=True, text=True)
                log.write(linked.stdout + linked.stderr)
    log.flush()


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp()
    py = sys.executable
    with open(os.path.join(out, "aoti_probe.log"), "w") as log:
        _step(log, "facts", [py, "-c", FACTS])
        log.write(f"CXX={os.environ.get('CXX')} CC={os.environ.get('CC')}\n")
        for tool in ("g++", "gcc", "c++", "nvcc", "gdb", os.environ.get("CXX") or "g++"):
            log.write(f"{tool}: {shutil.which(tool)}\n")
            if tool.endswith("g++") and shutil.which(tool):
                _step(log, f"{tool} version", [tool, "--version"])
        import torch
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for device in devices:
            path = os.path.join(work, f"{device}.pt2")
            _step(log, f"compile and load, {device}", [py, "-c", COMPILE, device, path, "load"])
            if os.path.exists(path):
                _step(log, f"load in a fresh process, {device}", [py, "-c", LOAD, device, path])
                if shutil.which("gdb"):
                    _step(log, f"gdb backtrace of the fresh load, {device}",
                          ["gdb", "-batch", "-ex", "run", "-ex", "bt 25", "--args", py, "-c", LOAD, device, path])
                _describe_package(log, path, os.path.join(work, f"unpacked-{device}"))
    print(open(os.path.join(out, "aoti_probe.log")).read()[-8000:])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpu-check-out")
