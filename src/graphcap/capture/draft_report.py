"""The report ``graphcap.draft_export`` attaches to its program (``ep.report``).

One run of draft_export finds every problem that would have stopped
``export`` and works around each: a data-dependent question decided with the
example's real value (and asserted at runtime), a dynamic_shapes spec refined
from its own suggested fixes, a custom operator's output metadata taken from a
real call. The report lists them so the user can make the program exportable
for real: each problem has its kind, the user's source line (the first frame
outside torch and graphcap; library code such as torchvision counts as the
user's) and the exact fix to apply there.

It is data first (``report.problems``, ``report.as_data()``) and prints
itself (``print(ep.report)``).
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Optional

DATA_DEPENDENT = "data_dependent"
CONSTRAINT_VIOLATION = "constraint_violation"
MISSING_FAKE_KERNEL = "missing_fake_kernel"
ASSUMPTION = "assumption"

class FailureType(enum.IntEnum):
    """A problem's kind under torch's draft-export names and numbers, for code written against
    torch (``report.failures[0].failure_type == FailureType.DATA_DEPENDENT_ERROR``); an
    ``IntEnum``, so it equals torch's member of the same name."""

    MISSING_FAKE_KERNEL = 1
    DATA_DEPENDENT_ERROR = 2
    GUARD_ADDED = 3
    MISMATCHED_FAKE_KERNEL = 4

    def __str__(self) -> str:
        return self.name


_FAILURE_TYPES = {
    MISSING_FAKE_KERNEL: FailureType.MISSING_FAKE_KERNEL,
    DATA_DEPENDENT: FailureType.DATA_DEPENDENT_ERROR,
    CONSTRAINT_VIOLATION: FailureType.GUARD_ADDED,
    ASSUMPTION: FailureType.GUARD_ADDED,
}

_TITLES = {
    DATA_DEPENDENT: "Data-dependent guard decided with the example's values",
    CONSTRAINT_VIOLATION: "Constraint violation: the dynamic_shapes spec was refined",
    MISSING_FAKE_KERNEL: "Custom operator without a fake kernel",
    ASSUMPTION: "Assumption",
}


@dataclass
class SourceLine:
    """A user's source line: file, line number, function and the code on it."""

    filename: str
    lineno: int
    function: str = ""
    code: str = ""

    def as_frame(self) -> dict[str, Any]:
        """The line as torch's draft report writes a stack frame."""
        return {"filename": self.filename, "line": self.lineno, "name": self.function, "loc": self.code}

    def __str__(self) -> str:
        text = f'File "{self.filename}", line {self.lineno}'
        if self.function:
            text += f", in {self.function}"
        return text + (f"\n    {self.code}" if self.code else "")


@dataclass
class Problem:
    """One problem draft_export worked around.

    ``kind`` is one of ``data_dependent``, ``constraint_violation``,
    ``missing_fake_kernel`` or ``assumption``; ``fix`` is the code to add (a
    ``torch._check(...)``, a refined spec, a ``register_fake``); ``occurrences``
    counts how often the same problem met the same line (a loop).
    """

    kind: str
    message: str
    where: Optional[SourceLine]
    fix: str
    occurrences: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    seen_at: int = 0  # when the trace met it (the report lists problems in that order)

    @property
    def failure_type(self) -> FailureType:
        """The kind under torch's draft-export name (``FailureType.DATA_DEPENDENT_ERROR``, ...)."""
        if self.details.get("mismatched_fake_kernel"):
            return FailureType.MISMATCHED_FAKE_KERNEL
        return _FAILURE_TYPES.get(self.kind, FailureType.GUARD_ADDED)

    @property
    def data(self) -> dict[str, Any]:
        """The details under the keys torch's report uses, with graphcap's own.

        ``op``: the operator overload as torch names it (``"mylib.foo.default"``, the key of
        ``op_profiles``); ``expr`` and ``result``: the condition decided and its outcome;
        ``occurrences``: how often the trace met it; ``user_stack``: the user's frame as torch's
        frame dicts (``filename``, ``line``, ``name``, ``loc``; ``report.str_to_filename`` maps
        the filename to itself, so torch's helpers that look it up work); ``stack``: the
        framework frames (none: graphcap reports only the user's); ``new_dynamic_shapes``: the
        refined spec of a constraint problem; ``reason``: what went wrong.
        """
        out = {k: v for k, v in self.details.items() if k != "refined_spec"}
        if "overload" in out or "operator" in out:
            out.setdefault("op", out.get("overload", out.get("operator")))
        if "condition" in out:
            out.setdefault("expr", out["condition"])
            out.setdefault("result", "True")  # the condition recorded is the outcome the example took
        if "refined_spec" in self.details:
            out.setdefault("new_dynamic_shapes", self.details["refined_spec"])
            out.setdefault("expr", self.message)  # the guard the spec did not allow, in words
        out.setdefault("occurrences", self.occurrences)
        out.setdefault("user_stack", [self.where.as_frame()] if self.where is not None else [])
        out.setdefault("stack", [])
        out.setdefault("frame_locals", None)
        out.setdefault("reason", self.message)
        return out

    xfail = False  # torch's report marks expected failures; graphcap reports none as expected

    def as_data(self) -> dict[str, Any]:
        objects = ("profiles", "refined_spec")  # Python objects, given as text: the data stays JSON-ready
        plain = dataclasses.replace(self, details={k: v for k, v in self.details.items() if k not in objects})
        out = dataclasses.asdict(plain)
        if "profiles" in self.details:  # torch's OpProfile objects
            out["details"]["profiles"] = sorted(str(p) for p in self.details["profiles"])
        out["where"] = dataclasses.asdict(self.where) if self.where is not None else None
        return out

    def __str__(self) -> str:
        times = f" (x{self.occurrences})" if self.occurrences > 1 else ""
        lines = [f"{_TITLES.get(self.kind, self.kind)}{times}: {self.message}"]
        if self.where is not None:
            lines.append("  at " + str(self.where).replace("\n", "\n  "))
        lines.append("  fix: " + self.fix.replace("\n", "\n       "))
        return "\n".join(lines)


