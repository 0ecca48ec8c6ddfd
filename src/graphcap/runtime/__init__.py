"""The runtime: ``ep.module()`` and the checks it runs on every call's inputs before computing.

:mod:`.exported_module` builds the runnable module (``build_module``,
``ExportedModule``): the program's graph reading its state as attributes,
writing updates back, taking and returning the user's structures.
:mod:`.input_checks` (``InputChecker``) checks each call's inputs against the
program: the structure (:mod:`.input_structure` draws the expected and the
given one), every leaf's dtype, device, sizes and baked-in values, the
relations between sizes; :mod:`.input_guards` words a failed check as
torch.export does too (``Guard failed: x.size()[0] >= 3``, in the forward's
own parameter names), beside graphcap's what/where/fix sentence.
"""
from .exported_module import ExportedModule, InputGuards, build_module

__all__ = ["ExportedModule", "InputGuards", "build_module"]
