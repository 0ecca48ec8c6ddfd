"""The case catalogue: small programs showing what export does with one construct each.

``all_cases()`` returns them by name (see ``catalogue``); ``docs`` writes
``docs/cases.md``. The cases are user programs: they import graphcap's public
names only, and nothing in graphcap imports them.
"""
from .catalogue import SUPPORTED, Case, all_cases, case  # noqa: F401
