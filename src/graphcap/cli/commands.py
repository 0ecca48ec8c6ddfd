"""The ``graphcap`` subcommands. Each takes the parsed arguments and returns an exit status.

With ``--json`` a command prints one JSON document on stdout (``{"ok": true,
"command": ..., "exit_status": ...}`` and the command's facts) instead of its
tables; what else it has to say goes to stderr.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Optional

from .errors import UsageError
from .factory import Factory, is_factory_spec, load_factory
from .summary import assumption_rows, diff_facts, facts_as_data, format_version_of, human_bytes, program_facts

STRATEGY_NAMES = ("non_strict", "strict", "draft")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: tuples and sizes as lists, infinite or NaN floats as strings
    (strict JSON has neither), anything else unknown by its ``str``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "__index__"):
        try:
            return int(value)
        except Exception:  # a symbolic size: its text
            return str(value)
    return str(value)


def emit(args, command: str, data: dict[str, Any], status: int, render: Callable[[], None]) -> int:
    """Print the command's result: its JSON document with ``--json``, else its tables."""
    if getattr(args, "json", False):
        doc = {"ok": status == 0, "command": command, "exit_status": status, **data}
        print(json.dumps(jsonable(doc), indent=1))
    else:
        render()
    return status


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


def _strategies(args) -> tuple[str, ...]:
    names = tuple(n.strip() for n in args.strategies.split(",") if n.strip())
    if args.strategies != "non_strict,strict,draft" and not args.chain:
        raise UsageError("--strategies only applies to the capture chain.", where="--strategies",
                         fix="Add --chain: graphcap export ... --chain --strategies " + args.strategies)
    unknown = [n for n in names if n not in STRATEGY_NAMES]
    if unknown or not names:
        raise UsageError(f"--strategies {args.strategies!r}: unknown strategy {', '.join(unknown) or '(none given)'}.",
                         where="--strategies", fix=f"Name some of {', '.join(STRATEGY_NAMES)}, comma-separated, "
                                                   "e.g. --strategies non_strict,draft")
    return names


def export_command(args) -> int:
    import graphcap
    strategies = _strategies(args)
    if args.report:
        _report_function()  # refuse before the (long) export when the report cannot be written
        _writable(args.report, "--report")
    _writable(args.output)
    built = load_factory(args.factory, args.factory_args)
    start = time.perf_counter()
    data: dict[str, Any] = {"factory": built.where, "output": args.output}
    inferred = _infer_shapes(args, built)
    if inferred is not None:
        built = built._replace(dynamic_shapes=inferred.spec)
        data["inferred_shapes"] = {"code": inferred.code, "report": inferred.report(),
                                   "verified_samples": list(inferred.verified)}
    draft_report, capture_result = None, None
    if args.draft:
        ep = graphcap.draft_export(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes)
        draft_report = ep.report
        data["way"] = "draft"
        data["draft_report"] = draft_report.as_data()
    elif args.chain:
        capture_result = graphcap.capture(built.model, built.args, built.kwargs, dynamic_shapes=built.dynamic_shapes,
                                          strategies=strategies, progress=None if not args.json else False)
        ep = capture_result.program
        data["way"] = "chain"
        data["capture"] = capture_result.as_data()
    else:
        ep = _export(built, args.strict)
        data["way"] = "strict" if args.strict else "non_strict"
    seconds = time.perf_counter() - start
    graphcap.save(ep, args.output)
    facts = program_facts(ep, format_version_of(args.output))
    size = os.path.getsize(args.output)
    data.update(seconds=round(seconds, 3), bytes=size, program=facts_as_data(facts, ep))
    if args.report:
        write_report(ep, args.report, draft_report=draft_report)
        data["report"] = args.report

    def render() -> None:
        out = console()
        from rich.markup import escape
        if capture_result is not None:
            out.print(escape(str(capture_result)))
        how = {"draft": " (draft)", "chain": f" (capture chain: {capture_result.strategy})" if capture_result else ""
               }.get(data["way"], " (strict)" if args.strict else "")
        out.print(f"Exported {escape(built.where)}{how} in {seconds:.2f} s: {len(facts.inputs)} inputs, "
                  f"{sum(facts.operators.values())} operator calls, {len(facts.ranges)} range constraints")
        if draft_report is not None:
            problems = draft_report.problems
            out.print(escape(str(draft_report)) if problems else "Draft export: no problems (an export would "
                                                                  "have succeeded as well)")
        if inferred is not None:
            out.print("Inferred dynamic shapes (paste into the factory to keep them):")
            out.print(escape(inferred.code))
            out.print(escape(inferred.report()))
        out.print(f"Wrote {escape(args.output)} ({human_bytes(size)})")
        if args.report:
            out.print(f"Wrote {escape(args.report)}")
    return emit(args, "export", data, 0, render)


