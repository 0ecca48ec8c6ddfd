"""Re-export and torch.compile of unflattened modules, graphcap's against torch.export's.

For each case a model is exported by graphcap (and by torch.export), the program is unflattened by
``graphcap.unflatten`` (and ``torch.export.unflatten``), and the unflattened module (or one of its
submodules) is re-exported by graphcap and by torch.export, ``strict=True`` and ``strict=False``
(with the case's spec where it has one), and compiled with ``torch.compile`` (backend "eager",
``fullgraph`` False and True), each before the module's first call and after it. The re-exported
program's ``module()`` (or the compiled module) runs on the case's second inputs against a fresh
eager copy that made the same calls (outputs and buffers), and must refuse the case's bad input.

    PYTHONPATH=src .venv/bin/python bench/probes/unflatten_reexport.py            # the small cases
    PYTHONPATH=src .venv/bin/python bench/probes/unflatten_reexport.py --zoo hf_bert,tv_resnet18
"""
from __future__ import annotations

import argparse
import copy
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from _compare import error_line, same
from torch.export import Dim

import graphcap


class Block(torch.nn.Module):
    def __init__(self, n: int = 4):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


class TwoBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        return self.b(self.a(x))


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x):
        self.seen.add_(x.sum(0))
        return self.lin(x) + self.seen


class Mutating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.b = Counting(), Block()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.b(self.c(x)) * self.calls


class Branch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: self.lin(t) - 1, (x,))


class WithCond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.br = Block(), Branch()

    def forward(self, x):
        return self.br(self.pre(x))


class CalledTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = Block()
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.blk(self.blk(x)) + x)


class Shared(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.second = self.first  # one module at two names
        self.last = Block()

    def forward(self, x):
        return self.last(self.second(self.first(x)))


class SharedAndCond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = Block()
        self.alias = self.blk
        self.br = Branch()

    def forward(self, x):
        return self.br(self.alias(self.blk(x)) + x)


class Case:
    def __init__(self, name: str, make: Callable[[], torch.nn.Module], args: tuple, args2: tuple, bad: tuple,
                 spec: Any = None, preserve: tuple = (), sub: str = "", swap: Optional[str] = None,
                 wider: Any = None):
        self.name, self.make, self.args, self.args2, self.bad = name, make, args, args2, bad
        self.spec, self.preserve, self.sub, self.swap = spec, preserve, sub, swap
        self.wider = wider  # a spec past the program's range: a re-export with it must be refused
        self.kwargs: dict = {}
        self.kwargs2: dict = {}
        self.bad_kwargs: dict = {}


def small_cases() -> list[Case]:
    x, x2 = torch.randn(2, 4), torch.randn(2, 4)
    batch = Dim("batch", min=2, max=16)
    return [
        Case("two_blocks", TwoBlocks, (x,), (x2,), (torch.randn(3, 4),), sub="a"),
        Case("buffers_mutated", Mutating, (x,), (x2,), (torch.randn(3, 4),), sub="c"),
        Case("dynamic_batch", TwoBlocks, (torch.randn(4, 4),), (torch.randn(7, 4),), (torch.randn(17, 4),),
             spec=({0: batch},), sub="a", wider=({0: Dim("wide", min=2, max=64)},)),
        Case("cond", WithCond, (x.abs(),), (-x2.abs(),), (torch.randn(3, 4),), sub="br"),
        Case("called_twice", CalledTwice, (x,), (x2,), (torch.randn(3, 4),), sub="blk"),
        Case("shared", Shared, (x,), (x2,), (torch.randn(3, 4),), sub="first"),
        Case("shared_and_cond", SharedAndCond, (x.abs(),), (-x2.abs(),), (torch.randn(3, 4),), sub="br"),
        Case("preserved", TwoBlocks, (x,), (x2,), (torch.randn(3, 4),), preserve=("a",), sub="a"),
        Case("preserved_swapped", TwoBlocks, (x,), (x2,), (torch.randn(3, 4),), preserve=("a",), sub="a",
             swap="a"),
        Case("preserved_mutating", Mutating, (x,), (x2,), (torch.randn(3, 4),), preserve=("c",), sub="c"),
    ]


def zoo_cases(names: list[str]) -> list[Case]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "shared" / "zoo"))
    import zoo
    cases = []
    for name in names:
        built = zoo.select(name)[0].builder()
        model = built.model.eval()
        def narrowed(a: Any) -> Any:  # batch 1 where the static program holds 2
            return a[:1] if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] > 1 else a

        args = tuple(built.args)
        case = Case(name, lambda m=model: m, args, args, tuple(narrowed(a) for a in args))  # static: the example
        case.kwargs = case.kwargs2 = dict(built.kwargs or {})
        case.bad_kwargs = {k: narrowed(v) for k, v in case.kwargs.items()}
        cases.append(case)
    return cases


def _buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in module.named_buffers()}


def _same_buffers(got: torch.nn.Module, eager: torch.nn.Module) -> bool:
    mine, ref = _buffers(got), _buffers(eager)
    return all(same(mine[k], ref[k]) for k in ref if k in mine)


