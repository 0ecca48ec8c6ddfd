"""``FILE.py:FACTORY`` (or ``package.module:FACTORY``): the model and example inputs a command line names.

FACTORY is a function in FILE.py (or in an importable module, such as
``graphcap.demo:example``) returning ``(model, args)``, ``(model, args,
kwargs)`` or ``(model, args, kwargs, dynamic_shapes)``. Its arguments come
from ``--arg NAME=VALUE`` (VALUE a Python literal read with
``ast.literal_eval``, anything else a string), checked against its signature
before it is called. The file is run as a module of its own (its folder first
on ``sys.path``, so it can import its neighbours); an error in it is reported
with the file's line, not as a traceback.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any, NamedTuple, Optional

from .errors import UsageError


class Factory(NamedTuple):
    model: Any
    args: tuple
    kwargs: dict
    dynamic_shapes: Any
    where: str  # "FILE.py:FACTORY", for messages


def _is_module_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def is_factory_spec(text: str) -> bool:
    """``FILE.py:NAME`` or ``module.name:NAME``, as opposed to a saved program."""
    file, sep, name = text.rpartition(":")
    return bool(sep) and name.isidentifier() and (file.endswith(".py") or _is_module_name(file))


def parse_factory_args(items: list[str]) -> dict[str, Any]:
    """``["depth=4", "name=gpt2"]`` -> ``{"depth": 4, "name": "gpt2"}`` (literals by ast.literal_eval, never eval)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--arg {item!r} is not NAME=VALUE.", where="--arg",
                             fix="Write the factory's parameter name, '=', and the value: --arg depth=4")
        if name in out:
            raise UsageError(f"--arg {name} is given twice.", where="--arg", fix=f"Give --arg {name}=... once.")
        try:
            out[name] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[name] = text  # not a Python literal: the text itself
    return out


def load_factory(spec: str, factory_args: Optional[list[str]] = None) -> Factory:
    factory, path = _find_function(spec)
    kwargs = parse_factory_args(list(factory_args or []))
    _check_arguments(factory, kwargs, spec)
    built = _user_call(factory, spec, path, kwargs)
    return _unpack(built, spec)


def load_samples(spec: str, factory_args: Optional[list[str]] = None) -> list:
    """``--samples FILE.py:SAMPLES``: the list of samples the function returns (each a tuple of args or
    ``(args, kwargs)``), loaded as factories are. It gets those ``--arg`` values its signature names."""
    function, path = _find_function(spec)
    given = parse_factory_args(list(factory_args or []))
    try:
        parameters = inspect.signature(function).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        kwargs = {k: v for k, v in given.items() if takes_any or k in parameters}
    except (TypeError, ValueError):
        kwargs = {}
    _check_arguments(function, kwargs, spec)
    samples = _user_call(function, spec, path, kwargs)
    if isinstance(samples, tuple):
        samples = list(samples)
    if not isinstance(samples, list):
        raise UsageError(f"{spec} returned {type(samples).__name__}, not a list of samples.", where=spec,
                         fix="Return a list with one entry per sample, each a tuple of args or (args, kwargs): "
                             "return [(x_small,), (x_large,)]")
    return samples


def _find_function(spec: str) -> tuple[Any, Path]:
    """The function ``FILE.py:NAME`` (or ``module:NAME``) names, and the file it is in."""
    file, sep, name = spec.rpartition(":")
    if not is_factory_spec(spec):
        raise UsageError(f"'{spec}' does not name a factory function.", where="FILE.py:FACTORY argument",
                         fix="Write the Python file and the function in it, e.g. model.py:make_model "
                             "(or an importable module: graphcap.demo:example).")
    path = Path(file).expanduser()
    if file.endswith(".py"):
        if not path.is_file():
            raise UsageError(f"No such file: {file}", where=spec, fix=_missing_file_fix(path, name))
        module = _run_file(path)
    else:
        module = _import_module(file, spec)
        path = Path(getattr(module, "__file__", "") or file)
    factory = getattr(module, name, None)
    if not callable(factory):
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and getattr(v, "__module__", None) == module.__name__ and not k.startswith("_"))
        close = difflib.get_close_matches(name, defined, n=1)
        raise UsageError(f"{file} has no function named '{name}'.", where=spec,
                         fix=(f"Did you mean {close[0]}? Pass {file}:{close[0]}. " if close else "")
                         + f"The functions it defines: {', '.join(defined) or '(none)'}.")
    return factory, path


def _missing_file_fix(path: Path, name: str) -> str:
    """Where a relative path was looked for, and the Python file of the closest name in that folder."""
    folder = path.parent if str(path.parent) else Path(".")
    fix = "Check the path of the Python file"
    if not path.is_absolute():
        fix += f" (relative paths start from the current folder, {Path.cwd()})"
    try:
        present = sorted(p.name for p in folder.iterdir() if p.suffix == ".py") if folder.is_dir() else []
    except OSError:
        present = []
    close = difflib.get_close_matches(path.name, present, n=1)
    if close:
        fix += f". Did you mean {folder / close[0]}? Pass {folder / close[0]}:{name}"
    return fix + "."


