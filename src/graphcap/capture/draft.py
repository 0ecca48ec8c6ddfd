"""``draft_export``: export anyway, and report every problem of one run.

``export`` stops at the first thing it cannot prove for every input; a draft
gets past each of them with the example's own values and says what it did:

- The program runs on fake tensors with the example's real tensors
  propagated beside them (``torch_private.real_values``). A question on data
  (``if n > 2`` after ``n = y.item()``) is answered with the real value; the
  answer becomes a runtime assert of the program, so the program refuses data
  that would take the other path (its message names the user's line the
  assumption was made at), and the report gives the ``torch._check`` to add.
- A custom operator without a fake kernel gets its output metadata from a real
  call on the example (each output size a fresh data-dependent size); the
  report names the operator and the ``register_fake`` to add.
- A dynamic_shapes spec the program does not satisfy is refined from the
  error's own suggested fixes (``draft_spec``) and the export runs again; the
  report prints the refined spec.

Everything else is the ordinary pipeline (lifting, signature, guards,
verifier), so the program is an ExportedProgram like any other.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import time
from typing import Any, Optional

import sympy
import torch

from ..errors import ConstraintViolationError, UnsupportedError
from ..program import ExportedProgram
from ..torch_private.ops import OpOverload, schema_of
from ..torch_private.real_values import (
    cross_check_custom_operators_only,
    has_fake_kernel,
    infer_kernels_from_real_mismatches,
    is_builtin_operator,
    keep_real_truth_values_boolean,
    op_profile,
    real_tensor_of,
    real_tensor_propagation,
    watch_real_value_decisions,
)
from ..torch_private.shapes import real_unbacked_values
from ..torch_private.user_specs import draft_report_where_torch_reads_it
from ..trace import fakify
from ..trace.data_checks import unnamed_check, write_check
from . import draft_spec
from .draft_conditions import Decision, record_decision
from .draft_report import ASSUMPTION, DATA_DEPENDENT, MISSING_FAKE_KERNEL, DraftReport, Problem, SourceLine
from .front_ends import run_front_end
from .strict import DRAFT_DECISIONS

# A spec refined this many times and still violated is reported as the export's error.
_MAX_REFINEMENTS = 4


class _Session:
    """One traced attempt: its fake mode (real tensors propagated) and the decisions made on data."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        # custom operators whose fake kernel disagreed with the real one: (operator, reasons, when)
        self.mismatched_kernels: list[tuple[Any, list[str], int]] = []
        self.mode: Any = None
        # one clock for every event of the trace, so the report lists problems in the order met
        self._clock = itertools.count()
        self.decided_at: list[int] = []  # beside decisions
        self.first_call: dict[str, int] = {}  # custom operator overload -> when it was first called

    def build_mode(self, plain: Any) -> Any:
        with real_tensor_propagation():
            mode = plain()
        if mode.shape_env is not None:
            keep_real_truth_values_boolean(mode.shape_env)
            watch_real_value_decisions(mode.shape_env, self._decided)
        cross_check_custom_operators_only(mode, self._mismatched, self._custom_call)
        self.mode = mode
        return mode

    def _decided(self, condition: Any) -> None:
        self.decisions.append(record_decision(condition))
        self.decided_at.append(next(self._clock))

    def _decided_by_dynamo(self, condition: Any, line: Optional[tuple[str, int, str, str]]) -> None:
        """A question strict mode's front end (dynamo) answered with a real value, at the user's line
        it was reading (its frames are not live Python frames: no local names to read)."""
        self.decisions.append(Decision(condition, SourceLine(*line) if line is not None else None))
        self.decided_at.append(next(self._clock))

    def _custom_call(self, op: Any) -> None:
        self.first_call.setdefault(str(op), next(self._clock))

    def _mismatched(self, op: Any, reasons: list[str]) -> None:
        self.mismatched_kernels.append((op, reasons, next(self._clock)))


