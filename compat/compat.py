"""Run PyTorch's own export tests against graphcap and hold the result to a ratchet.

The suite lives in ``../shared/torch_suite`` (torch's ``test_export.py`` with a
plugin that routes torch.export's entry points to graphcap); it is run from
there, never copied. Two files here say what to expect:

- ``torch_passes.txt``: the tests torch.export itself passes (torch 2.14.1 on
  this machine; ``make compat-reference`` regenerates it). Only these count:
  a test torch fails or skips says nothing about graphcap.
- ``known_differences.txt``: the tests graphcap decides not to pass, one per
  line as ``TEST | CATEGORY | reason``. Categories name the cause (an open
  issue such as strict mode, or a deliberate difference from torch).

``python compat/compat.py`` prints how many of torch's passing tests graphcap
passes and the failures grouped by cause. ``--check`` turns it into the CI
ratchet: it fails when a counted test fails without being listed (a
regression, or a new difference that needs a reason) and when a listed test
passes (the list must shrink with the work).
"""
from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = ROOT.parent / "shared" / "torch_suite"
TORCH_PASSES = HERE / "torch_passes.txt"
KNOWN = HERE / "known_differences.txt"


def read_known(path: Path = KNOWN) -> dict[str, tuple[str, str]]:
    """``test id -> (category, reason)``; every line must carry both."""
    known: dict[str, tuple[str, str]] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise SystemExit(f"{path}:{lineno}: expected `TEST | CATEGORY | reason`, got {line!r}")
        test, category, reason = parts
        if test in known:
            raise SystemExit(f"{path}:{lineno}: {test} is listed twice")
        known[test] = (category, reason)
    return known


def read_list(path: Path) -> list[str]:
    return [s for s in (ln.strip() for ln in path.read_text().splitlines()) if s and not s.startswith("#")]


def run_suite(mode: str, outdir: Path, python: str, extra: list[str]) -> Path:
    """Run the shared suite in ``mode`` (graphcap or torch); returns its junit file."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PY=python)
    cmd = ["bash", str(SUITE / "run.sh"), mode, str(outdir), *extra]
    print(f"running torch's export tests with {mode} (about 2-3 minutes) ...", flush=True)
    # run.sh prints pytest's summary of every test (those torch fails too); say what it is, so
    # it is not read as this project's own test result
    done = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"the suite's own pytest summary, all {mode} tests of the file counted: {summary}", flush=True)
    junit = outdir / f"junit_{mode}.xml"
    if not junit.exists():
        raise SystemExit(f"the suite wrote no {junit}; see {outdir}/log_{mode}.txt")
    return junit


def read_junit(path: Path) -> dict[str, tuple[str, str]]:
    """``test id -> (outcome, first line of the failure)`` with ids like ``TestExport::test_x``."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = case.get("classname").split(".")[-1] + "::" + case.get("name")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = (child.get("message") or child.text or "").strip().splitlines()[0:1]
                message = message[0] if message else ""
            elif child.tag == "skipped":
                outcome = "skipped"
        results[test] = (outcome, message)
    return results


def _cause(message: str) -> str:
    """A failure message reduced to a groupable cause: exception type and shape of the text."""
    text = re.sub(r"\s+", " ", message)[:120]
    text = re.sub(r"\b\d+\b", "N", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    return text


def strict_tests(suite: Path = SUITE / "test_export.py") -> set[str]:
    """The suite's tests that export with ``strict=True`` (read from their source)."""
    source = suite.read_text()
    found = set()
    for cls in ast.parse(source).body:
        if isinstance(cls, ast.ClassDef):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test") \
                        and re.search(r"strict\s*=\s*True", ast.get_source_segment(source, fn) or ""):
                    found.add(f"{cls.name}::{fn.name}")
    return found


def report(results: dict[str, tuple[str, str]], torch_passes: list[str],
           known: dict[str, tuple[str, str]]) -> int:
    """Print the figures and the grouped failures; return the number of ratchet violations."""
    counted = [t for t in torch_passes if t in results]
    missing = [t for t in torch_passes if t not in results]
    passed = [t for t in counted if results[t][0] == "passed"]
    failed = [t for t in counted if results[t][0] != "passed"]
    unlisted = [t for t in failed if t not in known]
    fixed = [t for t in known if t in results and results[t][0] == "passed"]
    stale = [t for t in known if t not in results]

    by_category = collections.Counter(known[t][0] for t in failed if t in known)
    strict = strict_tests()
    non_strict = [t for t in counted if t not in strict]
    non_strict_passed = [t for t in non_strict if results[t][0] == "passed"]
    strict_counted = [t for t in counted if t in strict]
    strict_passed = [t for t in strict_counted if results[t][0] == "passed"]
    print()
    print(f"torch.export passes {len(torch_passes)} of these tests; graphcap passes "
          f"{len(passed)} of them ({100 * len(passed) / max(len(torch_passes), 1):.1f}%).")
    print(f"Without the strict=True tests (issue 10 counts them apart): {len(non_strict_passed)} of "
          f"{len(non_strict)} ({100 * len(non_strict_passed) / max(len(non_strict), 1):.1f}%); "
          f"strict=True tests: {len(strict_passed)} of {len(strict_counted)}.")
    if by_category:
        print("\nListed differences that still fail, by category:")
        for category, n in by_category.most_common():
            print(f"  {n:4d}  {category}")
    if unlisted:
        groups = collections.defaultdict(list)
        for t in unlisted:
            groups[_cause(results[t][1])].append(t)
        print(f"\n{len(unlisted)} failures not on the list, grouped by cause:")
        for cause, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  [{len(tests)}] {cause}")
            for t in sorted(tests):
                print(f"       {t}")
    if fixed:
        print(f"\n{len(fixed)} listed tests now pass: remove them from {KNOWN.name}:")
        for t in sorted(fixed):
            print(f"       {t}")
    if stale:
        print(f"\n{len(stale)} listed tests are not in the suite any more: remove them:")
        for t in sorted(stale):
            print(f"       {t}")
    if missing:
        print(f"\n{len(missing)} of torch's passing tests did not run (collection problem?):")
        for t in missing[:20]:
            print(f"       {t}")
    return len(unlisted) + len(fixed) + len(stale) + len(missing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", type=Path, default=ROOT / "build" / "compat")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--junit", type=Path, help="read this junit file instead of running the suite")
    parser.add_argument("--check", action="store_true", help="exit 1 on any ratchet violation (CI)")
    parser.add_argument("--reference", action="store_true",
                        help=f"run the suite with torch.export and rewrite {TORCH_PASSES.name}")
    args, extra = parser.parse_known_args(argv)

    if args.reference:
        junit = run_suite("torch", args.outdir, args.python, extra)
        passes = sorted(t for t, (outcome, _) in read_junit(junit).items() if outcome == "passed")
        import torch
        TORCH_PASSES.write_text(f"# tests torch.export passes (torch {torch.__version__}); "
                                f"regenerate with `make compat-reference`\n" + "\n".join(passes) + "\n")
        print(f"{len(passes)} tests written to {TORCH_PASSES}")
        return 0

    junit = args.junit or run_suite("graphcap", args.outdir, args.python, extra)
    violations = report(read_junit(junit), read_list(TORCH_PASSES), read_known())
    if args.check and violations:
        print(f"\ncompat ratchet: {violations} violation(s) (see above).")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
