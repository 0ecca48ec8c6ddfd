"""Strict mode's refusals: dynamo's errors and reported side effects, in graphcap's words.

A graph break names the user's line and dynamo's own explanation of the
construct, and stays an instance of the exception dynamo raised. A store into a
global or a closed-over variable (dynamo leaves it out of the program, as in
torch.export's strict mode) is a warning with the variable's name (not
dynamo's source path) and the line that makes it.
"""
from __future__ import annotations

import inspect
import os
import re
import sys
import types
from typing import Any, Optional

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .. import device_advice
from ..errors import StrictCaptureError
from ..torch_private import dynamo as dynamo_private
from ..torch_private import messages
from ..torch_private.modules import (
    BUFFER_REGISTRY,
    HOOK_FIELD_PREFIXES,
    MODULE_REGISTRY,
    PARAMETER_REGISTRY,
    buffers_of,
    children_of,
    hook_functions,
    parameters_of,
)
from ..trace.control_flow.control_flow_errors import cond_dense_stride_refusal
from ..trace.data_dependent import explain_at_line
from ..user_frames import is_user_file, user_stacklevel

ENTRY_NAME = "graphcap_strict_entry"  # the function strict capture hands to dynamo (graphcap.capture.strict)


def explain_refusal(e: BaseException, target: Any) -> StrictCaptureError:
    """dynamo refused the program: say which construct, at which line of the user's, and the way out."""
    frames = dynamo_private.user_stack_of(e)
    # dynamo's user stack runs into torch's own modules (nn.Linear.forward): name the user's line
    users = [f for f in frames if is_user_file(f.filename)]
    frames = users or frames
    where = None
    if frames:
        f = frames[-1]
        where = f'File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line.strip()}" if f.line else "")
    if where is None:
        where = messages.dynamo_user_code_frame(e, skip=ENTRY_NAME)
    names = messages.dynamo_side_effect_sources(e)
    if names is not None:
        return side_effect_error(e, names, target, where)
    guard = _data_dependent_guard(e)
    if guard is not None:  # a branch on data: the check or torch.cond that non-strict export would suggest
        f = frames[-1] if frames else None
        told = explain_at_line(guard, target.name, where, {}, f.filename if f else None,
                               f.lineno if f else None, set())
        return StrictCaptureError.like(
            e, f"strict=True: dynamo failed to capture {target.name}: {told.what}", where=where, fix=told.fix)
    if dynamo_private.is_graph_break(e) and messages.is_data_dependent_branch(e):
        return StrictCaptureError.like(
            e, f"strict=True cannot capture {target.name} in one graph (a graph break): "
               f"{messages.dynamo_explanation(e)}",
            where=where,
            fix="A Python branch on a tensor's value cannot be exported as it is, strict or not: export "
                "records one path through the code. If both outcomes can happen, write the branch with "
                "torch.cond(pred, true_fn, false_fn, operands) or torch.where(pred, a, b). If the condition "
                "always holds for your data, state it with torch._check: export with strict=False, whose "
                "error writes the lines to put at this one.")
    if dynamo_private.is_graph_break(e):
        return StrictCaptureError.like(
            e, f"strict=True cannot capture {target.name} in one graph (a graph break): "
               f"{messages.dynamo_explanation(e)}",
            where=where,
            fix="Rewrite the line so dynamo can trace it (torch.cond for data-dependent branches, "
                "torch._check for assumptions on values), or export with strict=False, which runs "
                "the Python as it is.")
    if messages.is_cond_dense_stride_refusal(e):  # strict=False is refused the same way
        what, fix = cond_dense_stride_refusal()
        return StrictCaptureError.like(e, f"strict=True: dynamo failed to capture {target.name}: {what}",
                                       where=where, fix=fix)
    devices = messages.two_devices(e)
    if devices is not None:  # strict=False would refuse the same tensors
        fix = device_advice.device_mismatch_fix(devices, getattr(target, "root", None))
    else:
        fix = "Export with strict=False, which runs the Python as it is."
    return StrictCaptureError.like(
        e, f"strict=True: dynamo failed to capture {target.name}: {messages.dynamo_explanation(e)}",
        where=where, fix=fix)