class _DropRealValueWarnings(logging.Filter):
    """torch logs a warning per question it answers with a real value; the report says it once, better."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("propagate_real_tensors")


@contextlib.contextmanager
def _quiet_real_value_warnings():
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    quiet = _DropRealValueWarnings()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def draft_export(mod: Any, args: tuple, kwargs: Optional[dict[str, Any]] = None, *, dynamic_shapes: Any = None,
                 strict: bool = False, preserve_module_call_signature: tuple[str, ...] = (),
                 prefer_deferred_runtime_asserts_over_guards: bool = False) -> ExportedProgram:
    """Export ``mod`` whenever it runs eagerly on the example; ``ep.report`` lists what was worked around.

    The same arguments as :func:`graphcap.export`. The program is sound for
    every input its signature accepts: an input whose data would take another
    path than the example's is refused at runtime by an assert naming the line.
    """
    started = time.perf_counter()
    with _quiet_real_value_warnings(), infer_kernels_from_real_mismatches():
        ep, session, problems, refined = _export_refining_spec(
            mod, args, kwargs, dynamic_shapes, strict=strict,
            preserve_module_call_signature=preserve_module_call_signature,
            prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards)
    _refuse_unasserted_decisions(session.decisions)
    met = _data_dependent_problems(session.decisions, session.decided_at)
    met += _missing_kernel_problems(ep.graph_module, _example_values(session), session.first_call)
    met += _mismatched_kernel_problems(ep.graph_module, session.mismatched_kernels)
    # the spec refinements came from earlier attempts; the rest in the order the trace met them
    problems += sorted(met, key=lambda p: p.seen_at)
    _name_assumptions_in_asserts(ep.graph_module, session.decisions)
    name = type(mod).__name__ if isinstance(mod, torch.nn.Module) else getattr(mod, "__qualname__", repr(mod))
    ep.report = DraftReport(problems, refined, name)
    ep.report.seconds = time.perf_counter() - started
    draft_report_where_torch_reads_it(ep, ep.report)
    return ep


def _refuse_unasserted_decisions(decisions: list[Decision]) -> None:
    """Refuse a program whose branch on data was taken without the runtime assert that guards it.

    A decision whose condition is the constant false means the shape engine answered a question
    with a value that contradicts the question itself, and deferred an assert that holds for no
    input (torch drops it). The program would then take the example's path for every input, so
    draft_export raises instead of returning it.
    """
    for d in decisions:
        if d.condition is sympy.false or d.condition is False:
            raise UnsupportedError(
                "draft_export could not record the runtime assert for a branch on tensor data: the "
                "condition the example took was recorded as the constant false, so the program would take "
                "the example's path for every input.",
                where=str(d.where) if d.where is not None else None,
                fix="State the condition before that line with torch._check(<condition>) and use "
                    "graphcap.export, or write the branch with torch.cond(pred, true_fn, false_fn, operands).")


def _export_refining_spec(mod: Any, args: tuple, kwargs: Any, spec: Any, **options: Any) \
        -> tuple[ExportedProgram, _Session, list[Problem], Any]:
    """Export with real tensors propagated; a violated spec is refined from its suggested fixes
    and the export runs again. Returns the program, the successful attempt's session, the
    constraint problems met and the refined spec (None when the given one held)."""
    problems: list[Problem] = []
    refined = None
    for attempt in range(_MAX_REFINEMENTS + 1):
        session = _Session()
        token = fakify.MODE_BUILDER.set(session.build_mode)
        dynamo_token = DRAFT_DECISIONS.set(session._decided_by_dynamo)
        try:
            return run_front_end(mod, args, kwargs, dynamic_shapes=spec, **options), session, problems, refined
        except ConstraintViolationError as e:
            if attempt == _MAX_REFINEMENTS or spec is None:
                raise
            keep_symbols = bool(options.get("prefer_deferred_runtime_asserts_over_guards"))
            spec, read_fixes = draft_spec.refine(e, spec, keep_symbols)
            refined = spec
            problems += draft_spec.violation_problems(e, spec, read_fixes, keep_symbols)
        finally:
            DRAFT_DECISIONS.reset(dynamo_token)
            fakify.MODE_BUILDER.reset(token)
    raise AssertionError("unreachable")  # the loop returns or raises


def spelled_symbols(d: Decision) -> set[str]:
    """The u-names left in a decision once written over the user's names."""
    import re
    return set(re.findall(r"\bu\d+\b", d.spelled))


