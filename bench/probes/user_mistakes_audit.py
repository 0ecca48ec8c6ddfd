"""User mistakes audit: the errors of mistakes ML engineers make, graphcap beside torch.export.

Each probe is a function of the library (``graphcap`` or ``torch.export``) and ``strict`` that
makes one common mistake and returns what the user sees: ``OK <value>`` when nothing is raised,
or the exception's class (and torch base classes) with its message. graphcap's messages are
printed in full (to read what / where / fix); torch's first lines only.

    name [strict] | gc: <what graphcap gives> | te: <what torch.export gives>

Run: PYTHONPATH=src python bench/probes/user_mistakes_audit.py [name-substring ...] [--strict]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from typing import Any, Callable

import torch
import torch.export as te

import graphcap


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


class Two(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        return x * scale


class Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def x34() -> torch.Tensor:
    return torch.randn(3, 4)


def _exp(lib: Any, strict: bool, model: Any, args: Any, **kw: Any) -> Any:
    return lib.export(model, args, strict=strict, **kw)


def _save(lib: Any) -> Callable[..., Any]:
    return graphcap.save if lib is graphcap else te.save


def _load(lib: Any) -> Callable[..., Any]:
    return graphcap.load if lib is graphcap else te.load


# ---- export arguments ------------------------------------------------------------------------

def args_bare_tensor(lib, strict):
    return _exp(lib, strict, Lin(), x34())


def args_list(lib, strict):
    return _exp(lib, strict, Lin(), [x34()])


def kwargs_positional(lib, strict):
    return _exp(lib, strict, Two(), (x34(), torch.tensor(2.0)))


def kwargs_not_dict(lib, strict):
    return _exp(lib, strict, Two(), (x34(),), kwargs=[("scale", torch.tensor(2.0))])


def too_few_args(lib, strict):
    return _exp(lib, strict, Add(), (x34(),))


def model_not_module(lib, strict):
    return _exp(lib, strict, "resnet18", (x34(),))


def model_plain_function(lib, strict):
    return _exp(lib, strict, lambda x: x + 1, (x34(),))


def model_class_not_instance(lib, strict):
    return _exp(lib, strict, Lin, (x34(),))


def scripted_module(lib, strict):
    return _exp(lib, strict, torch.jit.script(Lin()), (x34(),))


def data_parallel(lib, strict):
    return _exp(lib, strict, torch.nn.DataParallel(Lin()), (x34(),))


def meta_model(lib, strict):
    with torch.device("meta"):
        m = Lin()
    ep = _exp(lib, strict, m, (x34(),))
    return ep.module()(x34())


def train_dropout(lib, strict):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.d = torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.d(x)

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ep = _exp(lib, strict, M(), (x34(),))
    ops = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
    return f"OK warnings={[str(x.message)[:80] for x in w]} ops={ops}"


# ---- unsupported inputs ---------------------------------------------------------------------

class Box:
    def __init__(self, t):
        self.t = t


def custom_class_input(lib, strict):
    class M(torch.nn.Module):
        def forward(self, b):
            return b.t + 1

    return _exp(lib, strict, M(), (Box(x34()),))


def string_input(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x, mode):
            return x + 1 if mode == "a" else x - 1

    ep = _exp(lib, strict, M(), (x34(), "a"))
    return ep.module()(x34(), "b")


def none_in_list(lib, strict):
    class M(torch.nn.Module):
        def forward(self, xs):
            return xs[0] + 1

    ep = _exp(lib, strict, M(), ([x34(), None],))
    return "OK " + str(ep.module()([x34(), None]).shape)


def numpy_input(lib, strict):
    import numpy as np

    return _exp(lib, strict, Lin(), (np.ones((3, 4), dtype=np.float32),))


# ---- module() calls -------------------------------------------------------------------------

def module_too_few(lib, strict):
    return _exp(lib, strict, Add(), (x34(), x34())).module()(x34())


def module_too_many(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()(x34(), x34())


def module_missing_kwarg(lib, strict):
    return _exp(lib, strict, Two(), (x34(),), kwargs={"scale": torch.tensor(2.0)}).module()(x34())


def module_kwarg_positional(lib, strict):
    return _exp(lib, strict, Two(), (x34(),), kwargs={"scale": torch.tensor(2.0)}).module()(x34(), torch.tensor(2.0))


def module_wrong_dtype(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()(x34().double())


def module_wrong_rank(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()(torch.randn(2, 3, 4))


def module_wrong_static_size(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()(torch.randn(5, 4))


def module_wrong_device(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()(x34().to("meta"))


def module_list_for_tuple(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),)).module()([x34()])


def call_program(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),))(x34())


# ---- data-dependent code --------------------------------------------------------------------

def if_on_tensor(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    return _exp(lib, strict, M(), (x34(),))


def item_as_size(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x, n):
            return torch.zeros(n.item(), 4) + x.sum()

    return _exp(lib, strict, M(), (x34(), torch.tensor(5)))


def tolist_loop(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x, idx):
            out = x
            for i in idx.tolist():
                out = out + i
            return out

    return _exp(lib, strict, M(), (x34(), torch.tensor([1, 2])))


def numpy_in_forward(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2)

    return _exp(lib, strict, M(), (x34(),))


def print_tensor(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x):
            print("x is", x)
            return x + 1

    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _exp(lib, strict, M(), (x34(),))
    return "OK printed " + repr(buf.getvalue()[:60])


def data_dependent_while(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x):
            while x.sum() < 100:
                x = x * 2
            return x

    return _exp(lib, strict, M(), (x34().abs() + 1,))


# ---- dynamic shapes -------------------------------------------------------------------------

def spec_wrong_names(lib, strict):
    b = lib.Dim("batch")
    return _exp(lib, strict, Add(), (x34(), x34()), dynamic_shapes={"a": {0: b}, "b": {0: b}})


def spec_list_for_dict(lib, strict):
    return _exp(lib, strict, Add(), (x34(), x34()), dynamic_shapes=[{0: lib.Dim("b")}])


def dim_example_size_one(lib, strict):
    b = lib.Dim("batch")
    return _exp(lib, strict, Lin(), (torch.randn(1, 4),), dynamic_shapes={"x": {0: b}})


def dim_example_size_zero(lib, strict):
    b = lib.Dim("batch")
    return _exp(lib, strict, Lin(), (torch.randn(0, 4),), dynamic_shapes={"x": {0: b}})


def dim_min_gt_max(lib, strict):
    return lib.Dim("batch", min=10, max=2)


def dim_name_reused(lib, strict):
    return _exp(lib, strict, Add(), (x34(), x34()),
                dynamic_shapes={"x": {0: lib.Dim("b", max=8)}, "y": {0: lib.Dim("b", max=16)}})


def dim_for_non_tensor(lib, strict):
    class M(torch.nn.Module):
        def forward(self, x, k: int):
            return x * k

    return _exp(lib, strict, M(), (x34(), 3), dynamic_shapes={"x": {0: lib.Dim("b")}, "k": lib.Dim("k")})


def dim_out_of_range_example(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {0: lib.Dim("b", min=4, max=8)}})


def dim_axis_out_of_rank(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {2: lib.Dim("b")}})


def dim_specialized(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {1: lib.Dim("f")}})


def dim_string_for_dim(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {0: "batch"}})


def dim_for_whole_tensor(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": lib.Dim("b")})


def dim_tuple_short(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": (lib.Dim("b"),)})


def spec_keyed_by_index(lib, strict):
    return _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={0: {0: lib.Dim("b")}})


def spec_other_libs_dim(lib, strict):
    other = te if lib is graphcap else graphcap
    ep = _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {0: other.Dim("b", max=8)}})
    return "OK " + str(ep.module()(torch.randn(6, 4)).shape)


def save_the_model(lib, strict):
    d = tempfile.mkdtemp()
    _save(lib)(Lin(), os.path.join(d, "m.pt2"))
    return "OK " + str(os.listdir(d))


def dim_shared_by_other_sizes(lib, strict):
    b = lib.Dim("b")
    return _exp(lib, strict, Add(), (torch.randn(3, 4), torch.randn(5, 4)), dynamic_shapes={"x": {0: b}, "y": {0: b}})


def dim_min_eq_max(lib, strict):
    return lib.Dim("b", min=1, max=1)


def module_out_of_range(lib, strict):
    ep = _exp(lib, strict, Lin(), (x34(),), dynamic_shapes={"x": {0: lib.Dim("b", max=8)}})
    return ep.module()(torch.randn(20, 4))


# ---- save / load ----------------------------------------------------------------------------

def _small_ep(lib):
    return lib.export(Lin(), (x34(),))


def save_missing_dir(lib, strict):
    d = tempfile.mkdtemp()
    p = os.path.join(d, "nope", "m.pt2")
    _save(lib)(_small_ep(lib), p)
    return "OK " + str(os.listdir(d))


def save_read_only(lib, strict):
    d = tempfile.mkdtemp()
    os.chmod(d, 0o500)
    try:
        _save(lib)(_small_ep(lib), os.path.join(d, "m.pt2"))
    finally:
        left = os.listdir(d)
        os.chmod(d, 0o700)
    return "OK " + str(left)


def save_to_directory(lib, strict):
    d = tempfile.mkdtemp()
    _save(lib)(_small_ep(lib), d)
    return "OK"


def save_unserializable_op(lib, strict):
    lib_name = "umaudit"
    if not hasattr(torch.ops, lib_name) or not hasattr(getattr(torch.ops, lib_name), "twice"):
        @torch.library.custom_op(f"{lib_name}::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @twice.register_fake
        def _(x):
            return torch.empty_like(x)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.umaudit.twice(x)

    ep = lib.export(M(), (x34(),))
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    _save(lib)(ep, p)
    return "OK saved; " + str(os.listdir(d))


def load_without_custom_op(lib, strict):
    """A program calling a custom operator, loaded in a process that does not define it."""
    save_unserializable_op(lib, strict)  # defines umaudit::twice here

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.umaudit.twice(x)

    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    _save(lib)(lib.export(M(), (x34(),)), p)
    call = "graphcap.load" if lib is graphcap else "torch.export.load"
    r = subprocess.run([sys.executable, "-c", f"import torch, graphcap; {call}({p!r})"], capture_output=True,
                       text=True, timeout=300)
    return f"rc={r.returncode} " + "\n".join(r.stderr.strip().splitlines()[-3:])


def save_overwrite_then_fail(lib, strict):
    """A save that fails must not destroy the file already there."""
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    _save(lib)(_small_ep(lib), p)
    before = os.path.getsize(p)

    class Bad:
        pass

    try:
        _save(lib)(_small_ep(lib), p, extra_files={"x": Bad()})
    except Exception as e:
        kept = "kept" if os.path.getsize(p) == before else "CHANGED"
        return f"raised {type(e).__name__}; old file {kept}; {os.listdir(d)}"
    return "OK " + str(os.listdir(d))


def save_fails_fresh_path(lib, strict):
    """A save that fails must leave nothing at a new path (a meta-weight program saved with its weights)."""
    with torch.device("meta"):
        m = Lin()
    ep = lib.export(m, (torch.randn(3, 4, device="meta"),))
    d = tempfile.mkdtemp()
    try:
        _save(lib)(ep, os.path.join(d, "m.pt2"))
    except Exception as e:
        return f"raised {type(e).__name__}: {str(e)[:300]}; left {os.listdir(d)}"
    return "OK " + str(os.listdir(d))


def load_missing(lib, strict):
    return _load(lib)("/tmp/does/not/exist.pt2")


def load_truncated(lib, strict):
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    _save(lib)(_small_ep(lib), p)
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data[: len(data) // 2])
    return _load(lib)(p)


def load_not_zip(lib, strict):
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    with open(p, "w") as f:
        f.write("hello")
    return _load(lib)(p)


def load_torch_save(lib, strict):
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt")
    torch.save(Lin().state_dict(), p)
    return _load(lib)(p)


def load_other_lib_file(lib, strict):
    """A .pt2 of the other library."""
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    other = te if lib is graphcap else graphcap
    _save(other)(_small_ep(other), p)
    ep = _load(lib)(p)
    return "OK " + type(ep).__module__


def load_newer_format(lib, strict):
    if lib is not graphcap:
        return "n/a"
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    graphcap.save(_small_ep(lib), p)
    q = os.path.join(d, "n.pt2")
    with zipfile.ZipFile(p) as zin, zipfile.ZipFile(q, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("version") or info.filename.endswith("format_version"):
                data = b"999"
            zout.writestr(info, data)
        names = zin.namelist()
    graphcap.load(q)
    return "OK (names " + str([n for n in names if "version" in n]) + ")"


# ---- passes ---------------------------------------------------------------------------------

def decomp_bad_table(lib, strict):
    return _small_ep(lib).run_decompositions({"aten.linear": lambda *a: a})


def decomp_table_list(lib, strict):
    return _small_ep(lib).run_decompositions([torch.ops.aten.linear.default])


def unflatten_no_preserve(lib, strict):
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Lin()

        def forward(self, x):
            return self.inner(x) * 2

    ep = lib.export(Outer(), (x34(),))
    uf = lib.unflatten(ep)
    return "OK " + str(type(uf.inner).__name__) + " " + str(uf(x34()).shape)


def unflatten_swap_no_preserve(lib, strict):
    """Swapping in a submodule whose signature was not preserved."""
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Lin()

        def forward(self, x):
            return self.inner(x) * 2

    ep = lib.export(Outer(), (x34(),))
    uf = lib.unflatten(ep)
    uf.inner = Lin()
    return "OK " + str(uf(x34()).shape)


# ---- CLI ------------------------------------------------------------------------------------

def _cli(args: list[str]) -> str:
    if True:
        env = dict(os.environ)
        r = subprocess.run([sys.executable, "-m", "graphcap", *args], capture_output=True, text=True, env=env,
                           timeout=300)
        return f"rc={r.returncode} {r.stderr.strip()[-900:]}"


def cli_wrong_path(lib, strict):
    if lib is not graphcap:
        return "n/a"
    return _cli(["export", "no/such/file.py:make", "-o", "/tmp/x.pt2"])


def cli_wrong_factory(lib, strict):
    if lib is not graphcap:
        return "n/a"
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.py")
    with open(p, "w") as f:
        f.write("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
                "def make():\n    return M(), (torch.randn(2, 3),)\n")
    return _cli(["export", f"{p}:mkae", "-o", os.path.join(d, "x.pt2")])


def cli_bad_input_spec(lib, strict):
    if lib is not graphcap:
        return "n/a"
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    graphcap.save(_small_ep(lib), p)
    return _cli(["run", p, "--input", "x=float32[3,4"])


def cli_wrong_input_shape(lib, strict):
    if lib is not graphcap:
        return "n/a"
    d = tempfile.mkdtemp()
    p = os.path.join(d, "m.pt2")
    graphcap.save(_small_ep(lib), p)
    return _cli(["run", p, "--input", "x=5x4"])


PROBES = [v for k, v in list(globals().items()) if callable(v) and getattr(v, "__module__", None) == __name__
          and k not in {"Lin", "Two", "Add", "Box", "x34", "_exp", "_save", "_load", "_small_ep", "_cli"}
          and not k.startswith("_")]


def _describe(e: BaseException, full: bool) -> str:
    bases = [c.__name__ for c in type(e).__mro__[1:] if c.__module__.startswith(("torch", "builtins"))
             and c.__name__ not in {"object", "BaseException", "Exception"}]
    msg = str(e)
    if not full:
        msg = "\n".join(msg.strip().splitlines()[:3])[:400]
    return f"{type(e).__name__} {bases}: {msg}"


def run(probe, lib, strict) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = probe(lib, strict)
        if isinstance(r, str):
            return r
        return "OK " + type(r).__name__
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return _describe(e, lib is graphcap)


def main() -> None:
    strict = "--strict" in sys.argv
    picks = [a for a in sys.argv[1:] if not a.startswith("--")]
    for probe in PROBES:
        if picks and not any(p in probe.__name__ for p in picks):
            continue
        gc = run(probe, graphcap, strict)
        tr = run(probe, te, strict)
        print(f"=== {probe.__name__} strict={strict}\n--- gc: {gc}\n--- te: {tr}\n", flush=True)


if __name__ == "__main__":
    main()
