"""The ``graphcap`` command: export, inspect, run, verify and diff programs from the shell.

    graphcap export FILE.py:FACTORY -o OUT.pt2 [--strict] [--report OUT.html]
    graphcap inspect OUT.pt2 [--graph]
    graphcap run OUT.pt2 [--samples N]
    graphcap verify FILE.py:FACTORY | OUT.pt2 FILE.py:FACTORY [--samples N] [--rtol R] [--atol A]
    graphcap diff A.pt2 B.pt2

Exit status: 0 success (verify: everything matches; diff: no difference), 1 a
program differs from eager, cannot be exported or run (diff: the programs
differ), 2 the arguments cannot be used. Errors are graphcap's messages (what,
where, how to fix); ``--debug`` adds the Python traceback.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Optional

from ..errors import GraphcapError
from .errors import UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors raised (exit status 2 and graphcap's wording)."""

    def error(self, message: str):
        raise UsageError(f"{message}.", where=f"{self.prog}", fix=f"See '{self.prog} --help'.")


def build_parser() -> argparse.ArgumentParser:
    from . import commands
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    common.add_argument("--import", dest="import_modules", action="append", default=[], metavar="MODULE",
                        help="import MODULE before loading programs, so the classes their structure names "
                             "(e.g. transformers outputs) are the real ones rather than stand-in records; "
                             "may be repeated")
    parser = _Parser(prog="graphcap", parents=[common],
                     description="Export PyTorch programs, inspect, run, verify and compare them.",
                     epilog="Exit status: 0 success, 1 a program differs / cannot be exported or run, "
                            "2 unusable arguments.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("export", parents=[common], help="export FILE.py:FACTORY to a .pt2 file",
                       description="Export the model FACTORY returns (model, args[, kwargs[, dynamic_shapes]]) "
                                   "and save the program.")
    p.add_argument("factory", metavar="FILE.py:FACTORY")
    p.add_argument("-o", "--output", required=True, metavar="OUT.pt2", help="where to write the program")
    p.add_argument("--strict", action="store_true", help="export with strict=True")
    p.add_argument("--report", metavar="OUT.html", help="also write the HTML report")
    p.set_defaults(handler=commands.export_command)

    p = sub.add_parser("inspect", parents=[common], help="show a saved program's signature, ranges, operators, weights",
                       description="Show a saved program: signature, range constraints, operator histogram, "
                                   "weight sizes and format version.")
    p.add_argument("program", metavar="OUT.pt2")
    p.add_argument("--graph", action="store_true", help="also print the program's graph")
    p.set_defaults(handler=commands.inspect_command)

    p = sub.add_parser("run", parents=[common], help="run a saved program on generated inputs",
                       description="Run a saved program on inputs generated inside its ranges and print the "
                                   "output shapes.")
    p.add_argument("program", metavar="OUT.pt2")
    p.add_argument("--samples", type=int, default=2, metavar="N", help="random input sets after the example's "
                                                                       "sizes (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=commands.run_command)

    p = sub.add_parser("verify", parents=[common], help="check a program against its eager model",
                       description="Check the program against the eager model across its dynamic range "
                                   "(exporting FILE.py:FACTORY first when no .pt2 is given). Exit 0 when "
                                   "everything matches, 1 when something differs.")
    p.add_argument("targets", nargs="+", metavar="[OUT.pt2] FILE.py:FACTORY")
    p.add_argument("--samples", type=int, default=5, metavar="N", help="random input sets (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default per dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default per dtype)")
    p.add_argument("--strict", action="store_true", help="export with strict=True")
    p.add_argument("--per-output", action="store_true", help="one table row per output")
    p.add_argument("--no-refusals", action="store_true", help="skip the checks that wrong inputs are refused")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.add_argument("--report", metavar="OUT.html", help="also write the HTML report with the verification")
    p.set_defaults(handler=commands.verify_command)

    p = sub.add_parser("diff", parents=[common], help="what changed between two saved programs",
                       description="Compare two saved programs: signature, ranges, operators, weights. "
                                   "Exit 0 when they are the same, 1 when they differ.")
    p.add_argument("a", metavar="A.pt2")
    p.add_argument("b", metavar="B.pt2")
    p.set_defaults(handler=commands.diff_command)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help()
            return EXIT_USAGE
        from . import commands
        commands.LOAD_IMPORTS[:] = getattr(args, "import_modules", [])
        return int(args.handler(args))
    except UsageError as e:
        return _report_error(e, debug, EXIT_USAGE)
    except GraphcapError as e:
        return _report_error(e, debug, EXIT_FAILED)
    except KeyboardInterrupt:
        print("graphcap: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the user's code, or a bug: still one message, traceback on --debug
        return _report_error(e, debug, EXIT_FAILED, unexpected=True)


def _report_error(e: BaseException, debug: bool, status: int, unexpected: bool = False) -> int:
    if debug:
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    text = str(e) if not unexpected else f"{type(e).__name__}: {e}"
    print(f"graphcap: error: {text}", file=sys.stderr)
    if not debug and status != EXIT_USAGE:
        print("(run with --debug for the Python traceback)", file=sys.stderr)
    return status


def entry_point() -> None:
    """The console script: ``graphcap ...``."""
    raise SystemExit(main())