def _data_dependent_problems(decisions: list[Decision], decided_at: list[int]) -> list[Problem]:
    """One problem per (line, condition as the user would write it); a loop counts occurrences.
    The fix is code the user pastes at the line (graphcap.trace.data_checks): a check over the
    user's names, or the line rewritten to name the value it reads from data."""
    grouped: dict[tuple, Problem] = {}
    for d, when in zip(decisions, decided_at):
        where = d.where
        written = write_check(d.condition, d.names, where.filename if where else None,
                              where.lineno if where else None, set(d.taken))
        if written is None:
            check, _ = unnamed_check(d.condition, d.names) if isinstance(d.condition, sympy.Basic) \
                else (f"torch._check({d.spelled})", "")
            words = check[len("torch._check("):-1]
            note = (" (value: the number read from tensor data that the condition depends on; name it "
                    "where it is read, value = t.item(), and write the check right after that line)"
                    if check != f"torch._check({d.spelled})" else "")
            fix = (f"{check}  # before this line, if it always holds for your data; "
                   "if both outcomes happen, use torch.cond")
        else:
            check, words, note = written.check, written.condition, ""
            fix = (f"{check}  # before this line, if it always holds for your data; if both outcomes happen, "
                   f"use torch.cond" if not written.replaces_line else
                   "replace this line with\n" + "\n".join(written.lines) +
                   "\n# if it always holds for your data; if both outcomes happen, use torch.cond")
        key = (where.filename, where.lineno, words) if where is not None else (None, None, words)
        if key in grouped:
            grouped[key].occurrences += 1
            continue
        grouped[key] = Problem(
            DATA_DEPENDENT,
            f"the program branched on {words}, which depends on tensor data; it held on the example, so the "
            f"program takes that path and asserts it at runtime{note}.",
            where, fix,
            details={"condition": str(d.condition), "check": check}, seen_at=when)
    return list(grouped.values())


def _operator_name(op: Any) -> str:
    return schema_of(op).name


def _example_values(session: _Session) -> dict[Any, Any]:
    """Data-dependent symbol -> its value on the example (what the real tensors gave)."""
    return real_unbacked_values(getattr(session.mode, "shape_env", None))


def _custom_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes (of the graph and its subgraphs) that call a custom operator."""
    return [node for mod in gm.modules() if isinstance(mod, torch.fx.GraphModule) for node in mod.graph.nodes
            if node.op == "call_function" and isinstance(node.target, OpOverload)
            and not is_builtin_operator(node.target)]


def _profiles(gm: torch.fx.GraphModule, overload: str) -> set[Any]:
    """torch's operator profiles of every call of ``overload`` in the program (one per distinct
    input/output metadata), which torch's ``unsafe_generate_fake_kernels`` turns into fake kernels."""
    return {op_profile(node) for node in _custom_calls(gm) if str(node.target) == overload}


def _missing_kernel_problems(gm: torch.fx.GraphModule, example: dict[Any, Any],
                             first_call: dict[str, int]) -> list[Problem]:
    """Custom operators called without a fake kernel: their output metadata came from the real call."""
    seen: dict[str, Problem] = {}
    for node in _custom_calls(gm):
        op = node.target
        if has_fake_kernel(op):
            continue
        name = _operator_name(op)
        if name in seen:
            seen[name].occurrences += 1
            continue
        seen[name] = Problem(
            MISSING_FAKE_KERNEL,
            f"custom operator {name} has no fake kernel; its outputs' metadata came from a real call on the "
            f"example ({_real_outputs(node, example)}), with each output size a data-dependent size checked at "
            f"runtime.",
            _node_source_line(node),
            _register_fake_snippet(op, node),
            details={"operator": name, "overload": str(op), "profiles": _profiles(gm, str(op))},
            seen_at=first_call.get(str(op), len(first_call)))
    return list(seen.values())


def _mismatched_kernel_problems(gm: torch.fx.GraphModule, mismatches: list[tuple[Any, list[str], int]]) \
        -> list[Problem]:
    """Custom operators whose fake kernel disagreed with the real call (the real call's metadata was
    used): one problem per operator and disagreement, with the fake-tensor engine's reason."""
    grouped: dict[tuple[str, str], Problem] = {}
    for op, reasons, when in mismatches:
        name = _operator_name(op)
        for reason in reasons or ["its outputs' metadata differ from the real kernel's"]:
            if (name, reason) in grouped:
                grouped[(name, reason)].occurrences += 1
                continue
            grouped[(name, reason)] = Problem(
                ASSUMPTION,
                f"the fake kernel of custom operator {name} disagrees with its real kernel on the example "
                f"({reason}); the program uses the real call's metadata, with each size a data-dependent "
                f"size checked at runtime.",
                None,
                f"Fix the fake kernel registered for {name} (torch.library.register_fake(\"{name}\")) so "
                f"its outputs match the real kernel's.",
                details={"operator": name, "overload": str(op), "mismatched_fake_kernel": True, "reason": reason,
                         "profiles": _profiles(gm, str(op))},
                seen_at=when)
    return list(grouped.values())


