"""Torch lines audit: what graphcap gives on the older torch lines it supports (2.10 to 2.13).

Each probe runs one small model through the library (``graphcap`` or ``torch.export``) and returns
what the user sees: "=" where the program's module gives eager's numbers (on the example and on
other sizes in range), a value, or the exception's class and first line. Run it with each line's
Python and compare the lines' outputs:

    name | gc: <what graphcap gives> | te: <what torch.export gives> [| DIFF]

Run: PYTHONPATH=src /work/main/.venv-2.1N/bin/python bench/probes/torch_lines_audit.py [name-substring ...]

Areas: ``torch.compile`` of ``ep.module()`` (its input checks must be compiled in, on every line:
torch 2.10-2.11's dynamo answers ``torch.compiler.is_exporting()`` with True under any compile),
a strict export of ``ep.module()`` (the checks must stay out of that program), and torch.cond
branches whose outputs' strides hold ``Max(1, ...)`` (torch 2.10-2.13's cond checks them).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import torch
import torch.export as te
import torch.nn.functional as F

import graphcap

LINE = tuple(int(p) for p in torch.__version__.split(".")[:2])


def _x(n: int) -> torch.Tensor:
    return torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) / 7


class Pure(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x)) * 2


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1 if x.shape[0] < 5 else x - 1


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return x * self.count


def _show(fn: Callable[[], Any]) -> str:
    try:
        out = fn()
    except Exception as e:  # a probe reports what the user sees
        first = (str(e).strip().splitlines() or [""])[0]
        return f"{type(e).__name__}: {first[:110]}"
    return "=" if out is True else str(out)


def _sizes(call: Callable[[torch.Tensor], torch.Tensor], model: torch.nn.Module, sizes: tuple[int, ...]) -> str:
    """Per size: '=' (eager's numbers), 'x' (other numbers) or the refusal's class."""
    marks = []
    for n in sizes:
        try:
            marks.append("=" if torch.allclose(call(_x(n)), model(_x(n))) else "x")
        except Exception as e:
            marks.append(type(e).__name__)
    return " ".join(marks)


def _export(lib: str, model: torch.nn.Module, args: tuple, dynamic_shapes: Any = None, strict: bool = False) -> Any:
    if lib == "gc":
        return graphcap.export(model, args, dynamic_shapes=dynamic_shapes, strict=strict)
    return te.export(model, args, dynamic_shapes=dynamic_shapes, strict=strict)


def _dim(lib: str, name: str, **kw: int) -> Any:
    return (graphcap.Dim if lib == "gc" else te.Dim)(name, **kw)


# -- torch.compile of the program's module -----------------------------------------------------
def compile_static_other_size(lib: str) -> str:
    torch.compiler.reset()
    compiled = torch.compile(_export(lib, Branchy(), (_x(3),)).module(), backend="eager")
    return _sizes(compiled, Branchy(), (3, 6, 3, 2))


def compile_dynamic_out_of_range(lib: str) -> str:
    torch.compiler.reset()
    ep = _export(lib, Pure(), (_x(3),), dynamic_shapes=({0: _dim(lib, "b", min=2, max=8)},))
    compiled = torch.compile(ep.module(), backend="eager")
    return _sizes(compiled, Pure(), (3, 8, 2, 9, 1, 5))


def compile_fullgraph_out_of_range(lib: str) -> str:
    torch.compiler.reset()
    ep = _export(lib, Pure(), (_x(3),), dynamic_shapes=({0: _dim(lib, "b", min=2, max=8)},))
    compiled = torch.compile(ep.module(), backend="eager", fullgraph=True)
    return _sizes(compiled, Pure(), (3, 8, 9))


def compile_buffer_writer(lib: str) -> str:
    torch.compiler.reset()
    compiled = torch.compile(_export(lib, Counting(), (_x(3),)).module(), backend="eager")
    eager = Counting()
    return _sizes(compiled, eager, (3, 3, 9))


def compile_unflattened(lib: str) -> str:
    torch.compiler.reset()
    ep = _export(lib, Branchy(), (_x(3),))
    module = graphcap.unflatten(ep) if lib == "gc" else te.unflatten(ep)
    return _sizes(torch.compile(module, backend="eager"), Branchy(), (3, 6))


def compile_then_eager_module(lib: str) -> str:
    """After a compiled call, the same module called eagerly still checks (no flag left on)."""
    torch.compiler.reset()
    module = _export(lib, Branchy(), (_x(3),)).module()
    torch.compile(module, backend="eager")(_x(3))
    return _sizes(module, Branchy(), (3, 6)) + f" | is_exporting after: {torch.compiler.is_exporting()}"


# -- a strict export of the program's module: the checks stay out of it -------------------------
def strict_reexport_of_module(lib: str) -> str:
    ep = _export("gc", Pure(), (_x(3),), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=8)},))
    again = _export(lib, ep.module(), (_x(3),), dynamic_shapes=({0: _dim(lib, "n", min=2, max=8)},), strict=True)
    return _sizes(again.module(), Pure(), (2, 3, 8, 9))


def nonstrict_reexport_of_module(lib: str) -> str:
    ep = _export("gc", Pure(), (_x(3),), dynamic_shapes=({0: graphcap.Dim("b", min=2, max=8)},))
    again = _export(lib, ep.module(), (_x(3),), dynamic_shapes=({0: _dim(lib, "n", min=2, max=8)},))
    return _sizes(again.module(), Pure(), (2, 3, 8, 9))


# -- torch.cond branches whose outputs' strides hold Max(1, ...) --------------------------------
class BicubicInABranch(torch.nn.Module):
    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        def sharp(x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, scale_factor=0.5, mode="bicubic", align_corners=True)

        def smooth(x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=True)

        return torch.cond(flag.sum() > 0, sharp, smooth, (x,))


class ReshapeInABranch(torch.nn.Module):
    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        return torch.cond(flag.sum() > 0, lambda x: x.reshape(-1, 3) * 2, lambda x: x.reshape(-1, 3) + 1, (x,))


def _cond(lib: str, model: torch.nn.Module, x: torch.Tensor, dims: dict, strict: bool, decompose: bool,
          others: list) -> str:
    ep = _export(lib, model, (x, torch.ones(1)), dynamic_shapes={"x": dims, "flag": None}, strict=strict)
    if decompose:
        ep = ep.run_decompositions()
    marks = []
    for other in others:
        for flag in (torch.ones(1), -torch.ones(1)):
            marks.append("=" if torch.allclose(ep.module()(other, flag), model(other, flag)) else "x")
    return " ".join(marks)


def cond_bicubic_branch(lib: str, strict: bool = False, decompose: bool = False) -> str:
    h = _dim(lib, "h", min=2, max=9)
    return _cond(lib, BicubicInABranch(), torch.randn(1, 2, 6, 6), {2: h}, strict, decompose,
                 [torch.randn(1, 2, n, 6) for n in (2, 3, 9)])


def cond_reshape_branch(lib: str, strict: bool = False, decompose: bool = False) -> str:
    b = _dim(lib, "batch", min=1, max=8)
    return _cond(lib, ReshapeInABranch(), torch.randn(4, 2, 3).transpose(1, 2), {0: b}, strict, decompose,
                 [torch.randn(n, 2, 3).transpose(1, 2) for n in (1, 3, 8)])


PROBES: dict[str, Callable[[str], str]] = {
    "compile_static_other_size": compile_static_other_size,
    "compile_dynamic_out_of_range": compile_dynamic_out_of_range,
    "compile_fullgraph_out_of_range": compile_fullgraph_out_of_range,
    "compile_buffer_writer": compile_buffer_writer,
    "compile_unflattened": compile_unflattened,
    "compile_then_eager_module": compile_then_eager_module,
    "strict_reexport_of_module": strict_reexport_of_module,
    "nonstrict_reexport_of_module": nonstrict_reexport_of_module,
    "cond_bicubic_branch": cond_bicubic_branch,
    "cond_bicubic_branch_strict": lambda lib: cond_bicubic_branch(lib, strict=True),
    "cond_bicubic_branch_decomposed": lambda lib: cond_bicubic_branch(lib, decompose=True),
    "cond_reshape_branch": cond_reshape_branch,
    "cond_reshape_branch_strict": lambda lib: cond_reshape_branch(lib, strict=True),
    "cond_reshape_branch_decomposed": lambda lib: cond_reshape_branch(lib, decompose=True),
}


def main(argv: list[str]) -> None:
    print(f"torch {torch.__version__}")
    for name, probe in PROBES.items():
        if argv and not any(a in name for a in argv):
            continue
        gc, ref = _show(lambda p=probe: p("gc")), _show(lambda p=probe: p("te"))
        print(f"{name} | gc: {gc} | te: {ref}" + (" | DIFF" if gc != ref else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
