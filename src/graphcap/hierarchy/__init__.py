"""The module hierarchy of an exported program, rebuilt: ``graphcap.hierarchy.unflatten(ep)``.

One job per module: :mod:`.scopes` reads which module call every node ran in,
:mod:`.prepare` readies a copy of the flat graph, :mod:`.state` places the
tensors at their FQNs, :mod:`.build` cuts one graph per call and wires the
calls, :mod:`.preserved` keeps preserved call signatures swappable,
:mod:`.modules` holds the module classes, :mod:`.flat_args` adapts calls shaped
otherwise than the program (``flat_args_adapter``), and :mod:`.unflatten` is the entry.
"""
from .preserved import SubmoduleSignatureError
from .unflatten import unflatten

__all__ = ["unflatten", "SubmoduleSignatureError"]