@dataclass
class DraftReport:
    """Every problem of one draft_export run, in the order they were met.

    ``refined_dynamic_shapes`` is the spec the program was exported with when
    the given one had to be refined (else None). ``successful()`` is True when
    there was nothing to work around: the program is what ``export`` would give.

    Attributes:
        problems: the :class:`Problem` list (also under torch's name, ``failures``);
            ``of_kind(kind)`` filters it, ``as_data()`` gives it as plain dicts.
        refined_dynamic_shapes: the refined spec, or None.
        program_name: the captured module's class (or function) name.
        seconds: how long the draft export took.

    Raises:
        nothing: it is plain data, built by :func:`graphcap.draft_export`.

    Example:
        >>> report = graphcap.draft_export(model, args).report
        >>> if not report.successful():
        ...     print(report)
        >>> data_dependent = report.of_kind("data_dependent")
    """

    problems: list[Problem] = field(default_factory=list)
    refined_dynamic_shapes: Any = None
    program_name: str = ""
    seconds: float = 0.0  # how long the draft export took

    @property
    def failures(self) -> list[Problem]:
        """The problems, under the name torch's draft-export report uses."""
        return self.problems

    def successful(self) -> bool:
        return not self.problems

    @property
    def str_to_filename(self) -> dict[str, str]:
        """torch's table from the ``filename`` of a ``user_stack`` frame to the file's path; graphcap's
        frames hold the path itself, so the table maps each path to itself."""
        return {f["filename"]: f["filename"] for p in self.problems for f in p.data["user_stack"]}

    def apply_suggested_fixes(self) -> None:
        """Refuses, as torch's report does: the fixes are edits of the user's source (a
        ``torch._check`` at a line, a ``register_fake``) or a refined spec to pass to ``export``;
        the error lists each with its line."""
        fixes = "\n\n".join(f"{i}. {p.where or 'anywhere'}:\n{p.fix}" for i, p in enumerate(self.problems, 1))
        raise NotImplementedError(
            "draft_export does not edit your code; apply each fix by hand, then export with "
            "graphcap.export()" + (f":\n\n{fixes}" if fixes else " (there is nothing to fix)."))

    @property
    def op_profiles(self) -> dict[str, set[Any]]:
        """Custom operator overload (``"mylib.foo.default"``) -> torch's ``OpProfile`` of each of its
        calls (input and output ranks, dtypes, devices, layouts), for the operators without (or with
        wrong) fake kernels: what ``torch._library.fake_profile.unsafe_generate_fake_kernels`` takes
        to register fake kernels while the program is decomposed or re-traced."""
        out: dict[str, set[Any]] = {}
        for p in self.problems:
            overload = p.details.get("overload")
            if overload and (p.kind == MISSING_FAKE_KERNEL or p.details.get("mismatched_fake_kernel")):
                out.setdefault(overload, set()).update(p.details.get("profiles", ()))
        return out

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def as_data(self) -> list[dict[str, Any]]:
        return [p.as_data() for p in self.problems]

    def __str__(self) -> str:
        name = f" of {self.program_name}" if self.program_name else ""
        if not self.problems:
            return f"draft_export{name}: no problems; the program is what export() gives.\n"
        head = (f"draft_export{name}: {len(self.problems)} problem(s) worked around. The program is sound "
                f"for inputs like the example; apply the fixes to export it with graphcap.export().")
        body = "\n\n".join(f"{i}. {p}" for i, p in enumerate(self.problems, 1))
        return f"{head}\n\n{body}\n"

    __repr__ = __str__