def _definition_line(factory: Any) -> str:
    """``FILE:LINE (def make(depth, width=8))``: where the user's factory is defined."""
    try:
        file, line = inspect.getsourcefile(factory), inspect.getsourcelines(factory)[1]
    except (TypeError, OSError):
        return getattr(factory, "__qualname__", str(factory))
    try:
        signature = str(inspect.signature(factory))
    except (TypeError, ValueError):
        signature = "(...)"
    return f"{file}:{line} (def {getattr(factory, '__name__', 'factory')}{signature})"


def _check_arguments(factory: Any, kwargs: dict[str, Any], spec: str) -> None:
    """The factory's signature accepts ``kwargs`` (else the user's factory is named, and how to pass them)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C function: it will say itself
        return
    try:
        signature.bind(**kwargs)
        return
    except TypeError as e:
        problem = str(e)
    missing = [p.name for p in signature.parameters.values()
               if p.default is inspect.Parameter.empty and p.name not in kwargs
               and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    accepts = [p.name for p in signature.parameters.values()
               if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    unknown = [k for k in kwargs if k not in accepts
               and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())]
    whats, fixes = [], []
    if unknown:
        whats.append(f"{spec} takes no argument named {', '.join(unknown)}.")
        fixes.append(f"Its parameters are: {', '.join(accepts)}." if accepts else
                     "It takes no arguments: drop the --arg options.")
    if missing:
        whats.append(f"{spec} needs the argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                     f"which the command line did not give.")
        fixes.append("Pass " + ("them" if len(missing) > 1 else "it") + " with --arg: "
                     + " ".join(f"--arg {m}=VALUE" for m in missing)
                     + " (VALUE is a Python literal such as 4, 0.5, 'text', (1, 2)), or give "
                     + ("them defaults" if len(missing) > 1 else "it a default") + " in the factory.")
    if not whats:
        whats.append(f"{spec} cannot take these arguments: {problem}.")
        fixes.append("Check the --arg options against its parameters.")
    what, fix = " ".join(whats), " ".join(fixes)
    raise UsageError(what, where=_definition_line(factory), fix=fix)


def _import_module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise UsageError(f"No module named '{name}' (and '{name}' does not end in .py).", where=spec,
                             fix="Give a Python file (model.py:make) or an importable module.") from e
        raise UsageError(f"Importing {name} raised {type(e).__name__}: {e}", where=spec,
                         fix="Fix the import (run with --debug for the whole traceback).") from e
    except Exception as e:
        raise UsageError(f"Importing {name} raised {type(e).__name__}: {e}", where=spec,
                         fix="Fix the module (run with --debug for the whole traceback).") from e


def _run_file(path: Path) -> Any:
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    mod_name = f"graphcap_factory_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"Cannot load {path} as Python.", where=str(path), fix="Give a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(mod_name, None)
        raise UsageError(f"Running {path} raised {type(e).__name__}: {e}", where=_user_line(e, path),
                         fix="Fix the error in the file (run with --debug for the whole traceback).") from e
    return module


def _user_call(factory: Any, spec: str, path: Path, kwargs: dict[str, Any]) -> Any:
    try:
        return factory(**kwargs)
    except Exception as e:
        raise UsageError(f"{spec} raised {type(e).__name__}: {e}", where=_user_line(e, path),
                         fix="Fix the factory (run with --debug for the whole traceback).") from e


def _user_line(e: BaseException, path: Path) -> str:
    """The last line of the traceback that lies in the user's file (else the last line)."""
    frames = traceback.extract_tb(e.__traceback__)
    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}"
    mine = [f for f in frames if Path(f.filename).resolve() == path.resolve()] or \
        [f for f in frames if Path(f.filename).resolve() != Path(__file__).resolve()][-1:] or frames[-1:]
    if not mine:
        return str(path)
    f = mine[-1]
    return f"{f.filename}:{f.lineno}" + (f" ({f.line.strip()})" if f.line else "")


def _unpack(built: Any, spec: str) -> Factory:
    fix = ("Return (model, args), (model, args, kwargs) or (model, args, kwargs, dynamic_shapes), with args a "
           "tuple of example inputs.")
    if not isinstance(built, (tuple, list)) or not 2 <= len(built) <= 4:
        raise UsageError(f"{spec} returned {type(built).__name__}"
                         + (f" of length {len(built)}" if isinstance(built, (tuple, list)) else "")
                         + ", not (model, args[, kwargs[, dynamic_shapes]]).", where=spec, fix=fix)
    model, args = built[0], built[1]
    kwargs: Optional[dict] = built[2] if len(built) > 2 else None
    dynamic_shapes = built[3] if len(built) > 3 else None
    if not callable(model):
        raise UsageError(f"{spec} returned a model of type {type(model).__name__}, which cannot be called.",
                         where=spec, fix=fix)
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        args = (args,)  # one example input given bare
    if kwargs is not None and not isinstance(kwargs, dict):
        raise UsageError(f"{spec} returned kwargs of type {type(kwargs).__name__}, not a dict.", where=spec, fix=fix)
    return Factory(model, args, dict(kwargs or {}), dynamic_shapes, spec)