def _infer_shapes(args, built: Factory):
    """``--infer-shapes``: the spec inferred from the factory's example and the samples (else None)."""
    given = args.samples_factory or args.sample_inputs
    if not args.infer_shapes:
        if given:
            option = "--samples" if args.samples_factory else "--sample-input"
            raise UsageError(f"{option} is only read with --infer-shapes.", where=option,
                             fix="Add --infer-shapes, or drop the samples.")
        return None
    if not given:
        raise UsageError("--infer-shapes needs samples to infer from.", where="--infer-shapes",
                         fix="Add --samples FILE.py:SAMPLES (a function returning [(x1,), (x2,)]) or one "
                             "--sample-input 'x=4x8' per sample, with sizes that differ where the model's do.")
    if built.dynamic_shapes is not None:
        raise UsageError(f"{built.where} returns a dynamic_shapes spec, and --infer-shapes would replace it.",
                         where="--infer-shapes", fix="Drop --infer-shapes to keep the factory's spec, or return "
                                                     "(model, args, kwargs) from the factory.")
    import graphcap

    from .factory import load_samples
    from .sample_inputs import samples_from_sizes
    samples: list = []
    if args.samples_factory:
        samples += load_samples(args.samples_factory, args.factory_args)
    samples += samples_from_sizes(built, args.sample_inputs)
    if not samples:
        raise UsageError(f"{args.samples_factory} returned no samples.", where="--samples",
                         fix="Return one or more samples besides the factory's example: [(x1,), (x2,)]")
    # the factory's example is one more sample, as with graphcap.export(args, dynamic_shapes="infer", samples=...)
    return graphcap.infer_dynamic_shapes(built.model, [(built.args, built.kwargs), *samples], strict=args.strict)


def _writable(path: str, option: str = "-o/--output") -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"Cannot write {path}: the folder {folder} does not exist.", where=option,
                         fix="Create the folder or choose another path.")


def write_report(ep, path: str, verification: Any = None, draft_report: Any = None, **options: Any) -> None:
    """``graphcap.report(ep, path, verification=...)``: the HTML report (graphcap.report)."""
    _writable(path)
    report_fn = _report_function()
    if draft_report is not None:
        options["draft_report"] = draft_report
    report_fn(ep, path, verification=verification, **options)


def _report_function():
    """graphcap.report, imported when --report asks for it (the page code is not needed otherwise)."""
    from ..html_report import report
    return report


# -- inspect -----------------------------------------------------------------------

LOAD_IMPORTS: list[str] = []  # the modules --import names, imported by each load


def load_program(path: str, *, weights: bool = True, method: Optional[str] = None, command: str = ""):
    """Load a .pt2 file as the command line does: memory-mapped (every tensor checked against its
    checksum), the --import modules imported, and a stand-in record for any class of the
    program's structure that is not importable (the shell imported nothing; see docs/files.md).

    A file of several methods (``graphcap.export_methods``) gives the program of ``--method``;
    without it, the command stops listing the methods."""
    import graphcap
    if not os.path.isfile(path):
        raise UsageError(f"No such file: {path}", where=path, fix="Give the path of a .pt2 file graphcap saved.")
    loaded = graphcap.load(path, mmap=True, weights=weights, import_modules=LOAD_IMPORTS, stand_ins=True)
    return pick_method(loaded, path, method, command)


def pick_method(loaded: Any, path: str, method: Optional[str], command: str):
    """The program ``--method`` names in a multi-method file (or the file's one program)."""
    from ..multi_method import MultiMethodProgram
    if isinstance(loaded, MultiMethodProgram):
        names = ", ".join(loaded.methods)
        if method is None:
            raise UsageError(f"{path} holds several methods ({names}); {command or 'the command'} works on one.",
                             where=path, fix=f"Name one with --method, e.g. graphcap {command or 'run'} {path} "
                                             f"--method {loaded.methods[0]}")
        if method not in loaded:
            raise UsageError(f"{path} has no method {method!r}; its methods are {names}.", where="--method",
                             fix=f"Name one of them, e.g. --method {loaded.methods[0]}")
        return loaded[method]
    if method is not None:
        raise UsageError(f"--method {method}: {path} holds one program, not several methods.", where="--method",
                         fix="Leave --method out.")
    return loaded


