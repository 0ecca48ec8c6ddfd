"""The case registry: the ``@case`` decorator and the ``Case`` record it files each case as.

The topic modules register their cases here; ``catalogue`` imports the topic modules
and hands out the filled registry, so nothing here imports a topic module.

The cases are small programs that show what export does with one construct each.

A case is an ``nn.Module`` class decorated with :func:`case`: its example
inputs, an optional ``dynamic_shapes`` spec, tags naming the construct
(``python.control-flow``, ``torch.cond``, ``torch.dynamic-shape``, ...), and
what export does with it: ``supported`` (then the program must give eager's
result on the example and on the case's ``other_inputs``) or the error type it
raises. The class docstring says what the case shows; its source (plus that of
any ``helpers``) is what ``docs/cases.md`` prints.

``tests/unit/test_case_catalogue.py`` checks every case's status;
``python -m graphcap.cases.docs`` writes the page.
"""
from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

SUPPORTED = "supported"


@dataclass
class Case:
    name: str
    description: str
    model_class: type
    example_args: tuple
    example_kwargs: dict
    dynamic_shapes: Any
    tags: frozenset
    raises: Optional[type]  # None: supported
    other_inputs: Any  # more inputs on which the program must match eager
    helpers: tuple[Callable, ...]
    topic: str
    beyond_torch: bool = False  # a case torch.export does not handle (graphcap's own)
    note: str = ""

    @property
    def status(self) -> str:
        return SUPPORTED if self.raises is None else f"raises {self.raises.__name__}"

    def model(self) -> torch.nn.Module:
        """A new instance; its random weights are the same every time (seeded, the caller's RNG kept)."""
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return self.model_class()

    def inputs(self) -> tuple[tuple, dict, Any]:
        """Fresh example args, kwargs and spec (given as values or as callables building them)."""
        def get(v):
            return v() if callable(v) else v
        return get(self.example_args), get(self.example_kwargs), get(self.dynamic_shapes)

    def more_inputs(self) -> list[tuple[tuple, dict]]:
        return self.other_inputs() if callable(self.other_inputs) else list(self.other_inputs)

    def source(self) -> str:
        """The helpers' code, then the case class's (without its ``@case(...)`` decorator)."""
        helpers = [textwrap.dedent(inspect.getsource(h)).rstrip() for h in self.helpers]
        lines = textwrap.dedent(inspect.getsource(self.model_class)).rstrip().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("class "))
        return "\n\n".join(helpers + ["\n".join(lines[start:])])


    def export_source(self) -> str:
        """How the case is exported, as code: its inputs and spec as written in its ``@case(...)``."""
        import ast
        code = textwrap.dedent(inspect.getsource(self.model_class))
        cls = ast.parse(code).body[0]
        given = {}
        for deco in getattr(cls, "decorator_list", []):
            for kw in getattr(deco, "keywords", []):
                value = kw.value.body if isinstance(kw.value, ast.Lambda) else kw.value
                given[kw.arg] = ast.get_source_segment(code, value)
        lines = [f"args = {given.get('args', '()')}"]
        call = f"graphcap.export({self.model_class.__name__}(), args"
        if "kwargs" in given:
            lines.append(f"kwargs = {given['kwargs']}")
            call += ", kwargs"
        if "dynamic_shapes" in given:
            lines.append(f"dynamic_shapes = {given['dynamic_shapes']}")
            call += ", dynamic_shapes=dynamic_shapes"
        return "\n".join(lines + [f"ep = {call})"])


CASES: dict[str, Case] = {}


def case(*, args: tuple, tags: set, kwargs: Optional[dict] = None, dynamic_shapes: Any = None,
         raises: Optional[type] = None, other_inputs: Optional[list] = None,
         helpers: tuple = (), beyond_torch: bool = False, note: str = "") -> Callable[[type], type]:
    """Register the decorated module class as a case named after the class (snake_case).

    ``args``/``kwargs``/``dynamic_shapes`` may be callables returning the value (built lazily, so
    importing the catalogue allocates no tensors and random inputs are drawn per use).
    ``other_inputs``: a callable returning ``[(args, kwargs), ...]``."""

    def register(cls: type) -> type:
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__).lstrip("_")
        assert name not in CASES, name
        CASES[name] = Case(
            name=name, description=inspect.cleandoc(cls.__doc__ or ""), model_class=cls,
            example_args=args, example_kwargs=kwargs or {}, dynamic_shapes=dynamic_shapes,
            tags=frozenset(tags), raises=raises, other_inputs=other_inputs or [], helpers=tuple(helpers),
            topic=cls.__module__.rsplit(".", 1)[-1], beyond_torch=beyond_torch, note=note)
        return cls

    return register
