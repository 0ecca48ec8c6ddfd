"""The ``graphcap`` subcommands. Each takes the parsed arguments and returns an exit status."""
from __future__ import annotations

import json
import os
import time
from typing import Any

from .errors import UsageError
from .factory import Factory, is_factory_spec, load_factory
from .summary import diff_facts, format_version_of, human_bytes, program_facts


def console():
    """A rich console: the terminal's width, or a wide one when the output is a pipe or file
    (so tables are not wrapped at 80 columns in logs)."""
    from rich.console import Console
    c = Console(highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(highlight=False, soft_wrap=False, width=max(c.width, 140), color_system=None)
    return c


# -- export ----------------------------------------------------------------------

def _export(built: Factory, strict: bool):
    import graphcap
    return graphcap.export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                           strict=strict)


def export_command(args) -> int:
    import graphcap
    if args.report:
        _report_function()  # refuse before the (long) export when the report cannot be written
    built = load_factory(args.factory)
    start = time.perf_counter()
    ep = _export(built, args.strict)
    seconds = time.perf_counter() - start
    _writable(args.output)
    graphcap.save(ep, args.output)
    facts = program_facts(ep)
    out = console()
    out.print(f"Exported {built.where} in {seconds:.2f} s: {len(facts.inputs)} inputs, "
              f"{sum(facts.operators.values())} operator calls, {len(facts.ranges)} range constraints")
    out.print(f"Wrote {args.output} ({human_bytes(os.path.getsize(args.output))})")
    if args.report:
        write_report(ep, args.report)
        out.print(f"Wrote {args.report}")
    return 0


def _writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"Cannot write {path}: the folder {folder} does not exist.", where="-o/--output",
                         fix="Create the folder or choose another path.")


def write_report(ep, path: str, verification: Any = None) -> None:
    """``graphcap.report(ep, path, verification=...)``: the HTML report (graphcap.report)."""
    _writable(path)
    report_fn = _report_function()
    report_fn(ep, path, verification=verification)


def _report_function():
    """graphcap.report, imported when --report asks for it (the page code is not needed otherwise)."""
    from ..html_report import report
    return report


# -- inspect -----------------------------------------------------------------------

LOAD_IMPORTS: list[str] = []  # the modules --import names, imported by each load


def load_program(path: str, *, weights: bool = True):
    """Load a .pt2 file as the command line does: memory-mapped (every tensor checked against its
    checksum), the --import modules imported, and a stand-in record for any class of the
    program's structure that is not importable (the shell imported nothing; see docs/files.md)."""
    import graphcap
    if not os.path.isfile(path):
        raise UsageError(f"No such file: {path}", where=path, fix="Give the path of a .pt2 file graphcap saved.")
    return graphcap.load(path, mmap=True, weights=weights, import_modules=LOAD_IMPORTS, stand_ins=True)


def inspect_command(args) -> int:
    from rich.table import Table
    from rich.markup import escape
    ep = load_program(args.program)
    facts = program_facts(ep, format_version_of(args.program))
    out = console()
    out.print(f"[bold]{escape(args.program)}[/bold]: graphcap format version {facts.format_version}, "
              f"{facts.dialect or 'TRAINING'} IR")
    sig = Table(title="Signature", title_justify="left")
    for col in ("", "name", "kind", "target", "type"):
        sig.add_column(col)
    for name, kind, target, ty in facts.inputs:
        sig.add_row("in", escape(name), kind, escape(target), escape(ty))
    for name, kind, target, ty in facts.outputs:
        sig.add_row("out", escape(name), kind, escape(target), escape(ty))
    out.print(sig)
    if facts.ranges:
        rt = Table(title="Range constraints", title_justify="left")
        rt.add_column("symbol")
        rt.add_column("range")
        rt.add_column("input dimension")
        for k, v in facts.ranges.items():
            rt.add_row(escape(k), escape(v), escape(facts.by_labels(k)) if facts.by_labels(k) != k else "")
        out.print(rt)
    else:
        out.print("Range constraints: none (every size is static)")
    ops = Table(title=f"Operators ({sum(facts.operators.values())} calls)", title_justify="left")
    ops.add_column("operator")
    ops.add_column("count", justify="right")
    for name, count in facts.operators.most_common():
        ops.add_row(escape(name), str(count))
    out.print(ops)
    total = sum(w.nbytes for w in facts.weights.values())
    wt = Table(title=f"Weights ({len(facts.weights)} tensors, {human_bytes(total)})", title_justify="left")
    for col, kw in (("name", {}), ("kind", {}), ("dtype", {}), ("shape", {}), ("size", dict(justify="right"))):
        wt.add_column(col, **kw)
    ranked = sorted(facts.weights.items(), key=lambda kv: -kv[1].nbytes)
    for name, w in ranked[:20]:
        wt.add_row(escape(name), w.kind, w.dtype, str(w.shape), human_bytes(w.nbytes))
    if len(ranked) > 20:
        wt.add_row(f"... {len(ranked) - 20} more", "", "", "", human_bytes(sum(w.nbytes for _, w in ranked[20:])))
    out.print(wt)
    if args.graph:
        from ..printing import graph_to_str
        out.print(escape(graph_to_str(ep.graph_module)))
    return 0