def inspect_command(args) -> int:
    import graphcap

    from ..multi_method import MultiMethodProgram
    if not os.path.isfile(args.program):
        raise UsageError(f"No such file: {args.program}", where=args.program,
                         fix="Give the path of a .pt2 file graphcap saved.")
    loaded = graphcap.load(args.program, mmap=True, import_modules=LOAD_IMPORTS, stand_ins=True)
    if isinstance(loaded, MultiMethodProgram) and args.method is None:
        return _inspect_methods(args, loaded)
    ep = pick_method(loaded, args.program, args.method, "inspect")
    facts = program_facts(ep, format_version_of(args.program))
    data = {"program": args.program, **({"method": args.method} if args.method else {}), **facts_as_data(facts, ep)}
    if args.graph:
        from ..printing import graph_to_str
        data["graph"] = graph_to_str(ep.graph_module)
    return emit(args, "inspect", data, 0, lambda: _render_inspect(args, ep, facts))


def _inspect_methods(args, progs) -> int:
    """A multi-method file: each method's inputs, outputs and operator count, and the shared state."""
    from ..signature import InputKind, OutputKind
    methods = []
    for name, ep in progs.items():
        sig = ep.graph_signature
        methods.append({
            "method": name,
            "inputs": [s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT],
            "outputs": sum(1 for s in sig.output_specs if s.kind is OutputKind.USER_OUTPUT),
            "state": sum(1 for s in sig.input_specs if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)),
            "writes": sorted({s.target for s in sig.input_specs if s.kind is InputKind.BUFFER}
                             & _written_buffers(ep)),
            "operator_calls": sum(1 for n in ep.graph.nodes if n.op == "call_function"),
        })
    unique = {id(t): t for t in [*progs.state_dict.values(), *progs.constants.values()]}
    state_bytes = sum(t.numel() * t.element_size() for t in unique.values())
    data = {"program": args.program, "format_version": format_version_of(args.program), "methods": methods,
            "state_tensors": len(progs.state_dict) + len(progs.constants), "state_bytes": state_bytes}

    def render() -> None:
        from rich.markup import escape
        from rich.table import Table
        out = console()
        out.print(f"[bold]{escape(args.program)}[/bold]: {len(methods)} methods over one state "
                  f"({data['state_tensors']} tensors, {human_bytes(state_bytes)}, stored once)")
        t = Table(title="Methods", title_justify="left")
        for col in ("method", "inputs", "outputs", "state read", "buffers written", "operator calls"):
            t.add_column(col)
        for m in methods:
            t.add_row(escape(m["method"]), escape(", ".join(m["inputs"])), str(m["outputs"]), str(m["state"]),
                      escape(", ".join(m["writes"]) or "-"), str(m["operator_calls"]))
        out.print(t)
        out.print(f"Show one with: graphcap inspect {escape(args.program)} --method {escape(methods[0]['method'])}")
    return emit(args, "inspect", data, 0, render)


def _written_buffers(ep) -> set:
    """The buffers a program writes: its mutation outputs (inference IR), or the in-place and out=
    operators of a training-IR graph on a buffer's input or on a view of it."""
    from ..node_facts import aliased_input, written_arguments
    from ..signature import InputKind
    placeholders = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.kind is InputKind.BUFFER}
    written = set(ep.graph_signature.buffers_to_mutate.values())
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        for value in written_arguments(node):
            base = aliased_input(value)
            if base is not None and base.name in placeholders:
                written.add(placeholders[base.name])
    return written


