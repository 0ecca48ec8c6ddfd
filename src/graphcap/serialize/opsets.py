"""Operator-set versions in a .pt2 file, and the arguments torch.export's save/load take about them.

A file records, per operator namespace, the version of the operator set its
program was written against: ``aten`` is always this process's ATen operator
version (it grows when an ATen operator's meaning changes), and the user may
add versions of their own namespaces (``save(ep, f, opset_version={"mylib": 3})``).
A program loaded from a file keeps what the file recorded (``ep.opset_version``),
so saving it again keeps the user's namespaces; ``aten`` is written anew by
the process that saves, whose operators the loaded graph now calls (every
operator's schema was checked against this process's as it loaded).

``load(f, expected_opset_version={...})`` states what the caller's code was
written for; ``aten``, unless named, is this process's ATen version, as
torch.export's loader fills it. A file whose recorded version of a namespace
is newer than the expected one is refused: its operators may mean something
the caller's code (or this torch) does not know. An older or equal version loads, as torch.export's design
brings older operator sets forward: the ATen version has been 10 on every
torch graphcap supports (2.10 to 2.15), so no graphcap file needs an operator
rewritten, and every load refuses an operator whose schema differs from this
process's. A namespace the file does not record (and every file written
before format 5) makes no claim, so there is nothing to refuse.

torch 2.14 accepts both arguments and uses neither (its ``save`` drops
``opset_version`` and records only ``aten``; its ``load`` never compares), so
code written for it runs here unchanged unless the file is in fact newer than
what that code says it expects.

``pickle_protocol`` is accepted for code written for torch.export's ``save``;
graphcap's format holds no pickle, so it changes nothing, but a value torch's
pickler would refuse is refused here too.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ..errors import SerializationError
from ..torch_private.ops import max_operator_version

_NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the highest pickle protocol of every Python graphcap supports (src/graphcap never imports the
# pickle module; tests/unit/test_serialize_opset_versions.py checks the number against Python's)
HIGHEST_PICKLE_PROTOCOL = 5


def checked_versions(given: Any, *, argument: str, call: str) -> dict[str, int]:
    """``given`` (a mapping namespace -> version, or None) as a plain dict; refuse anything else."""
    if given is None:
        return {}
    example = f'{argument}={{"aten": {max_operator_version()}, "mylib": 1}}'
    if not isinstance(given, Mapping):
        raise SerializationError(
            f"{argument} maps operator namespaces to versions; got a {type(given).__name__}.",
            where=f"{call}({argument}=...)", fix=f"Pass a dict, e.g. {example}.")
    out: dict[str, int] = {}
    for namespace, version in given.items():
        if not (isinstance(namespace, str) and _NAMESPACE.match(namespace)):
            raise SerializationError(
                f"{argument} has the key {namespace!r}, which is not an operator namespace "
                f"(a name like 'aten' or 'mylib', as in torch.ops.mylib).",
                where=f"{call}({argument}=...)", fix=f"Use namespace names as keys, e.g. {example}.")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise SerializationError(
                f"{argument}[{namespace!r}] is {version!r}; an operator-set version is an int >= 0.",
                where=f"{call}({argument}=...)", fix=f"Give each namespace a whole number, e.g. {example}.")
        out[namespace] = version
    return out


def versions_to_write(ep: Any, given: Optional[Mapping[str, Any]], *, call: str) -> dict[str, int]:
    """What a file written now records: this process's ``aten``, the namespaces the program was
    loaded with (``ep.opset_version``), then the caller's ``opset_version`` (which wins)."""
    versions = {"aten": max_operator_version()}
    carried = getattr(ep, "opset_version", None) or {}
    versions.update({ns: v for ns, v in carried.items() if ns != "aten"})
    versions.update(checked_versions(given, argument="opset_version", call=call))
    return dict(sorted(versions.items()))


def expected_versions(given: Any) -> dict[str, int]:
    """What a load compares the file with: the caller's ``expected_opset_version``, and ``aten`` as this
    process's ATen version where the caller does not name it (torch.export's loader fills it the same way)."""
    expected = checked_versions(given, argument="expected_opset_version", call="graphcap.load")
    expected.setdefault("aten", max_operator_version())
    return expected


def check_expected(recorded: Optional[Mapping[str, int]], expected: Mapping[str, int], *, entry: str,
                   given: Optional[Mapping[str, Any]] = None) -> None:
    """Refuse a file recording a namespace's version newer than expected (module docstring). ``given``: what
    the caller passed, to tell its expectations from this process's own ATen version."""
    if not recorded:
        return
    for namespace, wanted in expected.items():
        found = recorded.get(namespace)
        if type(found) is not int:
            if found is None:
                continue
            raise SerializationError(  # checked before the schema is: say what it holds here
                f"The file records the {namespace!r} operator-set version as {found!r:.40}, not an integer.",
                where=f"{entry}: opset_version[{namespace!r}]",
                fix="The file is damaged or was crafted; save the program again with graphcap.save.")
        if found <= wanted:
            continue
        if namespace == "aten" and "aten" not in (given or {}):
            raise SerializationError(
                f"The file's program was written against version {found} of ATen's operator set; this "
                f"process's torch has version {wanted}, whose operators may not mean what the file's did.",
                where=f"{entry}: opset_version['aten']",
                fix=f"Load it with a torch whose ATen operator version is {found} or newer (the one that saved "
                    f"it), or, if the program's operators are known to mean the same here, pass "
                    f"expected_opset_version={{'aten': {found}}}.")
        raise SerializationError(
            f"The file's program was written against version {found} of the {namespace!r} operator set; "
            f"the caller expects version {wanted} (expected_opset_version), and a newer operator set may "
            f"give its operators meanings the caller's code was not written for.",
            where=f"{entry}: opset_version[{namespace!r}]",
            fix=f"Load it with expected_opset_version={{{namespace!r}: {found}}} if your code supports that "
                f"version, or save the program again from a process with {namespace!r} version {wanted}.")


def check_pickle_protocol(protocol: Any, *, call: str) -> None:
    """Accept what torch.export's ``save`` accepts for ``pickle_protocol`` (unused: no pickle is written)."""
    if protocol is None:
        return
    if not isinstance(protocol, int):
        raise SerializationError(
            f"pickle_protocol is a {type(protocol).__name__}; torch's pickler takes an int.",
            where=f"{call}(pickle_protocol=...)",
            fix="Leave pickle_protocol out: graphcap's file holds no pickle, so it has no effect.")
    if protocol > HIGHEST_PICKLE_PROTOCOL:
        raise SerializationError(
            f"pickle_protocol={protocol} is higher than Python's pickle supports "
            f"({HIGHEST_PICKLE_PROTOCOL}); torch's own save refuses it too.",
            where=f"{call}(pickle_protocol=...)",
            fix="Leave pickle_protocol out: graphcap's file holds no pickle, so it has no effect.")
