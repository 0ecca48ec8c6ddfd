"""The ``graphcap`` command: export, inspect, run, verify, diff and report programs from the shell.

    graphcap export FILE.py:FACTORY -o OUT.pt2 [--arg NAME=VALUE] [--strict | --draft | --chain] [--report OUT.html]
                    [--infer-shapes (--samples FILE.py:SAMPLES | --sample-input 'NAME=SHAPE ...')...]
    graphcap inspect OUT.pt2 [--graph] [--method NAME]
    graphcap run OUT.pt2 [--samples N] [--input NAME=2x3:float32] [--inputs FILE.safetensors] [--method NAME]
    graphcap verify FILE.py:FACTORY | OUT.pt2 FILE.py:FACTORY [--samples N] [--rtol R] [--atol A] [--method NAME]
    graphcap diff A.pt2 B.pt2
    graphcap report OUT.pt2 -o OUT.html [--method NAME]
    graphcap completion bash|zsh

Every command takes ``--json`` (one JSON document on stdout, for CI) and
``--debug`` (the Python traceback of an error). The exit statuses are in
:data:`EXIT_STATUSES` (and docs/cli.md). This module imports no torch: the
parser, ``--help``, ``--version`` and ``completion`` answer at once; a command
imports what it needs when it runs.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, Optional

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_UNEXPECTED = 4
EXIT_INTERRUPTED = 130

EXIT_STATUSES = {
    EXIT_OK: "success (verify: every input set matches eager and every wrong input is refused; "
             "diff: the programs are the same)",
    EXIT_CHECK_FAILED: "a check failed: verify found a difference from eager or a wrong input that was not "
                       "refused; diff found a difference",
    EXIT_USAGE: "the arguments cannot be used: unknown option, no such file, no such factory, a factory "
                "that returns something else or needs an argument not given, a bad --input",
    EXIT_ERROR: "graphcap could not do it and says why: the model cannot be exported, the file cannot be "
                "loaded (damaged, other format), the program refused the inputs",
    EXIT_UNEXPECTED: "an exception graphcap did not expect (raised by the model's own code, or a bug in "
                     "graphcap); --debug shows its traceback",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}

COMMANDS = ("export", "inspect", "run", "verify", "diff", "report", "completion")


class CommandLineUsage(Exception):
    """argparse's complaint about the arguments (exit status 2), raised before torch is imported;
    laid out as graphcap's errors are: what, where, how to fix."""

    def __init__(self, what: str, where: str, fix: str):
        super().__init__(f"{what}\nWhere: {where}\nHow to fix: {fix}")
        self.what, self.where, self.fix = what, where, fix


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors raised (exit status 2 and graphcap's wording). It keeps the
    arguments declared on it (``declared``) and its commands (``commands``: name -> (parser, help)),
    which the completion scripts are written from."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.declared: list[argparse.Action] = []
        self.commands: dict[str, tuple[argparse.ArgumentParser, str]] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.declared.append(action)
        return action

    def error(self, message: str):
        raise CommandLineUsage(f"{message}.", self.prog, f"See '{self.prog} --help'.")


def _json_given_a_file(argv: list[str]) -> None:
    """``--json out.json``: --json takes no file (it prints on stdout); say so instead of argparse's
    'unrecognized arguments'."""
    for option, value in zip(argv, argv[1:]):
        if option == "--json" and value.endswith(".json"):
            raise CommandLineUsage(f"--json takes no file name ({value}): it prints the JSON document on stdout.",
                                   "--json", f"Redirect stdout: graphcap ... --json > {value}")


class _Version(argparse.Action):
    """``--version``: graphcap's version from the package metadata (and torch's), without importing torch."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def version_line() -> str:
    from .versions import installed_version
    mine = installed_version("graphcap")
    torch_version = installed_version("torch")
    return f"graphcap {mine or 'unknown (no package metadata: not installed)'}" + \
        (f" (torch {torch_version})" if torch_version else "")


def _exit_status_epilog() -> str:
    return "exit status:\n" + "\n".join(f"  {code:<4}{text}" for code, text in EXIT_STATUSES.items())


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document on stdout instead of tables (errors too: "
                        "{\"ok\": false, \"error\": ...})")


def _add_factory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", dest="factory_args",
                   help="an argument for FACTORY (repeatable); VALUE is a Python literal "
                        "(4, 0.5, True, None, 'text', (1, 2)) read with ast.literal_eval, "
                        "anything else is a string")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphcap", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Export PyTorch programs, inspect, run, verify, compare and report them.",
                     epilog=_exit_status_epilog() + "\n\nSee docs/cli.md for the whole reference.")
    _add_common(parser)
    parser.add_argument("--version", action=_Version, help="print graphcap's version (and torch's) and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help, **kwargs)
        _add_common(p)
        p.add_argument("--import", dest="import_modules", action="append", default=[], metavar="MODULE",
                       help="import MODULE before loading programs, so the classes their structure names "
                            "(e.g. transformers outputs) are the real ones rather than stand-in records; "
                            "may be repeated")
        parser.commands[name] = (p, help)
        return p

    p = command("export", help="export FILE.py:FACTORY to a .pt2 file",
                description="Export the model FACTORY returns (model, args[, kwargs[, dynamic_shapes]]) "
                            "and save the program.")
    p.add_argument("factory", metavar="FILE.py:FACTORY")
    _add_factory_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.pt2", help="where to write the program")
    way = p.add_mutually_exclusive_group()
    p.declared += [
        way.add_argument("--strict", action="store_true", help="export with strict=True"),
        way.add_argument("--draft", action="store_true",
                         help="draft export (graphcap.draft_export): export anyway, and print what it assumed"),
        way.add_argument("--chain", action="store_true",
                         help="the capture chain (graphcap.capture): try --strategies in order, keep the first "
                              "verified program"),
    ]
    p.add_argument("--strategies", default="non_strict,strict,draft", metavar="A,B,...",
                   help="with --chain: the strategies to try, in order (default non_strict,strict,draft)")
    p.add_argument("--report", metavar="OUT.html", help="also write the HTML report")
    p.add_argument("--infer-shapes", action="store_true",
                   help="infer dynamic_shapes from the example and the samples (--samples, --sample-input) "
                        "and print the spec as code")
    p.add_argument("--samples", metavar="FILE.py:SAMPLES", dest="samples_factory",
                   help="with --infer-shapes: a function returning a list of samples, each a tuple of args or "
                        "(args, kwargs)")
    p.add_argument("--sample-input", action="append", default=[], metavar="'NAME=SHAPE[:DTYPE] ...'",
                   dest="sample_inputs",
                   help="with --infer-shapes: one sample of random tensors of these sizes (e.g. 'x=2x3x224x224'; "
                        "items separated by spaces, parameters not named keep the example's values); repeatable")
    p.set_defaults(handler="export_command")

    p = command("inspect", help="show a saved program's signature, ranges, operators, weights",
                description="Show a saved program: signature, range constraints, operator histogram, "
                            "weight sizes and format version.")
    p.add_argument("program", metavar="OUT.pt2")
    p.add_argument("--graph", action="store_true", help="also print the program's graph")
    p.add_argument("--method", metavar="NAME", default=None,
                   help="a file of several methods (graphcap.export_methods): show this method "
                        "(without it: list the methods)")
    p.set_defaults(handler="inspect_command")

    p = command("run", help="run a saved program on generated or given inputs",
                description="Run a saved program and print the output shapes: on inputs generated "
                            "inside its ranges, or with the sizes (--input) or the tensors (--inputs) "
                            "you give.")
    p.add_argument("program", metavar="OUT.pt2")
    p.add_argument("--samples", type=int, default=2, metavar="N",
                   help="random input sets after the example's sizes (default 2; 0 or more)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE[:DTYPE]", dest="input_shapes",
                   help="run once on random data of this shape (e.g. x=2x3x224x224 or x=2x3x224x224:float16; "
                        "'scalar' for a 0-d tensor; an int input takes its value: n=5); repeatable, the "
                        "inputs not named get sizes that agree with these")
    p.add_argument("--inputs", metavar="FILE.safetensors",
                   help="run once on these tensors (a safetensors file keyed by input name, as 'graphcap "
                        "inspect' names them; inputs not in it are generated)")
    p.add_argument("--method", metavar="NAME", default=None,
                   help="a file of several methods (graphcap.export_methods): run this method")
    p.set_defaults(handler="run_command")

    p = command("verify", help="check a program against its eager model",
                description="Check the program against the eager model across its dynamic range "
                            "(exporting FILE.py:FACTORY first when no .pt2 is given). Exit 0 when "
                            "everything matches, 1 when something differs.")
    p.add_argument("targets", nargs="+", metavar="[OUT.pt2] FILE.py:FACTORY")
    _add_factory_args(p)
    p.add_argument("--samples", type=int, default=5, metavar="N", help="random input sets (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default per dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default per dtype)")
    p.add_argument("--strict", action="store_true", help="export with strict=True")
    p.add_argument("--per-output", action="store_true", help="one table row per output")
    p.add_argument("--no-refusals", action="store_true", help="skip the checks that wrong inputs are refused")
    p.add_argument("--report", metavar="OUT.html", help="also write the HTML report with the verification")
    p.add_argument("--method", metavar="NAME", default=None,
                   help="with OUT.pt2 of several methods (graphcap.export_methods): check this method "
                        "against the factory model's method of the same name")
    p.set_defaults(handler="verify_command")

    p = command("diff", help="what changed between two saved programs",
                description="Compare two saved programs: signature, ranges, operators, weights. "
                            "Exit 0 when they are the same, 1 when they differ.")
    p.add_argument("a", metavar="A.pt2")
    p.add_argument("b", metavar="B.pt2")
    p.set_defaults(handler="diff_command")

    p = command("report", help="write the HTML report of a saved program",
                description="Write the self-contained HTML report of a saved program "
                            "(graphcap.report).")
    p.add_argument("program", metavar="OUT.pt2")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html", help="where to write the page")
    p.add_argument("--title", default=None, help="the page's title (default: the program's name)")
    p.add_argument("--method", metavar="NAME", default=None,
                   help="a file of several methods (graphcap.export_methods): the method to describe")
    p.set_defaults(handler="report_command")

    p = command("completion", help="print a shell completion script",
                description="Print the completion script for bash or zsh. Load it with\n"
                            "  eval \"$(graphcap completion bash)\"    (in ~/.bashrc)\n"
                            "  eval \"$(graphcap completion zsh)\"     (in ~/.zshrc)",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(handler="completion_command")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, as_json = "--debug" in argv, "--json" in argv
    if debug:  # torch's own log records (kernel tracebacks, shape-engine notes) are shown too
        from ..torch_logs import show_torch_logs
        show_torch_logs(True)
    try:
        _json_given_a_file(argv)
        parser = build_parser()
        args = parser.parse_args(argv)
        args.json, args.debug = as_json, debug  # before or after the command: a subcommand's defaults would reset them
        if getattr(args, "handler", None) is None:
            if as_json:
                raise CommandLineUsage("No command given.", "graphcap", "Name a command: " + ", ".join(COMMANDS) + ".")
            parser.print_help()
            return EXIT_USAGE
        if args.handler == "completion_command":  # no torch, no graphcap modules
            from .completion import completion_script
            script = completion_script(parser, args.shell)
            if args.json:
                print(json.dumps({"ok": True, "command": "completion", "exit_status": EXIT_OK, "shell": args.shell,
                                  "script": script}, indent=1))
            else:
                print(script, end="")
            return EXIT_OK
        from . import commands
        commands.LOAD_IMPORTS[:] = getattr(args, "import_modules", [])
        return int(getattr(commands, args.handler)(args))
    except CommandLineUsage as e:
        return _report_error(e, debug, as_json, EXIT_USAGE)
    except KeyboardInterrupt:
        print("graphcap: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`graphcap inspect x.pt2 | head`): stop quietly
        _silence_stdout()
        return EXIT_OK
    except Exception as e:  # graphcap's errors, the user's code, or a bug: still one message
        status, unexpected = _status_of(e)
        return _report_error(e, debug, as_json, status, unexpected=unexpected)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush of a closed pipe raises nothing."""
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _status_of(e: BaseException) -> tuple[int, bool]:
    """The exit status of an exception, and whether graphcap expected it (only then is it its own message)."""
    from ..errors import GraphcapError
    from .errors import UsageError
    if isinstance(e, UsageError):
        return EXIT_USAGE, False
    if isinstance(e, GraphcapError):
        return EXIT_ERROR, False
    return EXIT_UNEXPECTED, True


def _report_error(e: BaseException, debug: bool, as_json: bool, status: int, unexpected: bool = False) -> int:
    if debug:
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    text = str(e) if not unexpected else f"{type(e).__name__}: {e}"
    print(f"graphcap: error: {text}", file=sys.stderr)
    if not debug and status != EXIT_USAGE:
        print("(run with --debug for the Python traceback)", file=sys.stderr)
    if as_json:
        error: dict[str, Any] = {"type": type(e).__name__, "message": text}
        for part in ("what", "where", "fix"):
            if getattr(e, part, None) is not None:
                error[part] = str(getattr(e, part))
        print(json.dumps({"ok": False, "exit_status": status, "error": error}, indent=1))
    return status


def entry_point() -> None:
    """The console script: ``graphcap ...``."""
    raise SystemExit(main())
