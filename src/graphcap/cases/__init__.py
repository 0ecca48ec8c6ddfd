"""The case catalogue: small programs showing what export does with one construct each.

``all_cases()`` returns them by name (see ``catalogue``; ``registry`` holds the ``@case`` decorator); ``docs`` writes
``docs/cases.md``. The cases are user programs: they import graphcap's public
names only, and nothing in graphcap imports them.
"""
from .catalogue import all_cases  # noqa: F401
from .registry import SUPPORTED, Case, case  # noqa: F401
