"""The command line's own error: the arguments cannot be used (exit status 2)."""
from __future__ import annotations

from ..errors import GraphcapError


class UsageError(GraphcapError):
    """A command-line argument, file or factory cannot be used as given."""
