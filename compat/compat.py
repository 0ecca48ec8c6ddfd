"""Run PyTorch's own export tests against graphcap and hold the result to a ratchet.

The suite lives in ``../shared/torch_suite`` (torch's export test files with a
plugin that routes torch.export's entry points to graphcap); it is run from
there, never copied. ``test_export.py`` is held to a list of every failure:

- ``torch_passes.txt``: the tests of ``test_export.py`` torch.export itself
  passes (torch 2.14.1 on this machine; ``make compat-reference`` regenerates
  it). Only these count: a test torch fails or skips says nothing about graphcap.
- ``known_differences.txt``: the tests graphcap decides not to pass, one per
  line as ``TEST | CATEGORY | reason``. Categories name the cause (an open
  issue such as strict mode, or a deliberate difference from torch). Tests of
  the other files are named ``FILE::Class::test``.

Every other file of the suite is held to the tests graphcap passed on it:

- ``torch_passes/<file>.txt``: what torch.export passes there (the figures).
- ``known_passes/<file>.txt``: what graphcap passed there when the list was
  last recorded (``--record`` adds new passes; nothing removes one but an edit
  a reviewer sees).

``python compat/compat.py`` prints, per file, how many of torch's passing tests
graphcap passes and the failures grouped by cause. ``--check`` turns it into
the CI ratchet: it fails when a counted test of ``test_export.py`` fails
without being listed (a regression, or a new difference that needs a reason),
when a known pass of another file fails, when a test passes that its list does
not hold yet (record it: the lists follow the work), and when a listed
difference passes (the list must shrink with the work).
"""
from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = ROOT.parent / "shared" / "torch_suite"
TORCH_PASSES = HERE / "torch_passes.txt"
KNOWN = HERE / "known_differences.txt"
TORCH_PASSES_DIR = HERE / "torch_passes"
KNOWN_PASSES_DIR = HERE / "known_passes"
MAIN_FILE = "test_export.py"  # held to known_differences.txt (every failure listed)


def suite_files() -> list[str]:
    """Every test file of the suite, in the order run.sh runs them."""
    return sorted(p.name for p in SUITE.glob("test_*.py"))


def listed_files() -> list[str]:
    """The files the ratchet holds: test_export.py and every file with a known-passes list."""
    return [f for f in suite_files() if f == MAIN_FILE or (KNOWN_PASSES_DIR / f"{Path(f).stem}.txt").exists()]


def chosen_files(spec: str | None) -> list[str]:
    """The files a run covers: ``listed`` (the default: those the ratchet holds), ``all``, or
    names separated by spaces or commas."""
    if not spec or spec == "listed":
        return listed_files()
    if spec == "all":
        return suite_files()
    names = [n if n.endswith(".py") else n + ".py" for n in re.split(r"[\s,]+", spec.strip()) if n]
    unknown = [n for n in names if not (SUITE / n).exists()]
    if unknown:
        raise SystemExit(f"not in {SUITE}: {', '.join(unknown)} (known: {', '.join(suite_files())})")
    return names


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


def junit_path(outdir: Path, file: str, mode: str) -> Path:
    """Where run.sh writes one file's results (``OUTDIR/<file stem>/junit_<mode>.xml``)."""
    return outdir / Path(file).stem / f"junit_{mode}.xml"


def run_suite(mode: str, outdir: Path, python: str, extra: list[str], files: list[str]) -> dict[str, Path]:
    """Run ``files`` of the shared suite in ``mode`` (graphcap or torch), one pytest process per
    file; returns each file's junit file."""
    outdir.mkdir(parents=True, exist_ok=True)
    junits = {}
    for file in files:
        env = dict(os.environ, PY=python, FILES=file)
        cmd = ["bash", str(SUITE / "run.sh"), mode, str(outdir), *extra]
        print(f"running {file} of torch's export tests with {mode} ...", flush=True)
        started = time.monotonic()
        done = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        # run.sh prints pytest's summary of every test (those torch fails too); say what it is, so
        # it is not read as this project's own test result
        print(f"  the suite's own pytest summary ({time.monotonic() - started:.0f} s), all {mode} tests of "
              f"the file counted: {summary}", flush=True)
        junit = junit_path(outdir, file, mode)
        if not junit.exists():
            raise SystemExit(f"the suite wrote no {junit}; see {junit.parent}/log_{mode}.txt")
        junits[file] = junit
    return junits