def _real_outputs(node: torch.fx.Node, example: dict[Any, Any]) -> str:
    """The outputs' dtypes and sizes on the example: ``float32[4, 3]``."""
    vals = node.meta.get("val")
    vals = vals if isinstance(vals, (list, tuple)) else [vals]
    parts = []
    for v in vals:
        real = real_tensor_of(v) if isinstance(v, torch.Tensor) else None
        t = real if real is not None else v
        if isinstance(t, torch.Tensor):
            sizes = []
            for d in t.shape:
                expr = getattr(getattr(d, "node", None), "expr", None)
                value = expr.xreplace(example) if expr is not None else d
                sizes.append(int(value) if getattr(value, "is_number", True) else str(d))
            parts.append(f"{str(t.dtype).replace('torch.', '')}{sizes}")
    return ", ".join(parts) or "no tensor outputs"


def _register_fake_snippet(op: Any, node: torch.fx.Node) -> str:
    schema = schema_of(op)
    params = ", ".join(a.name for a in schema.arguments)
    first_tensor = next((a.name for a in schema.arguments if str(a.type).startswith("Tensor")), None)
    body = (f"return {first_tensor}.new_empty(...)  # the outputs' shapes, computed from the inputs' shapes"
            if first_tensor else "return torch.empty(...)  # the outputs' shapes and dtypes")
    return (f"@torch.library.register_fake(\"{schema.name}\")\n"
            f"def _({params}):\n"
            f"    {body}")


def _node_source_line(node: torch.fx.Node) -> Optional[SourceLine]:
    """The last frame of a node's stack trace (the user's line that called the operator)."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line for line in trace.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        text = lines[i].strip()
        if text.startswith('File "'):
            try:
                file = text.split('"')[1]
                lineno = int(text.split(", line ")[1].split(",")[0])
                fn = text.split(", in ")[1] if ", in " in text else ""
            except (IndexError, ValueError):
                return None
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return SourceLine(file, lineno, fn, code)
    return None


def _assert_expr(node: torch.fx.Node) -> Any:
    cond = node.args[0] if node.args else None
    val = cond.meta.get("val") if isinstance(cond, torch.fx.Node) else None
    return getattr(getattr(val, "node", None), "expr", None)


def _decision_for(expr: Any, decisions: list[Decision]) -> Optional[Decision]:
    """The decision a runtime assert checks: the same condition, else one over the same symbols
    (a range assert ``u0 >= 3`` that ``u0 > 2`` implied)."""
    if not isinstance(expr, sympy.Basic) or not expr.free_symbols:
        return None
    symbols = expr.free_symbols
    exact = [d for d in decisions if d.condition == expr]
    same = [d for d in decisions if getattr(d.condition, "free_symbols", None) == symbols]
    wider = [d for d in decisions if symbols <= getattr(d.condition, "free_symbols", set())]
    for group in (exact, same, wider):
        if group:
            return group[0]
    return None


def _name_assumptions_in_asserts(gm: torch.fx.GraphModule, decisions: list[Decision]) -> None:
    """Reword the runtime asserts that check a draft decision: the message says what was assumed and
    where, so data taking the other path is refused with the user's line."""
    if not decisions:
        return
    for mod in gm.modules():
        if not isinstance(mod, torch.fx.GraphModule):
            continue
        changed = False
        for node in mod.graph.nodes:
            if node.op != "call_function" or node.target is not torch.ops.aten._assert_scalar.default:
                continue
            d = _decision_for(_assert_expr(node), decisions)
            if d is None:
                continue
            w = d.where
            where = (f' at File "{w.filename}", line {w.lineno}, in {w.function}' + (f" ({w.code})" if w.code else "")
                     if w is not None else "")
            msg = (f"{node.args[1]}: draft_export assumed {d.spelled}, which held on the example{where}; "
                   f"this input's data takes another path, which the program does not contain. "
                   f"Add torch.cond there, or export with an example that takes this path.")
            node.args = (node.args[0], msg, *node.args[2:])
            changed = True
        if changed:
            mod.recompile()
