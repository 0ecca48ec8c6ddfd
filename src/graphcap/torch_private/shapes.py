"""torch's symbolic-shape engine, where graphcap reaches past ShapeEnv's public surface.

- Guard source locations: ShapeEnv records where each guard was raised through
  its private ``_get_stack_summary`` / ``_get_sloc``; graphcap wraps the former
  on one ShapeEnv instance (never the class) so a guard also records the
  user's line, and reads the latter when it rebuilds ranges at load.
- ``torch.fx.experimental._config.backed_size_oblivious``: the flag that makes
  size-0/1 questions be answered for the general size.
- ``torch._guards``: the ``Source`` classes naming where a symbol came from,
  and ``SLoc`` (a guard's location).
- ``torch.utils._traceback.CapturedTraceback``: the stack object a
  ``RuntimeAssert`` carries.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from torch._guards import GuardSource, SLoc, Source
from torch.utils._traceback import CapturedTraceback

RELIES_ON = {
    "torch._guards.Source": None,
    "torch._guards.GuardSource": None,
    "torch._guards.SLoc": ("framework_loc", "maybe_user_loc"),
    "torch.utils._traceback.CapturedTraceback.extract": (),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._get_stack_summary": ("self", "is_debug", "framework_loc"),
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._get_sloc": ("self", "framework_loc"),
    "torch.fx.experimental._config.patch": (),
    "torch.fx.experimental._config.backed_size_oblivious": None,
}

__all__ = ["GuardSource", "SLoc", "Source", "CapturedTraceback", "stack_summary", "own_stack_summary",
           "set_stack_summary", "restore_stack_summary", "guard_location", "backed_size_oblivious"]


def stack_summary(env: Any) -> Callable[..., Any]:
    """The (bound) function ``env`` calls to locate a guard: ``(is_debug, framework_loc) -> (SLoc, str)``.

    Relies on ``ShapeEnv._get_stack_summary(self, is_debug=False, framework_loc=None)``.
    """
    return env._get_stack_summary


def own_stack_summary(env: Any) -> Any:
    """The locator set on this instance by :func:`set_stack_summary`, or None (the class's is in use)."""
    return env.__dict__.get("_get_stack_summary")


def set_stack_summary(env: Any, summary: Callable[..., Any]) -> None:
    """Make this one ShapeEnv locate guards with ``summary`` (an instance attribute; the class is untouched)."""
    env._get_stack_summary = summary


def restore_stack_summary(env: Any, saved: Any) -> None:
    """Undo :func:`set_stack_summary`: ``saved`` is what :func:`own_stack_summary` returned before."""
    if saved is None:
        env.__dict__.pop("_get_stack_summary", None)
    else:
        env._get_stack_summary = saved


def guard_location(env: Any) -> SLoc:
    """Where the engine is now, as a guard location (what ShapeEnv stores beside a range).

    Relies on ``ShapeEnv._get_sloc(self, framework_loc=None)``.
    """
    return env._get_sloc()


@contextlib.contextmanager
def backed_size_oblivious() -> Iterator[None]:
    """Within the block, size-0/1 questions about backed sizes are answered for the general size.

    Relies on the config flag ``torch.fx.experimental._config.backed_size_oblivious``
    and that config module's ``patch``.
    """
    import torch.fx.experimental._config as config
    with config.patch(backed_size_oblivious=True):
        yield