def _data_dependent_guard(e: BaseException) -> Optional[GuardOnDataDependentSymNode]:
    """The guard on a value read from data that made dynamo refuse, found in ``e``'s causes."""
    seen: set[int] = set()
    cause: Optional[BaseException] = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, GuardOnDataDependentSymNode):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def is_outside_state(source: str) -> bool:
    """Whether dynamo's source of a changed object is a global or a closed-over variable of the
    user's code (warned of), rather than the module, its attributes, the inputs, or the state of an
    installed library (transformers sets and resets its own module globals inside forward):
    changes dynamo leaves out of the program, as torch.export's strict mode does."""
    if "__closure__" in source or "cell_contents" in source:
        return True
    if not source.startswith("G["):
        return False
    imported = re.match(r"G\[['\"]__import_([\w]+)['\"]\]", source)
    if imported is None:
        return True  # a global of the exported function's own module
    module = sys.modules.get(imported.group(1).replace("_dot_", "."))
    if _is_library_module(module):
        return False
    # the user's global naming an installed library's module (`import torch.nn.utils.parametrize as
    # P`; `P.cached()` sets and resets its own flag): that library's state
    named = re.match(r"G\[['\"]__import_\w+['\"]\]\.(\w+)$", source)
    return not (named and _is_library_module(getattr(module, named.group(1), None)))


def _is_library_module(module: Any) -> bool:
    if not isinstance(module, types.ModuleType):
        return False
    path = os.path.abspath(getattr(module, "__file__", None) or "")
    return any(part in path.split(os.sep) for part in ("site-packages", "dist-packages"))


def side_effect_error(e: Optional[BaseException], names: list[str], target: Any,
                       where: Optional[str]) -> StrictCaptureError:
    readable = [_readable_source(n, target) for n in names]
    what = (f"strict=True refuses {target.name}: it changes state outside the program "
            f"({', '.join(readable)}); an exported program cannot repeat that change when it runs.")
    where = _line_touching(target, readable) or where
    fix = ("Return the value instead of storing it in a global or a closed-over variable; or export "
           "with strict=False, which runs that Python once while tracing.")
    if e is None:
        return StrictCaptureError(what, where=where, fix=fix)
    return StrictCaptureError.like(e, what, where=where, fix=fix)


def warn_side_effects(names: list[str], target: Any) -> None:
    """The program leaves out a store into a global or closed-over object (dynamo does not replay
    it, as in torch.export's strict mode, so the object is left as it was): say so, in the user's
    names and with the line, as a UserWarning, and export."""
    import warnings
    readable = [_readable_source(n, target) for n in names]
    line = _line_touching(target, readable)
    warnings.warn(
        f"strict=True: {target.name} changes state outside the program ({', '.join(readable)})"
        + (f" at\n  {line}\n" if line else "; ")
        + "the exported program leaves that change out (it runs without it, and the export left "
          "the objects as they were). To keep the value, return it from forward, or register a "
          "buffer and update it in place.", UserWarning, stacklevel=user_stacklevel())


_CALLED_MODULE = re.compile(r"L\[['\"]call['\"]\](?:\.__self__)?")
_SOURCE_STEP = re.compile(rf"\.{MODULE_REGISTRY}\[['\"]([^'\"]+)['\"]\]|\.__dict__\[['\"](\w+)['\"]\]|\.(\w+)|(\[.*)$")
_HOOK_AND_STATE_DICT_FIELDS = (*HOOK_FIELD_PREFIXES, "_state_dict", "_load_state_dict")
_HOOK_CELL = re.compile(
    rf"L\[['\"]call['\"]\]((?:\.{MODULE_REGISTRY}\[['\"][^'\"]+['\"]\])*)\.(\w+)\[list\(dict\.keys\(.*\)\)\[(\d+)\]\]"
    r"\.__closure__\[(\d+)\]\.cell_contents(.*)$")
_REGISTER_CALLS = {BUFFER_REGISTRY: "register_buffer", PARAMETER_REGISTRY: "register_parameter"}


def module_attribute_writes(names: list[str], target: Any) -> list[str]:
    """The attributes of the exported module (``self.cache``, ``self.sub.hist``) that dynamo reports
    forward changing (``L['call'].hist``, ``L['call']._modules['sub']``): dynamo leaves them out of
    its graph, as torch's strict export does. dynamo names an object, not what changed in it: for a
    module object itself, the attributes its forward assigns are read from forward's source; a
    buffer or parameter table is a write graphcap keeps (a buffer given a new value), but for a
    ``register_buffer`` / ``register_parameter`` call in forward."""
    root = getattr(target, "root", None)
    found: list[str] = []
    for name in names:
        called = _CALLED_MODULE.match(name)
        if called is None or root is None or "__closure__" in name:
            continue
        mod, path, attr, rest, pos = root, "self", None, "", called.end()
        while pos < len(name):
            step = _SOURCE_STEP.match(name, pos)
            if step is None:
                break
            pos = step.end()
            sub, table, plain, tail = step.groups()
            child = children_of(mod).get(sub) if sub is not None and attr is None else None
            if isinstance(child, torch.nn.Module):
                mod, path = child, f"{path}.{sub}"
            elif attr is None and (table or plain):
                attr = table or plain
            else:
                rest += name[step.start():step.end()]
        if attr is not None and attr.startswith(_HOOK_AND_STATE_DICT_FIELDS):
            continue
        if attr in _REGISTER_CALLS:
            found.extend(f"{path}.{n}" for n in _registered_in_forward(mod, attr))
        elif attr is not None:
            found.append(f"{path}.{attr}{rest}")
        else:
            assigned = _assigned_in_forward(mod)
            found.extend([f"{path}.{n}" for n in assigned]
                         or [f"an attribute of {path} ({type(mod).__name__}; set by a hook or a helper)"])
    return list(dict.fromkeys(found))


