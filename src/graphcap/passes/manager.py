"""Run passes in order, verifying the IR after each one.

A pass is a function ``ExportedProgram -> ExportedProgram``. After every pass
the program is checked against the verifier's rules for its IR level; when
one breaks it, the error names that pass and the ones that ran before it, so
a broken invariant is traced to the pass that broke it, not found later.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import VerificationError
from ..ir_checks import violations

if TYPE_CHECKING:
    from ..program import ExportedProgram

PassFn = Callable[["ExportedProgram"], "ExportedProgram"]


@dataclass(frozen=True)
class Pass:
    name: str
    fn: PassFn


def run_passes(ep: ExportedProgram, passes: Sequence[Pass]) -> ExportedProgram:
    done: list[str] = []
    for p in passes:
        ep = p.fn(ep)
        found = violations(ep)
        if found:
            lines = "\n".join(f"  [{rule}] node {node}: {msg}" for rule, node, msg in found)
            before = ", ".join(done) if done else "none"
            raise VerificationError(
                f"Pass {p.name!r} left a program that breaks {len(found)} IR invariant(s):\n{lines}",
                where=f"after pass {p.name!r} (passes run before it: {before})",
                fix=f"The program was valid before {p.name!r}; the bug is in that pass (or in a "
                    "custom decomposition it ran). The rule names the invariant (graphcap/ir_checks.py).")
        done.append(p.name)
    return ep
