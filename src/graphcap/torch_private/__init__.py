"""The one place where graphcap touches torch's private surface.

graphcap builds on torch's engines (FakeTensorMode, ShapeEnv, proxy-tensor
tracing, functionalization, pytree, the dispatcher), and some of what it needs
from them has no public name: an underscore function, a private module
(``torch._subclasses``, ``torch.utils._pytree``), a config flag, or a private
field of a torch object (``op._schema``, ``module._buffers``). Every such use
goes through this package, one named function (or re-exported name) per
touchpoint, so that

- a reader sees in one place what graphcap assumes about torch's internals;
- a torch release that renames or reshapes one of them breaks exactly one
  function here, and ``tests/unit/test_torch_private_surface.py`` names it;
- where two supported torch releases (2.10 through 2.15) differ, the adapter
  function hides the difference (nothing else in graphcap branches on the
  torch version); docs/torch-versions.md lists what an older line lacks.

Nothing outside this package names a private torch object;
``tests/unit/test_no_private_torch_outside_adapter.py`` enforces it.

Convention (every module here follows it)
-----------------------------------------
Modules are organised by engine area (``fake``, ``shapes``, ``fx``,
``dispatch``, ``ops``, ``decomp``, ``pytree``, ...). Each declares a
module-level dict ``RELIES_ON`` listing what it relies on:

- ``"torch.some.module._name": ("a", "b")`` -- a callable whose leading
  parameters are named ``a``, ``b`` (an empty tuple: callable, parameters not
  checked, e.g. a C function without a signature);
- ``"torch.some.module._name": None`` -- an attribute, class, config flag or
  object that must exist;
- ``"torch.some.module.Class#_field": None`` -- a field of an *instance*; the
  surface test checks it on an instance it builds (see ``SAMPLES`` below) or
  skips with the reason.

An entry that older supported torch lines lack is also listed in the module's
``SINCE`` dict, with the first release that has it (``{"torch.x._name": "2.12"}``):
the functions here read it only where it exists and do without it before (or
raise graphcap's ``UnsupportedError`` naming that release, where the feature
cannot be had without it); the surface test skips it on an older torch.

A module may also define ``SAMPLES``: a dict from a class's dotted path to a
zero-argument function returning a cheap instance, for the ``#field`` checks of
classes the surface test cannot build itself.

Keep imports here light: this ``__init__`` imports nothing, and adapter
modules import torch's private modules lazily where graphcap's callers did, so
``import graphcap`` does not get slower.
"""
