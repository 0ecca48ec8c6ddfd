"""The kinds and argument classes a graph signature is made of, interoperable with torch.export's.

``InputKind`` / ``OutputKind`` say what a placeholder or output is;
``TensorArgument``, ``SymIntArgument``, ``ConstantArgument``, ... name the
graph value (or hold the baked-in value) a spec refers to. They are re-exported
by :mod:`graphcap.signature`, where users import them.

Interoperability with code written for torch.export (torch's own utilities
such as torch's ``unflatten`` read graphcap's programs too):

- the argument classes are subclasses of torch.export.graph_signature's plain
  dataclasses (imported as data types only), so ``isinstance(arg,
  ConstantArgument)`` with torch's class holds, and they compare equal to
  torch's argument of the same kind and fields;
- ``InputKind`` / ``OutputKind`` are graphcap's own enums whose members
  compare equal to (and hash like) torch's members of the same name, and
  ``InputKind(torch_member)`` converts;
- :func:`as_argument` turns torch's argument into graphcap's.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Union

import torch.export.graph_signature as _torch_sig  # plain dataclasses and enums, used as data types


class _KindInterop(enum.Enum):
    """Members equal to torch's member of the same name; ``Kind(torch_member)`` converts."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return self is other
        if isinstance(other, enum.Enum) and type(other).__name__ == type(self).__name__:
            return self._name_ == other._name_
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._name_)  # what Enum hashes by, so torch's member finds ours in a dict

    @classmethod
    def _missing_(cls, value: object):
        if isinstance(value, enum.Enum) and type(value).__name__ == cls.__name__:
            return cls.__members__.get(value.name)
        return None


class InputKind(_KindInterop):
    """What a placeholder of the graph is: a user input, a parameter, a buffer, a lifted constant, ...

    Members equal torch.export's ``InputKind`` members of the same name.

    Args:
        value: a member's value, or torch's member of the same name (converted).

    Raises:
        ValueError: no member has that value or name.

    Example:
        >>> [s.target for s in ep.graph_signature.input_specs if s.kind is graphcap.InputKind.PARAMETER]
    """

    USER_INPUT = 1
    PARAMETER = 2
    BUFFER = 3
    CONSTANT_TENSOR = 4
    CUSTOM_OBJ = 5
    TOKEN = 6


class OutputKind(_KindInterop):
    """What an output of the graph is: a user output, a buffer or input mutation, a loss, ...

    Members equal torch.export's ``OutputKind`` members of the same name.

    Args:
        value: a member's value, or torch's member of the same name (converted).

    Raises:
        ValueError: no member has that value or name.

    Example:
        >>> [s.arg.name for s in ep.graph_signature.output_specs if s.kind is graphcap.OutputKind.USER_OUTPUT]
    """

    USER_OUTPUT = 1
    LOSS_OUTPUT = 2
    BUFFER_MUTATION = 3
    GRADIENT_TO_PARAMETER = 4
    GRADIENT_TO_USER_INPUT = 5
    USER_INPUT_MUTATION = 6
    TOKEN = 7
    PARAMETER_MUTATION = 8  # an in-place write to a parameter (inference IR; torch has the same kind)


class _ArgumentInterop:
    """Equality with torch's argument of the same kind: same torch base class, same fields.

    Arguments are mutable, as torch's are: torch's passes rename nodes through
    ``replace_all_uses``, which assigns ``arg.name``.
    """

    _torch_cls: type

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._torch_cls):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self._torch_cls))

    __hash__ = None  # mutable, as torch's are


@dataclasses.dataclass(eq=False)
class TensorArgument(_ArgumentInterop, _torch_sig.TensorArgument):
    """A tensor input or output of the graph, by its node's name.

    Args:
        name: the name of the placeholder or output node.

    Raises:
        Nothing.

    Example:
        >>> graphcap.TensorArgument(name="x") == torch.export.graph_signature.TensorArgument(name="x")
        True
    """

    _torch_cls = _torch_sig.TensorArgument


@dataclasses.dataclass(eq=False)
class SymIntArgument(_ArgumentInterop, _torch_sig.SymIntArgument):
    """A symbolic-int input or output of the graph (an int input of a dynamic program), by node name.

    Args:
        name: the name of the placeholder or output node.

    Raises:
        Nothing.

    Example:
        >>> graphcap.SymIntArgument(name="n")
    """

    _torch_cls = _torch_sig.SymIntArgument


@dataclasses.dataclass(eq=False)
class SymFloatArgument(_ArgumentInterop, _torch_sig.SymFloatArgument):
    _torch_cls = _torch_sig.SymFloatArgument


@dataclasses.dataclass(eq=False)
class SymBoolArgument(_ArgumentInterop, _torch_sig.SymBoolArgument):
    _torch_cls = _torch_sig.SymBoolArgument


@dataclasses.dataclass(eq=False)
class ConstantArgument(_ArgumentInterop, _torch_sig.ConstantArgument):
    """A Python value baked into the program (an int input, a string output).

    Args:
        name: the input's name (empty for an output).
        value: the value (int, float, bool, str or None).

    Raises:
        Nothing.

    Example:
        >>> graphcap.ConstantArgument(name="mode", value="fast")
    """

    _torch_cls = _torch_sig.ConstantArgument


@dataclasses.dataclass(eq=False)
class CustomObjArgument(_ArgumentInterop, _torch_sig.CustomObjArgument):
    """An opaque (script or custom-class) object; graphcap does not capture these yet."""

    _torch_cls = _torch_sig.CustomObjArgument


@dataclasses.dataclass(eq=False)
class TokenArgument(_ArgumentInterop, _torch_sig.TokenArgument):
    """An effect token; graphcap orders effects without tokens, so it never writes one."""

    _torch_cls = _torch_sig.TokenArgument


ArgumentSpec = Union[TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument,
                     CustomObjArgument, TokenArgument]

_ARGUMENT_CLASSES = (TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument,
                     CustomObjArgument, TokenArgument)
# Most derived first: graphcap's classes are subclasses of torch's.
_OURS_FOR_TORCH = {cls._torch_cls: cls for cls in _ARGUMENT_CLASSES}


def as_argument(arg: Any) -> Any:
    """graphcap's argument for one of torch's (same fields); graphcap's and other values pass through."""
    if isinstance(arg, _ARGUMENT_CLASSES):
        return arg
    ours = _OURS_FOR_TORCH.get(type(arg))
    if ours is None:
        return arg
    return ours(**{f.name: getattr(arg, f.name) for f in dataclasses.fields(type(arg))})