# -- run -----------------------------------------------------------------------------

def run_command(args) -> int:
    from rich.markup import escape
    from rich.table import Table
    from .. import auto_flatten
    from ..verification.generate import make_inputs, size_plans
    from ..verification.signature_inputs import ProgramInputs, TensorInput
    ep = load_program(args.program)
    inputs = ProgramInputs(ep)
    runnable = ep.module()
    plans = size_plans(inputs, max(args.samples, 0), args.seed)
    plans = plans[:1] + [p for p in plans if p.label.startswith("random")]
    t = Table(title=f"{args.program} on generated inputs", title_justify="left")
    for col in ("input set", "input shapes", "output shapes", "time"):
        t.add_column(col)
    import torch
    for k, plan in enumerate(plans):
        call = make_inputs(inputs, plan.bindings, args.seed * 10007 + k)
        shapes = "  ".join(f"{leaf.name} {list(s)}" for leaf, s in zip(inputs.leaves, inputs.shapes(plan.bindings))
                           if isinstance(leaf, TensorInput))
        start = time.perf_counter()
        with torch.no_grad():
            result = runnable(*call[0], **call[1])
        ms = (time.perf_counter() - start) * 1000
        leaves, _ = auto_flatten.flatten_with_path(result)
        outs = "  ".join(f"{_out_name(p)} {list(v.shape)}" if isinstance(v, torch.Tensor) else f"{_out_name(p)}={v!r}"
                         for p, v in leaves)
        t.add_row(escape(plan.label), escape(shapes), escape(outs), f"{ms:.1f} ms")
    console().print(t)
    return 0


def _out_name(path) -> str:
    from ..torch_private import pytree
    return "output" + pytree.keystr(path) if path else "output"


# -- verify ----------------------------------------------------------------------------

def verify_command(args) -> int:
    import graphcap
    targets = list(args.targets)
    if len(targets) == 1 and is_factory_spec(targets[0]):
        built = load_factory(targets[0])
        ep = _export(built, args.strict)
    elif len(targets) == 2 and is_factory_spec(targets[1]) and not is_factory_spec(targets[0]):
        built = load_factory(targets[1])  # first: the classes the factory's modules define are then the real ones
        ep = load_program(targets[0])
    else:
        raise UsageError(f"verify takes FILE.py:FACTORY or OUT.pt2 FILE.py:FACTORY, got {' '.join(targets)}.",
                         where="graphcap verify", fix="e.g. graphcap verify model.py:make or graphcap verify "
                                                      "model.pt2 model.py:make")
    if args.report:
        _report_function()
    if args.samples < 0:
        raise UsageError("--samples must be 0 or more.", where="--samples", fix="e.g. --samples 5")
    result = graphcap.verify(ep, built.model, samples=args.samples, rtol=args.rtol, atol=args.atol, seed=args.seed,
                             example_inputs=(built.args, built.kwargs), check_refusals=not args.no_refusals)
    out = console()
    out.print(result.table(per_output=args.per_output))
    if result.refusals:
        out.print(result.refusal_table())
    from rich.markup import escape
    style = "green" if result.passed else "bold red"
    out.print(f"[{style}]{escape(result.summary())}[/{style}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.as_dict(), f, indent=1)
    if args.report:
        write_report(ep, args.report, verification=result)
        out.print(f"Wrote {args.report}")
    return 0 if result.passed else 1


# -- diff --------------------------------------------------------------------------------

def diff_command(args) -> int:
    from rich.markup import escape
    from rich.table import Table
    a, b = load_program(args.a), load_program(args.b)
    changes = diff_facts(program_facts(a, format_version_of(args.a)), program_facts(b, format_version_of(args.b)))
    out = console()
    if not changes:
        out.print(f"{escape(args.a)} and {escape(args.b)}: same signature, ranges, operators and weights")
        return 0
    t = Table(title=f"{args.a} -> {args.b}: {len(changes)} difference{'s' if len(changes) != 1 else ''}", title_justify="left")
    for col in ("section", "item", args.a, args.b):
        t.add_column(escape(col))
    for c in changes:
        t.add_row(c.section, escape(c.item), escape(c.before), escape(c.after))
    out.print(t)
    return 1