def xdist_args(workers: str) -> list[str]:
    """pytest's arguments for ``--workers``: none for 0 (one process runs a file in its order), else
    pytest-xdist's ``-n`` with ``--dist loadscope``: each test class runs whole, in the file's order,
    in one process, so a test meets the same predecessors in every run (torch's own process-wide
    state, e.g. an operator's dispatch cache that a test patches by hand, makes a few tests depend
    on what ran before them; docs/torch-suite.md)."""
    workers = str(workers).strip()
    if workers in ("", "0"):
        return []
    if workers != "auto" and not workers.isdigit():
        raise SystemExit(f"--workers takes a number of processes or 'auto', got {workers!r}")
    return ["-n", workers, "--dist", "loadscope"]


def test_id(file: str, classname: str, name: str) -> str:
    """``Class::test`` for test_export.py (as its lists always named them), ``FILE::Class::test`` else."""
    short = classname.split(".")[-1] + "::" + name
    return short if file == MAIN_FILE else f"{file}::{short}"


def read_junit(path: Path, file: str = MAIN_FILE) -> dict[str, tuple[str, str]]:
    """``test id -> (outcome, first line of the failure)``, ids as :func:`test_id` names them."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = test_id(file, case.get("classname"), case.get("name"))
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


def report_file(file: str, results: dict[str, tuple[str, str]], torch_passes: list[str],
                known_passes: list[str], known: dict[str, tuple[str, str]]) -> int:
    """One file other than test_export.py: its figures, the known passes that now fail, the new
    passes to record and the listed differences that pass; returns the number of violations."""
    counted = [t for t in torch_passes if t in results]
    passed = [t for t in counted if results[t][0] == "passed"]
    if torch_passes:
        print(f"\n{file}: torch.export passes {len(torch_passes)} of its tests; graphcap passes {len(passed)} of "
              f"them ({100 * len(passed) / len(torch_passes):.1f}%).")
    else:
        print(f"\n{file}: graphcap passes {sum(o == 'passed' for o, _ in results.values())} of its "
              f"{len(results)} tests (torch's figures are not recorded).")
    regressed = [t for t in known_passes if results.get(t, ("missing", ""))[0] != "passed"]
    listed = set(known_passes)
    new = sorted(t for t, (outcome, _) in results.items() if outcome == "passed" and t not in listed)
    mine = {t: v for t, v in known.items() if t.startswith(file + "::")}
    fixed = sorted(t for t in mine if results.get(t, ("", ""))[0] == "passed")
    stale = sorted(t for t in mine if t not in results)
    listed_failing = collections.Counter(v[0] for t, v in mine.items() if results.get(t, ("", ""))[0] == "failed")
    if listed_failing:
        print("  listed differences that still fail: " + ", ".join(f"{n} {c}" for c, n in listed_failing.items()))
    unexplained = [t for t in counted if results[t][0] != "passed" and t not in mine]
    if unexplained:
        groups = collections.defaultdict(list)
        for t in unexplained:
            groups[_cause(results[t][1])].append(t)
        print(f"  {len(unexplained)} of torch's passing tests fail, grouped by cause:")
        for cause, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"    [{len(tests)}] {cause}")
            for t in sorted(tests)[:8]:
                print(f"         {t}")
            if len(tests) > 8:
                print(f"         ... and {len(tests) - 8} more")
    if regressed:
        print(f"  {len(regressed)} known passes fail now (regressions; {KNOWN_PASSES_DIR.name}/{Path(file).stem}.txt):")
        for t in regressed:
            print(f"         {t}: {results.get(t, ('did not run', ''))[1] or results.get(t, ('did not run',))[0]}")
    if new:
        print(f"  {len(new)} tests pass that {KNOWN_PASSES_DIR.name}/{Path(file).stem}.txt does not hold yet: "
              f"record them (compat/compat.py --record):")
        for t in new:
            print(f"         {t}")
    for what, tests in (("now pass: remove them from", fixed),
                        ("are not in the suite any more: remove them from", stale)):
        if tests:
            print(f"  {len(tests)} listed differences {what} {KNOWN.name}:")
            for t in tests:
                print(f"         {t}")
    return len(regressed) + len(new) + len(fixed) + len(stale)


def record_passes(file: str, results: dict[str, tuple[str, str]]) -> int:
    """Add the tests that passed to the file's known passes (none is removed); returns how many."""
    path = KNOWN_PASSES_DIR / f"{Path(file).stem}.txt"
    old = read_list(path) if path.exists() else []
    passes = sorted(set(old) | {t for t, (outcome, _) in results.items() if outcome == "passed"})
    import torch
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"# tests of {file} graphcap passes (torch {torch.__version__}); the ratchet holds each; "
                    f"`compat/compat.py --record` adds new ones\n" + "\n".join(passes) + "\n")
    return len(passes) - len(old)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", type=Path, default=ROOT / "build" / "compat")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--junit", type=Path, help="read this junit file of test_export.py instead of running it")
    parser.add_argument("--results", type=Path,
                        help="read the junit files of an earlier run.sh run with FILES=... (OUTDIR/<file>/) "
                             "instead of running the suite")
    parser.add_argument("--files", default=os.environ.get("COMPAT_FILES", "listed"),
                        help="the suite files to run: 'listed' (default; env COMPAT_FILES: test_export.py and "
                             "every file with a known-passes list), 'all', or names, e.g. "
                             "'test_export.py test_verifier.py'")
    parser.add_argument("--workers", default="0",
                        help="spread each file's tests over this many pytest-xdist processes ('auto': one per "
                             "core; 0, the default: one process per file, in the file's order)")
    parser.add_argument("--check", action="store_true", help="exit 1 on any ratchet violation (CI)")
    parser.add_argument("--record", action="store_true",
                        help=f"add the tests that passed to {KNOWN_PASSES_DIR.name}/<file>.txt (files other "
                             f"than {MAIN_FILE})")
    parser.add_argument("--reference", action="store_true",
                        help=f"run the suite with torch.export and rewrite {TORCH_PASSES.name} and "
                             f"{TORCH_PASSES_DIR.name}/<file>.txt")
    args, extra = parser.parse_known_args(argv)
    files = chosen_files(args.files)
    extra = xdist_args(args.workers) + extra

    if args.reference:
        junits = ({f: junit_path(args.results, f, "torch") for f in files} if args.results
                  else run_suite("torch", args.outdir, args.python, extra, files))
        import torch
        for file, junit in junits.items():
            passes = sorted(t for t, (outcome, _) in read_junit(junit, file).items() if outcome == "passed")
            target = TORCH_PASSES if file == MAIN_FILE else TORCH_PASSES_DIR / f"{Path(file).stem}.txt"
            target.parent.mkdir(exist_ok=True)
            target.write_text(f"# tests of {file} torch.export passes (torch {torch.__version__}); "
                              f"regenerate with `make compat-reference`\n" + "\n".join(passes) + "\n")
            print(f"{len(passes)} tests written to {target}")
        return 0

    if args.junit:
        junits = {MAIN_FILE: args.junit}
    elif args.results:
        junits = {f: junit_path(args.results, f, "graphcap") for f in files}
        absent = [str(j) for j in junits.values() if not j.exists()]
        if absent:
            raise SystemExit(f"--results {args.results}: no results for {', '.join(absent)} (run.sh graphcap "
                             f"{args.results} with FILES=... writes them; or pick files with --files)")
    else:
        junits = run_suite("graphcap", args.outdir, args.python, extra, files)
    known = read_known()
    violations = 0
    for file, junit in junits.items():
        results = read_junit(junit, file)
        if file == MAIN_FILE:
            print(f"\n{file}:")
            violations += report(results, read_list(TORCH_PASSES),
                                 {t: v for t, v in known.items() if ".py::" not in t})
            continue
        if args.record:
            print(f"{file}: {record_passes(file, results)} new passes recorded")
        torch_list = TORCH_PASSES_DIR / f"{Path(file).stem}.txt"
        known_list = KNOWN_PASSES_DIR / f"{Path(file).stem}.txt"
        if not torch_list.exists():
            print(f"\n{file}: {TORCH_PASSES_DIR.name}/{torch_list.name} is missing (make compat-reference "
                  f"COMPAT_FILES={file} records what torch passes there)", end="")
        violations += report_file(file, results, read_list(torch_list) if torch_list.exists() else [],
                                  read_list(known_list) if known_list.exists() else [], known)
    left_out = [f for f in suite_files() if f not in listed_files()]
    if left_out:
        print(f"\nNot held by the ratchet yet (no {KNOWN_PASSES_DIR.name}/ list; `make compat-record "
              f"COMPAT_FILES=FILE` records one): {', '.join(left_out)}")
    if args.check and violations:
        print(f"\ncompat ratchet: {violations} violation(s) (see above).")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
