"""An on/off setting of graphcap's own: set per thread for a block, else read from an environment
variable (on unless it says 0, false, no or off). Block reuse and the recorder's shortcuts use it,
so tests can compare programs made both ways on one thread while other threads keep theirs."""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

_OFF_WORDS = ("0", "false", "no", "off")


class ThreadSwitch:
    def __init__(self, env_var: str) -> None:
        self.env_var = env_var
        self._local = threading.local()

    def enabled(self) -> bool:
        """The value set on this thread, else the environment's (on by default)."""
        explicit = getattr(self._local, "value", None)
        if explicit is not None:
            return bool(explicit)
        return os.environ.get(self.env_var, "1").strip().lower() not in _OFF_WORDS

    @contextlib.contextmanager
    def set_on_this_thread(self, on: bool) -> Iterator[None]:
        """Within the block, on this thread, the switch is ``on``; then what it was."""
        saved = getattr(self._local, "value", None)
        self._local.value = bool(on)
        try:
            yield
        finally:
            self._local.value = saved