def _render_inspect(args, ep, facts) -> None:
    from rich.markup import escape
    from rich.table import Table
    out = console()
    method = f", method {escape(args.method)}" if getattr(args, "method", None) else ""
    out.print(f"[bold]{escape(args.program)}[/bold]{method}: graphcap format version {facts.format_version}, "
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
        rt.add_column("name (Dim or input dimension)")
        for k, v in facts.ranges.items():
            rt.add_row(escape(k), escape(v), escape(facts.by_labels(k)) if facts.by_labels(k) != k else "")
        out.print(rt)
    else:
        out.print("Range constraints: none (every size is static)")
    assumed = assumption_rows(ep)
    if assumed:
        at = Table(title="Assumptions (what export fixed or tied about the sizes)", title_justify="left")
        for col in ("kind", "condition", "where (user source)", "to keep it dynamic"):
            at.add_column(col)
        for a in assumed:
            at.add_row(a["kind"], escape(a["text"]), escape(a["where"] or "(inside torch)"), escape(a["keep_dynamic"]))
        out.print(at)
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


# -- run -----------------------------------------------------------------------------

def run_command(args) -> int:
    from .. import auto_flatten
    from ..verification.generate import make_inputs, size_plans
    from ..verification.signature_inputs import IntInput, ProgramInputs, TensorInput
    from .inputs import given_inputs
    if args.samples < 0:
        raise UsageError(f"--samples {args.samples}: the number of random input sets cannot be negative.",
                         where="--samples", fix="Give 0 or more, e.g. --samples 2 (0: the example's sizes only).")
    ep = load_program(args.program, method=args.method, command="run")
    inputs = ProgramInputs(ep)
    runnable = ep.module()
    if args.input_shapes or args.inputs:
        given = given_inputs(inputs, args.input_shapes, args.inputs, args.seed)
        calls = [(given.label, given.args, given.kwargs, given.shapes)]
    else:
        plans = size_plans(inputs, args.samples, args.seed)
        plans = plans[:1] + [p for p in plans if p.label.startswith("random")]
        calls = []
        for k, plan in enumerate(plans):
            call_args, call_kwargs = make_inputs(inputs, plan.bindings, args.seed * 10007 + k, plan.values)
            shapes = {leaf.name: list(s) if isinstance(leaf, TensorInput) else value
                      for leaf, s, value in zip(inputs.leaves, inputs.shapes(plan.bindings), _leaf_values(inputs, plan))
                      if isinstance(leaf, (TensorInput, IntInput))}
            calls.append((plan.label, call_args, call_kwargs, shapes))
    import torch
    runs = []
    for label, call_args, call_kwargs, shapes in calls:
        start = time.perf_counter()
        with torch.no_grad():
            result = runnable(*call_args, **call_kwargs)
        ms = (time.perf_counter() - start) * 1000
        leaves, _ = auto_flatten.flatten_with_path(result)
        outputs = {_out_name(p): (list(v.shape) if isinstance(v, torch.Tensor) else v) for p, v in leaves}
        dtypes = {_out_name(p): str(v.dtype).replace("torch.", "") for p, v in leaves if isinstance(v, torch.Tensor)}
        runs.append({"input_set": label, "inputs": shapes, "outputs": outputs, "output_dtypes": dtypes,
                     "ms": round(ms, 3)})

    def render() -> None:
        from rich.markup import escape
        from rich.table import Table
        method = f" method {args.method}" if args.method else ""
        t = Table(title=f"{args.program}{method} on {'given' if args.input_shapes or args.inputs else 'generated'} "
                        f"inputs", title_justify="left")
        for col in ("input set", "input shapes", "output shapes", "time"):
            t.add_column(col)
        for run in runs:
            shapes = "  ".join(f"{k} {v}" if isinstance(v, list) else f"{k}={v}" for k, v in run["inputs"].items())
            outs = "  ".join(f"{k} {v}" if isinstance(v, list) else f"{k}={v!r}" for k, v in run["outputs"].items())
            t.add_row(escape(run["input_set"]), escape(shapes), escape(outs), f"{run['ms']:.1f} ms")
        console().print(t)
    data = {"program": args.program, **({"method": args.method} if args.method else {}), "runs": runs}
    return emit(args, "run", data, 0, render)


def _leaf_values(inputs, plan) -> list:
    """The value of each int input under a size plan (None for the other inputs)."""
    import sympy

    from ..verification.signature_inputs import IntInput, evaluate
    subs = {s: sympy.Integer(v) for s, v in plan.bindings.items()}
    return [evaluate(leaf.expr, subs) if isinstance(leaf, IntInput) else None for leaf in inputs.leaves]


def _out_name(path) -> str:
    from ..torch_private import pytree
    return "output" + pytree.keystr(path) if path else "output"


# -- verify ----------------------------------------------------------------------------

def verify_command(args) -> int:
    import graphcap
    targets = list(args.targets)
    if args.samples < 0:
        raise UsageError(f"--samples {args.samples}: the number of random input sets cannot be negative.",
                         where="--samples", fix="Give 0 or more, e.g. --samples 5")
    model, example_inputs = None, None
    if len(targets) == 1 and is_factory_spec(targets[0]):
        if args.method:
            raise UsageError("--method picks a method of a saved file of several methods.", where="--method",
                             fix=f"Give the file first: graphcap verify OUT.pt2 {targets[0]} --method {args.method}")
        built = load_factory(targets[0], args.factory_args)
        ep = _export(built, args.strict)
    elif len(targets) == 2 and is_factory_spec(targets[1]) and not is_factory_spec(targets[0]):
        # the factory first: the classes its modules define are then the real ones
        built = load_factory(targets[1], args.factory_args)
        ep = load_program(targets[0], method=args.method, command="verify")
        if args.method:  # the factory's example inputs are forward's; the method's program guides its own
            model = getattr(built.model, args.method, None)
            if not callable(model):
                raise UsageError(f"The factory's model ({type(built.model).__name__}) has no method "
                                 f"{args.method!r} to check the program against.", where=built.where,
                                 fix="Return the model the methods were exported from.")
    else:
        raise UsageError(f"verify takes FILE.py:FACTORY or OUT.pt2 FILE.py:FACTORY, got {' '.join(targets)}.",
                         where="graphcap verify", fix="e.g. graphcap verify model.py:make or graphcap verify "
                                                      "model.pt2 model.py:make")
    if args.report:
        _report_function()
        _writable(args.report, "--report")
    if model is None:
        model, example_inputs = built.model, (built.args, built.kwargs)
    result = graphcap.verify(ep, model, samples=args.samples, rtol=args.rtol, atol=args.atol, seed=args.seed,
                             example_inputs=example_inputs, check_refusals=not args.no_refusals)
    if args.report:
        write_report(ep, args.report, verification=result)
    status = 0 if result.passed else 1

    def render() -> None:
        out = console()
        out.print(result.table(per_output=args.per_output))
        if result.refusals:
            out.print(result.refusal_table())
        from rich.markup import escape
        style = "green" if result.passed else "bold red"
        out.print(f"[{style}]{escape(result.summary())}[/{style}]")
        if args.report:
            out.print(f"Wrote {escape(args.report)}")
    data = {"factory": built.where, **({"method": args.method} if args.method else {}), "summary": result.summary(),
            **result.as_dict()}
    if args.report:
        data["report"] = args.report
    return emit(args, "verify", data, status, render)


# -- diff --------------------------------------------------------------------------------

def diff_command(args) -> int:
    from rich.markup import escape
    from rich.table import Table
    a, b = load_program(args.a, command="diff"), load_program(args.b, command="diff")
    changes = diff_facts(program_facts(a, format_version_of(args.a)), program_facts(b, format_version_of(args.b)))
    data = {"a": args.a, "b": args.b, "same": not changes,
            "changes": [{"section": c.section, "item": c.item, "a": c.before, "b": c.after} for c in changes]}

    def render() -> None:
        out = console()
        if not changes:
            out.print(f"{escape(args.a)} and {escape(args.b)}: same signature, ranges, operators and weights")
            return
        t = Table(title=f"{args.a} -> {args.b}: {len(changes)} difference{'s' if len(changes) != 1 else ''}",
                  title_justify="left")
        for col in ("section", "item", args.a, args.b):
            t.add_column(escape(col))
        for c in changes:
            t.add_row(c.section, escape(c.item), escape(c.before), escape(c.after))
        out.print(t)
    return emit(args, "diff", data, 0 if not changes else 1, render)


# -- report ------------------------------------------------------------------------------

def report_command(args) -> int:
    if not args.output.endswith((".html", ".htm")):
        raise UsageError(f"-o {args.output}: the report is an HTML page.", where="-o/--output",
                         fix=f"Name it .html, e.g. -o {os.path.splitext(args.output)[0]}.html")
    _report_function()
    _writable(args.output)
    ep = load_program(args.program, method=args.method, command="report")
    title = args.title or (f"graphcap report: {os.path.basename(args.program)} method {args.method}"
                           if args.method else None)
    options = {"title": title} if title else {}
    write_report(ep, args.output, **options)
    size = os.path.getsize(args.output)
    data = {"program": args.program, **({"method": args.method} if args.method else {}), "output": args.output,
            "bytes": size}
    return emit(args, "report", data, 0, lambda: console().print(f"Wrote {args.output} ({human_bytes(size)})"))
