"""Run a hot section of Python with room on CPython's frame stack.

CPython 3.11 keeps the frames of running Python functions in a stack of
memory chunks (16 KB each): a call whose frame does not fit in the current
chunk maps a new one (``mmap``), and the return that empties it unmaps it
(``munmap``) at once. When a loop's calls sit right at a chunk's end, every
call maps and unmaps memory and touches a fresh page: a system call pair and
a page fault per Python call. Tracing is such a loop — C++ calling back into
Python for every symbolic size operation, every dispatch — and whether it
sits on a boundary depends only on how deep the stack happens to be: the
Llama-3-70B-architecture export (``bench/llama70b_bench.py``) crossed one at
80 layers, not at 72, and spent 3-4 of its ~7 CPU seconds in 500,000
``mmap``/``munmap`` pairs (``bench/RESULTS.md``, 2026-11-26 morning).

:func:`with_room` calls a function from a frame as large as a chunk, and
:func:`large_frame` makes a function's own frame that large: such a frame
never fits in the chunk in use, so CPython starts a fresh 128 KB chunk for
it, and every call made below it finds 64 KB of room in that chunk — no
mapping per call, whatever the depth of the caller. The cost is one
``mmap``/``munmap`` pair per call, so it is for sections (a module call, a
copied block), not single operations. The large frame's value stack is never
touched beyond what the call uses, and nothing else changes: the same
function runs with the same arguments, and its frame
(graphcap's file, not a ``forward``) is not a user frame of any stack trace.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

_R = TypeVar("_R")

# A frame of this many words (8 bytes each) plus CPython's per-chunk reserve (1,000 words) needs
# more than 64 KB: CPython maps a 128 KB chunk for it and the calls below it get the other ~64 KB.
_FRAME_WORDS = 8 * 1024


def _call(fn: Callable[..., _R], args: tuple, kwargs: dict) -> _R:
    return fn(*args, **kwargs)


_call.__code__ = _call.__code__.replace(co_stacksize=_FRAME_WORDS)


def with_room(fn: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """``fn(*args, **kwargs)``, its calls starting at the beginning of a fresh frame-stack chunk."""
    return _call(fn, args, kwargs)


_F = TypeVar("_F", bound=Callable[..., Any])


def large_frame(fn: _F) -> _F:
    """Give ``fn`` itself a frame as large as :func:`with_room`'s (its code object's value stack
    enlarged; the function is otherwise the same): the calls it makes get the room, with no
    frame added between its caller and it — for a function on the path of every call at every
    level of a deep module tree, where each extra frame would count against the recursion limit.
    ``fn.small_code`` keeps the original code."""
    fn.small_code = fn.__code__  # type: ignore[attr-defined]
    fn.__code__ = fn.__code__.replace(co_stacksize=max(fn.__code__.co_stacksize, _FRAME_WORDS))
    return fn
