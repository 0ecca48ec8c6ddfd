"""The ``Guard failed: x.size()[0] <= 2`` line of a refused input, in torch.export's words.

graphcap's input checks name inputs by their place in ``(args, kwargs)``
(``*args[0].shape[1]``); torch.export's module names them by the forward
argument (``x.size()[1]``, ``ys[0].size()[0]``, ``n`` for an int), and code
written against torch looks for that text. Each check failure carries both:
graphcap's sentence, then the condition that failed over torch's names.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

import sympy

_ARGS = re.compile(r"^\*args\[(\d+)\]")
_KWARGS = re.compile(r"^\*\*kwargs\[(['\"])(.+?)\1\]")


def torch_name(path: str, arg_names: Optional[Sequence[str]]) -> str:
    """``*args[0].shape[1]`` → ``x.size()[1]``; ``**kwargs['mask']`` → ``mask``."""
    m = _ARGS.match(path)
    if m is not None:
        i = int(m.group(1))
        head = arg_names[i] if arg_names is not None and i < len(arg_names) else f"args[{i}]"
        rest = path[m.end():]
    else:
        m = _KWARGS.match(path)
        if m is None:
            return path
        head, rest = m.group(2), path[m.end():]
    return head + re.sub(r"\.shape\[(\d+)\]", r".size()[\1]", rest)


def expression(expr: Any, paths: dict[Any, str], arg_names: Optional[Sequence[str]]) -> str:
    """A sympy condition over input symbols as Python over torch's input names."""
    from torch.utils._sympy.printers import PythonPrinter
    named = sympy.sympify(expr).xreplace(
        {s: sympy.Symbol(torch_name(p, arg_names), integer=True) for s, p in paths.items()})
    return PythonPrinter().doprint(named)


def divisibility(name: str, expr: Any) -> str:
    """The condition a size ``name`` breaks when it is not ``a*root + b`` for an integer root."""
    (root,) = expr.free_symbols
    poly = sympy.Poly(expr, root)
    if poly.degree() != 1:
        return f"{name} is of the form {expr}"
    a, b = poly.all_coeffs()
    return f"{name} % {a} == 0" if b == 0 else f"({name} - {b}) % {a} == 0"


def line(condition: str) -> str:
    return f" Guard failed: {condition}"