def _refuses(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as e:
        return type(e).__name__
    return "NOT REFUSED"


def trial(case: Case, lib: str, when: str, action: str, target: str, wider: bool = False) -> str:
    """One cell: ``lib`` unflattens, ``when`` (before/after the first call), ``action`` on ``target``."""
    model = case.make()
    eager = copy.deepcopy(model)
    exported = copy.deepcopy(model)
    if lib == "graphcap":
        ep = graphcap.export(exported, case.args, case.kwargs or None, dynamic_shapes=case.spec,
                             preserve_module_call_signature=case.preserve)
        unf = graphcap.unflatten(ep)
    else:
        ep = torch.export.export(exported, case.args, case.kwargs or None, dynamic_shapes=case.spec,
                                 preserve_module_call_signature=case.preserve)
        unf = torch.export.unflatten(ep)
    if case.swap:
        swapped = copy.deepcopy(eager.get_submodule(case.swap))
        unf.set_submodule(case.swap, swapped)
    if when == "after":
        unf(*case.args, **case.kwargs)
        eager(*case.args, **case.kwargs)
    if target == "root":
        module, ref_module, args, kwargs, args2, kwargs2, spec = (unf, eager, case.args, case.kwargs, case.args2,
                                                                  case.kwargs2, case.spec)
        bad, bad_kwargs = case.bad, case.bad_kwargs
        if wider:
            spec = case.wider
    else:  # the submodule, on the input the eager model gives it
        seen: list = []
        spy = copy.deepcopy(eager)
        spy.get_submodule(target).register_forward_pre_hook(lambda m, a: seen.append(a))
        spy(*case.args, **case.kwargs)
        module, ref_module = unf.get_submodule(target), eager.get_submodule(target)
        args, kwargs, args2, kwargs2, spec = seen[0], {}, seen[0], {}, None
        bad = tuple(torch.randn(3, *a.shape[1:]) if isinstance(a, torch.Tensor) else a for a in args)
        bad_kwargs = {}
    if action.startswith("compile"):
        compiled = torch.compile(module, backend="eager", fullgraph=action.endswith("fullgraph"))
        out = compiled(*args2, **kwargs2)
        ok = same(out, ref_module(*args2, **kwargs2)) and _same_buffers(module, ref_module)
        checked = target == "root" and not action.endswith("fullgraph")  # fullgraph: dynamo's Unsupported
        refusal = _refuses(lambda: compiled(*bad, **bad_kwargs)) if checked else "-"
        return ("=" if ok else "WRONG") + f" / {refusal}"
    exporter = graphcap.export if action.startswith("graphcap") else torch.export.export
    strict = action.endswith("strict") and not action.endswith("nonstrict")
    if spec is not None and exporter is torch.export.export:
        spec = (spec,)  # torch reads a tuple spec per parameter: the forward's one *args takes them all
    try:
        ep2 = exporter(module, args, kwargs or None, dynamic_shapes=spec, strict=strict)
    except Exception as e:
        if wider:
            return f"refused ({type(e).__name__})"
        raise
    if wider:
        return "NOT REFUSED (exported past the range)"
    run = ep2.module()
    out = run(*args2, **kwargs2)
    ok = same(out, ref_module(*args2, **kwargs2)) and _same_buffers(run, ref_module)
    refusal = _refuses(lambda: run(*bad, **bad_kwargs)) if target == "root" else "-"
    return ("=" if ok else "WRONG") + f" / {refusal}"


ACTIONS = ("graphcap_strict", "graphcap_nonstrict", "torch_strict", "torch_nonstrict", "compile", "compile_fullgraph")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", default="", help="comma-separated zoo cases (root only, before the first call)")
    parser.add_argument("--only", default="", help="comma-separated small cases")
    parser.add_argument("--libs", default="graphcap,torch")
    opts = parser.parse_args()
    cases = small_cases()
    if opts.only:
        cases = [c for c in cases if c.name in opts.only.split(",")]
    plan = [(c, lib, when, target) for c in cases for lib in opts.libs.split(",") for when in ("before", "after")
            for target in ("root", c.sub) if target]
    if opts.zoo:
        plan = [(c, lib, "before", "root") for c in zoo_cases(opts.zoo.split(",")) for lib in opts.libs.split(",")]
    tally: Counter = Counter()
    for case, lib, when, target in plan:
        cells = []
        for action in ACTIONS:
            torch._dynamo.reset()
            try:
                cell = trial(case, lib, when, action, target)
            except Exception as e:
                cell = "FAIL " + error_line(e, 110)
            tally[(lib, cell.split(" ")[0])] += 1
            cells.append(f"{action}: {cell}")
        if case.wider is not None and target == "root":
            for action in ACTIONS[:4]:
                torch._dynamo.reset()
                try:
                    cell = trial(case, lib, when, action, target, wider=True)
                except Exception as e:
                    cell = "FAIL " + error_line(e, 110)
                tally[(lib, "wider " + cell.split(" ")[0])] += 1
                cells.append(f"{action} past the range: {cell}")
        print(f"{case.name} [{lib}, {when}, {target}]")
        for cell in cells:
            print("    " + cell)
        sys.stdout.flush()
    print(dict(tally))


if __name__ == "__main__":
    main()