def _forward_source(mod: Any) -> str:
    fn = getattr(type(mod), "forward", None)
    try:
        return inspect.getsource(fn) if fn is not None else ""
    except (OSError, TypeError):
        return ""


def _assigned_in_forward(mod: Any) -> list[str]:
    """Plain attributes ``mod``'s forward assigns (``self.n += 1``, ``self.cache = x``), not its
    parameters, buffers or submodules."""
    state = set(parameters_of(mod)) | set(buffers_of(mod)) | set(children_of(mod))
    names = re.findall(r"\bself\.(\w+)\s*(?://|\*\*|>>|<<|[-+*/%@&|^])?=(?!=)", _forward_source(mod))
    return [n for n in dict.fromkeys(names) if n not in state]


def _registered_in_forward(mod: Any, table: str) -> list[str]:
    call = _REGISTER_CALLS[table]
    return list(dict.fromkeys(re.findall(rf"\bself\.{call}\(\s*['\"](\w+)['\"]", _forward_source(mod))))


def _readable_source(name: str, target: Any) -> str:
    """dynamo's name of a changed object in the user's words: ``G['log']`` -> ``log``, a closure cell
    (``...forward.__closure__[0].cell_contents``) -> the closed-over variable's name."""
    hooked = _HOOK_CELL.match(name)
    if hooked and getattr(target, "root", None) is not None:  # a variable a module's hook closes over
        subs, table, index, cell, rest = hooked.groups()
        mod, path = target.root, "self"
        for sub in re.findall(r"\[['\"]([^'\"]+)['\"]\]", subs):
            mod, path = children_of(mod).get(sub), f"{path}.{sub}"
        hooks = hook_functions(mod, table) if mod is not None else []
        fn = hooks[int(index)] if int(index) < len(hooks) else None
        freevars = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        if int(cell) < len(freevars):
            kind = table.strip("_").replace("_", " ")[:-1]  # "forward hook", "forward pre hook"
            return f"{freevars[int(cell)]}{rest} (closed over by a {kind} of {path})"
    cell = re.search(r"__closure__\[(\d+)\]\.cell_contents(.*)$", name)
    if cell:
        fn = getattr(target.forward, "__func__", target.forward)
        freevars = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        index = int(cell.group(1))
        if index < len(freevars):  # the variable, then what of it changed (self.bank, cache['k'])
            return freevars[index] + cell.group(2)
    module = re.fullmatch(r"G\[['\"]__import_(\w+)['\"]\]", name)
    if module:  # a store into a module's globals (`global count; count += 1`): the names forward declares
        fn = getattr(target.forward, "__func__", target.forward)
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        declared = [n.strip() for line in re.findall(r"^\s*global\s+([\w\s,]+)$", source, re.M)
                    for n in line.split(",")]
        return ", ".join(declared) or f"a global of module {module.group(1).replace('_dot_', '.')}"
    name = re.sub(r"^G\[['\"]__import_\w+['\"]\]\.", "", name)
    found = re.fullmatch(r"[LG]\[['\"]([^'\"]+)['\"]\](.*)", name)
    if found:
        rest = re.sub(r"\[['\"]([^'\"]+)['\"]\]", r".\1", found.group(2))
        return found.group(1) + rest
    return name


def _line_touching(target: Any, names: list[str]) -> Optional[str]:
    """The first line of the exported function's source that touches one of dynamo's named sources."""
    idents = [n.rsplit(".", 1)[-1] for n in names if re.fullmatch(r"[\w.]+", n)]
    fn = getattr(target.forward, "__func__", target.forward)
    try:
        lines, start = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    for offset, line in enumerate(lines[1:], 1):
        for ident in idents:
            if re.search(rf"\b{re.escape(ident)}\b\s*(\.|\[|=|\+=|-=)", line):
                return f'File "{file}", line {start + offset}, in {fn.__name__}\n    {line.strip()}'
    return None
